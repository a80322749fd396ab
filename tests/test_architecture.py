"""The package's layers: one folder per pipeline stage, every import follows the README's code map, which
lists every module, no imports go round in a circle, and docs/architecture.md shows the current import
graph (scripts/architecture.py)."""

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
    assert {
        "runs/checkpoint.py",
        "runs/run_folder.py",
        "config/schema.py",
        "__main__.py",
    } <= LAYERS.keys()


def test_the_top_level_is_the_foundation_the_api_and_one_folder_per_stage():
    package = architecture.PACKAGE
    entries = sorted(path.name for path in package.iterdir() if path.name != "__pycache__")
    folders = [name for name in entries if (package / name).is_dir()]
    assert folders == [
        "cli",
        "config",
        "data",
        "decoding",
        "evaluation",
        "model",
        "runs",
        "serving",
        "training",
        "vocab",
    ]
    assert len(entries) <= 17
    for folder in folders:  # each folder is one layer of the code map
        assert len({LAYERS[m] for m in LAYERS if m.startswith(f"{folder}/")}) == 1
    for init in package.glob("*/**/__init__.py"):  # each package says its job first thing, in a dozen modules
        docstring = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))
        assert docstring and len(docstring.split()) >= 8, init.parent
        assert len([m for m in init.parent.glob("*.py") if m.name != "__init__.py"]) <= 12, init.parent


def test_evaluations_text_metrics_run_no_model():
    """evaluation/metrics/ scores texts: it imports nothing that loads or runs a model (evaluation/models/
    does, and scores what the models give with it)."""
    runs_models = ("evaluation/models/", "decoding/", "runs/", "model/", "training/")
    metrics = {
        module: targets for module, targets in GRAPH.items() if module.startswith("evaluation/metrics/")
    }
    assert len(metrics) >= 8
    assert {
        module: sorted(t for t in targets if t.startswith(runs_models)) for module, targets in metrics.items()
    } == {module: [] for module in metrics}


def test_every_import_goes_to_the_same_or_a_lower_layer():
    assert architecture.problems(LAYERS, GRAPH) == []


def test_the_check_catches_an_import_that_points_up():
    graph = {**GRAPH, "vocab/pieces.py": GRAPH["vocab/pieces.py"] | {"training/distributed.py"}}
    assert architecture.problems(LAYERS, graph) == [
        "vocab/pieces.py (layer 4) imports training/distributed.py (layer 9)"
    ]
    assert architecture.problems({k: v for k, v in LAYERS.items() if k != "io.py"}, GRAPH)[0] == (
        "README code map: `io.py` is not listed"
    )


def test_the_check_catches_a_folder_across_layers_and_an_import_cycle():
    layers = {**LAYERS, "decoding/shortlist_learning.py": LAYERS["evaluation/metrics/by_length.py"]}
    assert architecture.problems(layers, GRAPH) == ["README code map: folder `decoding/` spans layers 7, 8"]
    graph = {**GRAPH, "decoding/search.py": GRAPH["decoding/search.py"] | {"decoding/translate.py"}}
    assert architecture.problems(LAYERS, graph) == [
        "import cycle: decoding/search.py -> decoding/translate.py -> decoding/search.py"
    ]
    assert architecture.cycles({"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}) == [["a", "b", "c"]]
    assert architecture.cycles(GRAPH) == []


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
    code = (
        "def f():\n    from .heatmap import draw\nif TYPE_CHECKING:\n    from ...model.states import State\n"
    )
    assert targets("evaluation/models/systems.py", code) == {
        "evaluation/models/heatmap.py",
        "model/states.py",
    }
    train = "training/train.py"
    assert targets(train, "from seq2seq_attn.config.reference import x") == {"config/reference.py"}
    assert targets(train, "from numpy import array") == set()
    assert GRAPH["model/seq2seq.py"] >= {"model/cross_entropy.py", "config/__init__.py"}


def test_docs_architecture_md_is_current():
    current = architecture.render(LAYERS, GRAPH)
    assert architecture.DOC.read_text(encoding="utf-8") == current, "run: python scripts/architecture.py"
