"""The layers of docs/architecture.md, checked on the source with ast (nothing of readtrace is imported):
no module imports one of a higher layer, the child side (what runs in the user's process) imports
nothing of the host side, and no two modules import each other, directly or around a loop."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "readtrace"

# Lowest first; a module belongs to the longest prefix that names it. A module may import its own
# layer and those below it, never one above.
LAYERS: list[tuple[str, ...]] = [
    ("readtrace", "readtrace.__version__", "readtrace.errors", "readtrace.escape", "readtrace.lazy",
     "readtrace.owners", "readtrace.memory", "readtrace.validate"),
    ("readtrace.fs", "readtrace.loader", "readtrace.pagecache"),  # storage basics, standard library only
    ("readtrace.runstate", "readtrace.replace", "readtrace.exits"),
    ("readtrace.rerun",),  # the host <-> child contract
    ("readtrace.inject", "readtrace.trace", "readtrace.simfs", "readtrace.measure.profile", "readtrace.measure.probe"),
    ("readtrace.analyze", "readtrace.record", "readtrace.ptrace", "readtrace.fuselog"),
    ("readtrace.report",),
    ("readtrace.fix",),
    ("readtrace.workloads",),
    ("readtrace.demo", "readtrace.commands", "readtrace.cli", "readtrace.__main__"),
]

# What runs in the user's process on a rerun, and what it must never import (the host side).
CHILD = ("readtrace.inject", "readtrace.rerun.protocol", "readtrace.rerun.records", "readtrace.rerun.rankplan",
         "readtrace.loader", "readtrace.pagecache")
HOST = ("readtrace.fix", "readtrace.commands", "readtrace.cli", "readtrace.demo", "readtrace.report",
        "readtrace.analyze", "readtrace.record", "readtrace.ptrace", "readtrace.fuselog", "readtrace.simfs",
        "readtrace.workloads", "readtrace.rerun.environment")


def _name(path: Path) -> str:
    return ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The readtrace modules ``path`` imports anywhere (also inside functions): ``from a import b``
    names module ``a.b`` where that is a module, else ``a``."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                      for a in node.names}
    return {m for m in found if m == "readtrace" or m.startswith("readtrace.")}


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _layer(name: str) -> int:
    best = max(((len(p), i) for i, layer in enumerate(LAYERS) for p in layer if _under(name, p)), default=None)
    assert best is not None, f"{name}: in no layer of tests/test_layers.py (add it where it belongs)"
    return best[1]


def _graph() -> dict[str, set[str]]:
    paths = {_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: _imports(path, set(paths)) - {name} for name, path in paths.items()}


def test_no_module_imports_a_higher_layer():
    upward = [f"{a} (layer {_layer(a)}) imports {b} (layer {_layer(b)})"
              for a, targets in _graph().items() for b in sorted(targets)
              if _layer(b) > _layer(a) and not _under(a, "readtrace.__init__")]
    assert upward == []


def test_the_child_side_imports_nothing_of_the_host_side():
    crossing = [f"{a} imports {b}" for a, targets in _graph().items() if any(_under(a, c) for c in CHILD)
                for b in sorted(targets) if any(_under(b, h) for h in HOST)]
    assert crossing == []


def test_no_import_cycle_between_packages():
    """Packages (and top-level modules) as nodes: no loop, so each can be read bottom-up."""
    def unit(name: str) -> str:
        parts = name.split(".")
        return ".".join(parts[:2])

    edges: dict[str, set[str]] = {}
    for a, targets in _graph().items():
        edges.setdefault(unit(a), set()).update(unit(b) for b in targets if unit(b) != unit(a) and b != "readtrace")
    cycles = []

    def visit(node: str, path: list[str]) -> None:
        for nxt in sorted(edges.get(node, ())):
            if nxt in path:
                cycles.append(" -> ".join(path[path.index(nxt):] + [nxt]))
            elif nxt not in done:
                visit(nxt, path + [nxt])
        done.add(node)

    done: set[str] = set()
    for start in sorted(edges):
        if start not in done:
            visit(start, [start])
    assert cycles == []


def test_every_module_has_a_layer():
    assert all(_layer(name) >= 0 for name in _graph())
