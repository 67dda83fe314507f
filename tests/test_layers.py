"""The layer rules of the architecture (docs/architecture.md), checked over every import in the code.

Every ``.py`` file in pipelines/, training/, eval/, warehouse/, assets/ and cli/ is parsed with
``ast``; every ``import`` statement counts, wherever it is (module level, inside a function,
under ``if TYPE_CHECKING``), because a lazy import is still a dependency. So do calls that
import by name: ``importlib.import_module(...)`` (or ``import_module`` imported from
``importlib``) and ``__import__(...)`` (bare, ``builtins.`` or ``importlib.``). Their module is
read from a string literal argument (relative names resolved against a literal ``package``
or the importing module) or from a module-level string constant; a name computed at run time
cannot be read, so such a call must be declared in :data:`DYNAMIC_IMPORTS` with the modules
it can reach, and those edges are checked like any other. Forbidden edges:

- ``pipelines``, ``training``, ``eval``, ``warehouse`` never import ``dagster``, ``assets`` or
  ``cli`` (``dagster_pipes``, a separate dependency-free package, is allowed);
- ``assets`` (the Dagster code location) never imports ``cli`` (the ``weft`` command, the
  launcher, the console and the demo, which import the code location), nor ``torch``,
  ``transformers`` or ``trl`` (model computation lives in the plain packages);
- ``warehouse`` imports no stage (``pipelines``, ``training``, ``eval``);
- ``pipelines`` imports neither ``training`` nor ``eval``;
- ``eval`` imports no ``training``;
- base modules (:data:`BASE_MODULES`) may be imported from any layer;
- ``eval.graders`` never imports ``eval.grading_pool`` (the pool builds on the graders'
  registry; the reverse edge made a cycle);
- no import cycle among the project's modules, counting imports inside functions (a lazy
  import still closes a cycle; in-function imports are for heavy modules only).

The checker itself is tested on small synthetic sources, so a rule that silently matched
nothing would fail here too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ("pipelines", "training", "eval", "warehouse", "assets", "cli")
# Modules every layer may import: settings and small text helpers, no stage logic.
BASE_MODULES = ("pipelines.settings", "pipelines.text")
# layer -> top-level packages it must not import
FORBIDDEN = {
    "pipelines": ("dagster", "assets", "cli", "training", "eval"),
    "training": ("dagster", "assets", "cli"),
    "eval": ("dagster", "assets", "cli", "training"),
    "warehouse": ("dagster", "assets", "cli", "pipelines", "training", "eval"),
    # the code location wires: no programs (they import it) and no model computation
    "assets": ("cli", "torch", "transformers", "trl"),
    "cli": (),
}
# (importer, imported): forbidden module pairs, whatever the layers say.
FORBIDDEN_PAIRS = (("eval.graders", "eval.grading_pool"),)
# importer -> the modules its run-time-named imports can reach (checked as edges)
DYNAMIC_IMPORTS = {
    "training.rollouts": ("training.duet.generate",),  # DUET_VLLM_HOOK's module
    # the host replay of a benchmark's own test code passes that code's imports through
    # (the standard library's modules HumanEval and MBPP+ tests import); no project module
    "eval.code_replay": (),
}
DYNAMIC = "<dynamic>"  # the module a call imports cannot be read from the source
# Modules on no import cycle at all, imports inside functions included: the config layers
# (recipe files and the embedded model's name, under the config classes and the kind registry,
# under the method configs, under config loading, under the run helpers).
IMPORT_FUNCTIONS = ("import_module", "__import__")


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports_of(source: str, module: str, is_package: bool = False,
               known: frozenset[str] = frozenset()) -> list[tuple[str, int, bool]]:
    """``(imported module, line, at module level)`` for every import in ``source``.

    Relative imports are resolved against ``module``; ``from pkg import name`` counts as an
    import of ``pkg.name`` when that is one of the ``known`` modules, else of ``pkg``. An
    import is "module level" when it runs on import of the module: not inside a function and
    not under ``if TYPE_CHECKING``.
    """
    found: list[tuple[str, int, bool]] = []
    package = module if is_package else module.rpartition(".")[0]
    tree = ast.parse(source)
    constants = {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign)
                 and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
                 for t in n.targets if isinstance(t, ast.Name)}
    from_importlib = {alias.asname or alias.name for n in ast.walk(tree)
                      if isinstance(n, ast.ImportFrom) and n.module == "importlib"
                      for alias in n.names if alias.name == "import_module"}

    def is_import_call(func: ast.expr) -> bool:
        if isinstance(func, ast.Name):
            return func.id == "__import__" or func.id in from_importlib
        return (isinstance(func, ast.Attribute) and func.attr in IMPORT_FUNCTIONS
                and isinstance(func.value, ast.Name)
                and func.value.id in ("importlib", "builtins"))

    def literal(node: ast.expr | None) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Name):
            return constants.get(node.id)
        return None

    def called_module(call: ast.Call) -> str:
        name = literal(call.args[0]) if call.args else None
        if name is None:
            return DYNAMIC
        if not name.startswith("."):
            return name
        pkg_node = call.args[1] if len(call.args) > 1 else next(
            (k.value for k in call.keywords if k.arg == "package"), None)
        anchor_pkg = literal(pkg_node) if pkg_node is not None else package
        if anchor_pkg is None:
            return DYNAMIC
        level = len(name) - len(name.lstrip("."))
        anchor = anchor_pkg.split(".")
        anchor = anchor[: len(anchor) - (level - 1)]
        rest = name[level:]
        return ".".join([*anchor, rest] if rest else anchor)

    def visit(node: ast.AST, top: bool) -> None:
        if isinstance(node, ast.Import):
            found.extend((alias.name, node.lineno, top) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                found.append((candidate if candidate in known else base, node.lineno, top))
        elif isinstance(node, ast.Call) and is_import_call(node.func):
            found.append((called_module(node), node.lineno, top))
        for child in ast.iter_child_nodes(node):
            inner = top and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                  ast.Lambda))
            if isinstance(node, ast.If) and _is_type_checking(node.test) and child in node.body:
                inner = False
            visit(child, inner)

    visit(tree, True)
    return found


def violations(importer: str, imported: str) -> list[str]:
    """Why the edge importer -> imported breaks a rule (empty when it is allowed)."""
    layer = importer.split(".")[0]
    target_top = imported.split(".")[0]
    out = []
    if any(imported == b or imported.startswith(b + ".") for b in BASE_MODULES):
        pass
    elif target_top in FORBIDDEN.get(layer, ()):
        out.append(f"{layer} must not import {target_top}")
    for a, b in FORBIDDEN_PAIRS:
        if importer == a and (imported == b or imported.startswith(b + ".")):
            out.append(f"{a} must not import {b}")
    return out


def project_files() -> list[Path]:
    return sorted(p for layer in LAYERS for p in (ROOT / layer).rglob("*.py"))


def import_graph() -> dict[str, list[tuple[str, int, bool]]]:
    files = project_files()
    known = frozenset(module_name(p) for p in files)
    return {module_name(p): imports_of(p.read_text(encoding="utf-8"), module_name(p),
                                       p.name == "__init__.py", known)
            for p in files}


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the directed graph as a list of nodes (first == last), or None."""
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def dfs(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = dfs(nxt)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = 2
        return None

    for start in sorted(edges):
        if start not in state:
            cycle = dfs(start)
            if cycle:
                return cycle
    return None


# ---------------------------------------------------------------------------------------------
# The real code


def resolve_dynamic(graph: dict[str, list[tuple[str, int, bool]]],
                    declared: dict[str, tuple[str, ...]] = DYNAMIC_IMPORTS
                    ) -> tuple[dict[str, list[tuple[str, int, bool]]], list[str]]:
    """The graph with each run-time-named import replaced by the modules ``declared`` for its
    importer, and the undeclared ones (``importer:line``)."""
    out, undeclared = {}, []
    for importer, edges in graph.items():
        kept = []
        for imported, line, top in edges:
            if imported != DYNAMIC:
                kept.append((imported, line, top))
            elif importer in declared:
                kept.extend((target, line, top) for target in declared[importer])
            else:
                undeclared.append(f"{importer}:{line}")
        out[importer] = kept
    return out, undeclared


def test_every_layer_imports_only_what_the_design_allows():
    graph, undeclared = resolve_dynamic(import_graph())
    assert len(graph) > 50  # the walk really found the project
    assert not undeclared, ("imports whose module is computed at run time; declare what they "
                            f"can reach in DYNAMIC_IMPORTS: {undeclared}")
    bad = [f"{importer}:{line} imports {imported}: {why}"
           for importer, edges in graph.items() for imported, line, _ in edges
           for why in violations(importer, imported)]
    assert not bad, "forbidden imports:\n" + "\n".join(bad)


def test_declared_dynamic_imports_are_still_there():
    # a stale declaration would silently allow a future edge
    graph = import_graph()
    dynamic = {m for m, edges in graph.items() if any(i == DYNAMIC for i, _, _ in edges)}
    assert dynamic == set(DYNAMIC_IMPORTS)


def all_import_edges(graph: dict[str, list[tuple[str, int, bool]]]) -> dict[str, set[str]]:
    """importer -> the project modules it imports, wherever the import is (module level, inside
    a function, under ``if TYPE_CHECKING``): a lazy import still closes a cycle."""
    return {m: {i for i, _, _ in imports if i in graph and i != m}
            for m, imports in graph.items()}


def test_no_import_cycle_anywhere_even_inside_functions():
    graph, _ = resolve_dynamic(import_graph())
    cycle = find_cycle(all_import_edges(graph))
    assert cycle is None, ("import cycle (imports inside functions count; move what both "
                           "sides need to a module below them): " + " -> ".join(cycle or []))


# ---------------------------------------------------------------------------------------------
# The checker on synthetic sources (so that it can fail)


def test_checker_sees_imports_inside_functions_relative_and_type_checking():
    source = (
        "from __future__ import annotations\n"
        "from typing import TYPE_CHECKING\n"
        "import pipelines.text\n"
        "if TYPE_CHECKING:\n"
        "    from training.config import GRPOConfig\n"
        "def f():\n"
        "    import dagster as dg\n"
        "    from ..training import rewards\n"
        "    from . import latency\n"
    )
    found = imports_of(source, "eval.modes", known=frozenset({"eval.latency", "training.rewards"}))
    assert ("pipelines.text", 3, True) in found
    assert ("training.config", 5, False) in found
    assert ("dagster", 7, False) in found
    assert ("training.rewards", 8, False) in found
    assert ("eval.latency", 9, False) in found


def test_checker_sees_imports_by_name():
    source = (
        "import importlib\n"
        "from importlib import import_module as load\n"
        "TARGET = 'training.rewards'\n"
        "importlib.import_module('dagster')\n"
        "def f(name):\n"
        "    __import__('assets.resources')\n"
        "    load(TARGET)\n"
        "    importlib.import_module('.grading_pool', 'eval')\n"
        "    importlib.import_module('..sft', package='training.duet')\n"
        "    importlib.import_module('.latency')\n"
        "    builtins.__import__('warehouse.store')\n"
        "    importlib.import_module(name)\n"
    )
    found = imports_of(source, "eval.modes")
    assert ("dagster", 4, True) in found
    assert ("assets.resources", 6, False) in found
    assert ("training.rewards", 7, False) in found
    assert ("eval.grading_pool", 8, False) in found
    assert ("training.sft", 9, False) in found
    assert ("eval.latency", 10, False) in found
    assert ("warehouse.store", 11, False) in found
    assert (DYNAMIC, 12, False) in found
    graph, undeclared = resolve_dynamic({"eval.modes": found})
    assert undeclared == ["eval.modes:12"]
    graph, undeclared = resolve_dynamic({"eval.modes": found}, {"eval.modes": ("assets.x",)})
    assert not undeclared and ("assets.x", 12, False) in graph["eval.modes"]
    assert violations("eval.modes", "dagster") and violations("eval.modes", "assets.x")


@pytest.mark.parametrize("importer, imported, broken", [
    ("pipelines.sxs_align", "eval.latency", True),
    ("eval.modes", "training.rewards", True),
    ("warehouse.store", "pipelines.ingest", True),
    ("warehouse.store", "pipelines.settings", False),  # a base module
    ("training.rewards", "pipelines.text", False),
    ("training.pipes", "dagster_pipes", False),
    ("training.pipes", "dagster", True),
    ("eval.runner", "assets.resources", True),
    ("assets.sxs", "dagster", False),
    ("assets.sxs", "eval.latency", False),
    ("assets.tandem", "torch", True),
    ("assets.sxs", "transformers", True),
    ("training.rewards", "eval.graders", False),
    ("eval.graders", "eval.grading_pool", True),
    ("eval.grading_pool", "eval.graders", False),
])
def test_rules_table(importer, imported, broken):
    assert bool(violations(importer, imported)) is broken


def test_cycle_finder():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    cycle = find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}})
    assert cycle is not None and cycle[0] == cycle[-1] and set(cycle) == {"a", "b", "c"}


def test_a_cycle_closed_by_an_import_inside_a_function_is_found():
    sources = {"pkg.a": "import pkg.b\n",
               "pkg.b": "def later():\n    from pkg import a\n    return a\n",
               "pkg.c": "import pkg.a\n"}
    known = frozenset(sources)
    graph = {name: imports_of(text, name, known=known) for name, text in sources.items()}
    assert ("pkg.a", 2, False) in graph["pkg.b"]  # seen, though not at module level
    cycle = find_cycle(all_import_edges(graph))
    assert cycle is not None and set(cycle) == {"pkg.a", "pkg.b"}
    module_level = {m: {i for i, _, top in imports if top and i in graph and i != m}
                    for m, imports in graph.items()}
    assert find_cycle(module_level) is None  # what a module-level-only check would miss
