"""The package's import graph: no cycles, and layers that only import downwards.

Module-level imports only (those inside functions and ``if TYPE_CHECKING:`` run late or never, and
are how a lower layer names a higher one's type without importing it at load time). A package's
``__init__`` counts as importing what it re-exports.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "codemask"

# lower layers first; a module may import its own layer and the ones before it (longest prefix wins)
LAYERS = [
    ("codemask.errors", "codemask._version", "codemask.shipped", "codemask.source_digest"),
    ("codemask.grammar.ir",),  # the IR every front-end produces
    # IR -> automata
    ("codemask.engine.collection", "codemask.engine.state_table", "codemask.engine.token_trie",
     "codemask.engine.native", "codemask.engine.automaton", "codemask.vocab"),
    ("codemask.grammar",),  # front-ends
    ("codemask.engine", "codemask.assets"),
    ("codemask.decoding", "codemask.compilers"),
    ("codemask.monitors", "codemask.repetition", "codemask.adadec", "codemask.speculative", "codemask.metrics"),
    ("codemask.generate", "codemask.hf", "codemask.cli", "codemask.__main__", "codemask.server",
     "codemask.integrations"),
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p) for p in PACKAGE.rglob("*.py")}


def top_level_imports(path: Path) -> set[str]:
    """Modules of codemask imported when ``path`` is loaded."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        for child in [node] if not isinstance(node, ast.Try) else node.body:
            if isinstance(child, ast.Import):
                found |= {a.name for a in child.names if a.name.startswith("codemask")}
            elif isinstance(child, ast.ImportFrom) and (child.module or "").startswith("codemask"):
                base = child.module or ""
                submodules = {f"{base}.{a.name}" for a in child.names} & MODULES
                found |= submodules  # `from package import module` loads the module
                if len(submodules) < len(child.names):
                    found.add(base)  # and a name defined in the package's __init__ loads that
    return (found & MODULES) - {module_name(path)}


def graph() -> dict[str, set[str]]:
    return {module_name(p): top_level_imports(p) for p in PACKAGE.rglob("*.py")}


def test_no_import_cycles() -> None:
    edges = graph()
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append([*path[path.index(nxt):], nxt] if nxt in path else [node, nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    assert cycles == [], "\n".join(" -> ".join(c) for c in cycles)


def layer_of(module: str) -> int:
    """The layer of ``module``: that of the longest prefix listed (the package itself is the top)."""
    if module == "codemask":
        return len(LAYERS) - 1
    matches = [(len(prefix), i) for i, layer in enumerate(LAYERS) for prefix in layer
               if module == prefix or module.startswith(prefix + ".")]
    assert matches, f"{module} is in no layer: add it to LAYERS"
    return max(matches)[1]


def test_layers_only_import_downwards() -> None:
    upward = [f"{m} -> {t}" for m, targets in graph().items() for t in targets if layer_of(t) > layer_of(m)]
    assert upward == []
