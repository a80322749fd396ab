"""The package's layers: every import follows the README's code map, which lists every module, and
docs/architecture.md shows the current import graph (scripts/architecture.py)."""

from __future__ import annotations

import ast
from pathlib import Path

from helpers import load_script

ROOT = Path(__file__).resolve().parent.parent


architecture = load_script("architecture")
LAYERS = architecture.code_map(architecture.README.read_text(encoding="utf-8"))
GRAPH = architecture.import_graph()


def test_the_code_map_lists_every_module_and_only_modules_that_exist():
    assert sorted(GRAPH.keys() - LAYERS.keys()) == []  # a module missing from the README's code map
    assert sorted(LAYERS.keys() - GRAPH.keys()) == []  # an entry naming no file
    assert {"checkpoint.py", "run_dir.py", "config/schema.py", "cli/plot.py", "__main__.py"} <= LAYERS.keys()


def test_every_import_goes_to_the_same_or_a_lower_layer():
    assert architecture.problems(LAYERS, GRAPH) == []


def test_the_check_catches_an_import_that_points_up():
    graph = {**GRAPH, "vocab.py": GRAPH["vocab.py"] | {"train.py"}}
    assert architecture.problems(LAYERS, graph) == [
        f"vocab.py (layer 4) imports train.py (layer {LAYERS['train.py']})"
    ]
    assert architecture.problems({k: v for k, v in LAYERS.items() if k != "io.py"}, GRAPH)[0] == (
        "README code map: `io.py` is not listed"
    )


def test_imports_resolve_to_modules_relative_ones_inside_functions_and_type_checking_included():
    def targets(module: str, code: str) -> set[str]:
        return {
            t
            for node in ast.walk(ast.parse(code))
            if isinstance(node, ast.ImportFrom)
            for t in architecture.resolve(module, node)
        }

    assert targets("cli/evaluate.py", "from ..config import EvalConfig") == {"config/__init__.py"}
    assert targets("cli/__init__.py", "from . import align as align_cli") == {"cli/align.py"}
    assert targets("data/prepare.py", "from .. import __version__") == {"__init__.py"}
    code = "def f():\n    from .heatmap import draw\nif TYPE_CHECKING:\n    from .model.states import State\n"
    assert targets("translate.py", code) == {"heatmap.py", "model/states.py"}
    assert targets("train.py", "from seq2seq_attn.config.reference import x") == {"config/reference.py"}
    assert targets("train.py", "from numpy import array") == set()
    assert GRAPH["model/seq2seq.py"] >= {"model/cross_entropy.py", "config/__init__.py"}


def test_docs_architecture_md_is_current():
    current = architecture.render(LAYERS, GRAPH)
    assert architecture.DOC.read_text(encoding="utf-8") == current, "run: python scripts/architecture.py"
