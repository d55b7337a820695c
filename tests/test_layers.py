"""The layers of ../shared/ARCHITECTURE.md as a contract over the import graph: every module of dsgen (its
``methods/`` and ``benchmarks/`` folders included) sits on one floor and imports only from its own floor or lower
ones, and the only import loops are registries (a folder's base module and the implementations it registers).

Every import counts, at module level or inside a function (a lazy import is still an edge): the graph is read from
the source, not from what happens to be imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"dsgen": "dsgen", "methods": "dsgen.methods", "benchmarks": "dsgen.benchmarks"}  # folder -> package

# Floors from the ground up (ARCHITECTURE.md, "Layers"): a module is on the floor of the longest prefix listed.
FLOORS = [
    ("foundations", ["dsgen.errors", "dsgen.console", "dsgen.progress", "dsgen.seeding", "dsgen.suggest",
                     "dsgen.citations", "dsgen.config", "dsgen.artifacts", "dsgen.registry", "dsgen.identity",
                     "dsgen.component", "dsgen.folders", "dsgen.redaction", "dsgen.heap"]),
    ("data and models", ["dsgen.data", "dsgen.models", "dsgen.encoders", "dsgen.taskspec", "dsgen.task_specs",
                         "dsgen.endpoints"]),
    ("stages", ["dsgen.generation", "dsgen.labelling", "dsgen.reweighting", "dsgen.training", "dsgen.evaluation"]),
    ("runs", ["dsgen.method", "dsgen.methods", "dsgen.presets", "dsgen.planning", "dsgen.runs"]),
    ("orchestration", ["dsgen.scheduling", "dsgen.orchestration"]),
    ("reports and outputs", ["dsgen.claims", "dsgen.export", "dsgen.reports"]),
    ("faces", ["dsgen.api", "dsgen.cli", "dsgen.benchmarks"]),
]

# The import loops allowed: registries, each a folder's base module and what it registers (by decorator or lazily).
REGISTRIES = {
    "generators": {"dsgen.generation", "dsgen.generation.debiased", "dsgen.generation.human",
                   "dsgen.generation.openai_api"},
    "labellers": {"dsgen.labelling.base", "dsgen.labelling.lm_judge", "dsgen.labelling.api_judge"},
    "reweighters": {"dsgen.reweighting.base", "dsgen.reweighting.sdi", "dsgen.reweighting.random_weights",
                    "dsgen.reweighting.discriminator", "dsgen.reweighting.curation"},
    "trainers": {"dsgen.training.base", "dsgen.training.regression", "dsgen.training.contrastive"},
}


def modules() -> dict[str, Path]:
    """Every module of the package, by dotted name."""
    found = {}
    for folder, package in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that ``name`` imports anywhere in its source (the longest known prefix of each)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            targets = [f"{base}.{a.name}" for a in node.names]  # a submodule, else (resolved below) ``base``
        else:
            continue
        for target in targets:
            for top, package_name in FOLDERS.items():
                if top != "dsgen" and (target == top or target.startswith(top + ".")):
                    target = package_name + target[len(top):]
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def floor(name: str) -> int:
    """The floor of a module: that of the longest prefix listed in FLOORS (the package ``dsgen`` itself, whose
    ``__init__`` hands out the library API lazily, is a face)."""
    if name == "dsgen":
        return len(FLOORS) - 1
    best = max(((len(p), i) for i, (_, prefixes) in enumerate(FLOORS) for p in prefixes
                if name == p or name.startswith(p + ".")), default=None)
    assert best is not None, f"{name} is on no floor: add it to FLOORS (and to ARCHITECTURE.md's picture)"
    return best[1]


GRAPH = None


def graph() -> dict[str, set[str]]:
    global GRAPH
    if GRAPH is None:
        found = modules()
        GRAPH = {name: imports(name, path, set(found)) for name, path in found.items()}
    return GRAPH


def cycles(edges: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(component)
    return out


def test_every_module_is_on_a_floor_and_imports_only_its_own_floor_or_lower():
    upward = [f"{a} (floor {floor(a) + 1}, {FLOORS[floor(a)][0]}) imports {b} (floor {floor(b) + 1}, "
              f"{FLOORS[floor(b)][0]})" for a, targets in sorted(graph().items()) for b in sorted(targets)
              if floor(b) > floor(a)]
    assert not upward, "upward imports:\n" + "\n".join(upward)


def test_the_only_import_loops_are_registries():
    loops = cycles(graph())
    allowed = list(REGISTRIES.values())
    bad = [sorted(c) for c in loops if not any(c <= registry for registry in allowed)]
    assert not bad, "import loops outside a registry:\n" + "\n".join(" <-> ".join(c) for c in bad)


def test_the_contract_sees_a_lazy_upward_import_and_a_loop(tmp_path):
    """The checks themselves: a function-level import counts, and a loop of two modules is found."""
    (tmp_path / "mod.py").write_text("def f():\n    from dsgen.cli import main\n", encoding="utf-8")
    assert imports("dsgen.data.mod", tmp_path / "mod.py", {"dsgen.cli", "dsgen.data.mod"}) == {"dsgen.cli"}
    assert floor("dsgen.cli") > floor("dsgen.data.inputs")
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [{"a", "b"}]


@pytest.mark.parametrize("limit", [600])
def test_no_module_is_longer_than_a_room(limit):
    """Rooms stay small enough to read in one sitting; the command modules smaller still."""
    long = {name: n for name, path in modules().items()
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > (250 if name.startswith("dsgen.cli") else limit)}
    assert not long, f"modules over {limit} lines (250 for dsgen.cli): {long}"
