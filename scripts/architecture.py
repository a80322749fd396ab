"""The package's layers and import graph: checked against the code, and drawn into docs/architecture.md.

The README's code map is the one place that says which layer each module belongs to (its first column,
1 at the bottom); a folder is one pipeline stage, so all of its modules sit in one layer. The rules: a
module imports only from its own layer or from layers below it, every import counted (module level,
inside functions, and under TYPE_CHECKING), and no chain of imports leads back to where it started (a
cycle). This script reads the code map and every module's imports, lists the rules' violations and the
code map's stale entries, and writes the import graph into docs/architecture.md; tests/test_architecture.py
runs its checks.

    python scripts/architecture.py          # rewrite docs/architecture.md
    python scripts/architecture.py --check  # exit 1 on a violation or a stale code map or document
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "seq2seq_attn"
README = ROOT / "README.md"
DOC = ROOT / "docs" / "architecture.md"
ROW = re.compile(r"^\|\s*(\d+)\s[^|]*\|([^|]*)\|")  # | 3 data | `data/`, `data/clean.py` | role |


def package_modules() -> list[str]:
    """Every module of the package as a path under seq2seq_attn/, e.g. `model/decoder.py`."""
    return sorted(str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py"))


def code_map(readme: str) -> dict[str, int]:
    """{module path: layer} from the README's code map; a folder entry `data/` means `data/__init__.py`."""
    section = readme.split("## Code map", 1)[1].split("\n## ", 1)[0]
    layers = {}
    for line in section.splitlines():
        if match := ROW.match(line):
            for entry in re.findall(r"`([^`]+)`", match[2]):
                layers[entry + "__init__.py" if entry.endswith("/") else entry] = int(match[1])
    return layers


def resolve(module: str, node: ast.ImportFrom) -> list[str]:
    """The package modules an import in `module` (a path under seq2seq_attn/) names, as paths."""
    if node.level:
        base = Path(module).parent.parts[: len(Path(module).parent.parts) - (node.level - 1)]
    elif node.module and node.module.split(".")[0] == PACKAGE.name:
        base = ()
        node = ast.ImportFrom(module=".".join(node.module.split(".")[1:]) or None, names=node.names, level=1)
    else:
        return []
    stem = [*base, *(node.module.split(".") if node.module else [])]
    if node.module:
        return [path for path in [_module_path(stem)] if path is not None]
    # `from . import align` names a module; `from .. import __version__` a name in the package
    found = [_module_path([*stem, alias.name]) or _module_path(stem) for alias in node.names]
    return [path for path in found if path is not None]


def _module_path(parts: list[str]) -> str | None:
    for candidate in ("/".join(parts) + ".py", "/".join([*parts, "__init__.py"])):
        if (PACKAGE / candidate).is_file():
            return candidate.removeprefix("/")
    return None


def import_graph() -> dict[str, set[str]]:
    """{module: the package modules it imports}, every import statement of the file counted."""
    graph = {}
    for module in package_modules():
        tree = ast.parse((PACKAGE / module).read_text(encoding="utf-8"))
        targets = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                targets.update(resolve(module, node))
            elif isinstance(node, ast.Import) and any(a.name.startswith(PACKAGE.name) for a in node.names):
                raise SystemExit(f"{module}: write `from . import x`, not `import {PACKAGE.name}...`")
        graph[module] = targets - {module}
    return graph


def problems(layers: dict[str, int], graph: dict[str, set[str]]) -> list[str]:
    """Modules missing from the code map, entries naming no module, folders spanning layers, imports
    that point up a layer, and import cycles."""
    found = [f"README code map: `{m}` is not listed" for m in sorted(graph.keys() - layers.keys())]
    found += [f"README code map: `{m}` names no module" for m in sorted(layers.keys() - graph.keys())]
    folders: dict[str, set[int]] = {}
    for module, layer in layers.items():
        if "/" in module:
            folders.setdefault(module.split("/")[0] + "/", set()).add(layer)
    found += [
        f"README code map: folder `{folder}` spans layers {', '.join(map(str, sorted(spanned)))}"
        for folder, spanned in sorted(folders.items())
        if len(spanned) > 1
    ]
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            if module in layers and target in layers and layers[target] > layers[module]:
                found.append(f"{module} (layer {layers[module]}) imports {target} (layer {layers[target]})")
    found += [f"import cycle: {' -> '.join([*cycle, cycle[0]])}" for cycle in cycles(graph)]
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each group of modules that import one another in a circle (a strongly connected
    component of more than one module, Tarjan's algorithm), as the modules in import order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in sorted(graph.get(module, ())):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = {stack.pop()}
            while module not in group:
                group.add(stack.pop())
            if len(group) > 1:
                groups.append(group)

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return [_cycle_in(group, graph) for group in sorted(groups, key=min)]


def _cycle_in(group: set[str], graph: dict[str, set[str]]) -> list[str]:
    """A path from the group's first module back to itself, through the group only (breadth first)."""
    start = min(group)
    paths = {target: [start, target] for target in sorted(graph[start] & group)}
    queue = list(paths)
    while start not in paths:
        module = queue.pop(0)
        for target in sorted(graph[module] & group):
            if target not in paths:
                paths[target] = [*paths[module], target]
                queue.append(target)
    return paths[start][:-1]


def render(layers: dict[str, int], graph: dict[str, set[str]]) -> str:
    """docs/architecture.md: the layers, the graph between them, and each module's imports."""
    edges = sorted(
        {(layers[m], layers[t]) for m, targets in graph.items() for t in targets if layers[t] != layers[m]}
    )
    names = {}
    for line in README.read_text(encoding="utf-8").split("## Code map", 1)[1].splitlines():
        if match := ROW.match(line):
            names[int(match[1])] = line.split("|")[1].strip()
    lines = [
        "# Architecture",
        "",
        "Generated by `python scripts/architecture.py` from the README's [code map](../README.md#code-map)",
        "and the imports in the code; `tests/test_architecture.py` keeps it current. Do not edit.",
        "",
        "The package is built in layers, 1 at the bottom, one folder per pipeline stage. A module imports",
        "only from its own layer or from a layer below it (every import counted: module level, inside",
        "functions and under `TYPE_CHECKING`), and no imports go round in a circle, so each stage of the",
        "pipeline can be read, tested and replaced without the stages above it.",
        "",
        "## Layers and the imports between them",
        "",
        "```mermaid",
        "graph BT",
        *[f'  L{n}["{names[n]}"]' for n in sorted(names)],
        *[f"  L{low} --> L{high}" for high, low in edges],
        "```",
        "",
        "An arrow points from the imported layer up to the layer that imports it.",
        "",
        "## Modules and what they import",
        "",
        "| layer | module | imports (package modules) |",
        "|---|---|---|",
    ]
    for module in sorted(graph, key=lambda m: (layers.get(m, 0), m)):
        imported = ", ".join(f"`{t}`" for t in sorted(graph[module], key=lambda t: (layers.get(t, 0), t)))
        lines.append(f"| {layers.get(module, '?')} | `{module}` | {imported or '(none)'} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check; exit 1 on any problem")
    args = parser.parse_args()
    layers, graph = code_map(README.read_text(encoding="utf-8")), import_graph()
    found = problems(layers, graph)
    for problem in found:
        print(problem, file=sys.stderr)
    if found:
        return 1
    text = render(layers, graph)
    if args.check:
        if DOC.read_text(encoding="utf-8") != text:
            print(f"{DOC} is stale: run python scripts/architecture.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text, encoding="utf-8")
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
