"""The package's modules import each other without a cycle, function-level imports included.

A cycle hidden behind an import inside a function still ties two modules into one job; here every
``import attention_conformance...`` / ``from attention_conformance... import ...`` of every module under
conformance/, oracles/, kernels/ and property_tests/ is an edge (read with `ast`, nothing is imported), and
the graph must be acyclic apart from a module's import of itself (a worker's ``__main__`` re-entry).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PKG = "attention_conformance"
#: package-dir of pyproject.toml: folder -> dotted prefix
FOLDERS = {"conformance": PKG, "oracles": f"{PKG}.oracles", "kernels": f"{PKG}.kernels",
           "property_tests": f"{PKG}.property_tests"}
#: scripts, not modules (standalone repro files import nothing from the package)
SKIP = ("conformance/repros/",)


def _modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for folder, prefix in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith(SKIP):
                continue
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([prefix, *parts])] = path
    return out


def _edges(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")
                up = up[: len(up) - (node.level - 1)]
                base = ".".join([*up, base] if base else up)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in modules:
                t = t.rpartition(".")[0]
            if t and t.startswith(PKG) and t != name:
                found.add(t)
    return found


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` as a list of modules, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return [*stack[stack.index(m):], m]
            if m not in state and (c := visit(m)):
                return c
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state and (c := visit(n)):
            return c
    return None


def test_no_import_cycle():
    modules = _modules()
    graph = {n: _edges(n, p, modules) for n, p in modules.items()}
    cycle = _cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_graph_sees_the_package():
    modules = _modules()
    assert f"{PKG}.cli" in modules and f"{PKG}.cases.catalog" in modules and f"{PKG}.oracles.forward" in modules
    assert _edges(f"{PKG}.cases.catalog", modules[f"{PKG}.cases.catalog"], modules) >= {f"{PKG}.cases.case"}
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
