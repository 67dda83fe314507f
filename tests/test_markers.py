"""Tests that start a real model server are marked, so ``-m`` selections and the suite's time
budget see them: a test that requests the session server gets ``server`` from the conftest hook;
a test that starts a server of its own (``LocalModelServer(...).start()``, ``with
LocalModelServer(...)``, ``spec.serve()``) must say ``server`` or ``slow`` itself, unless it
replaces ``pipelines.serving.LocalModelServer`` (``monkeypatch.setattr(serving,
"LocalModelServer", ...)``: every server it starts is then that stand-in)."""

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
MARKS = {"server", "slow"}


def _marks(node: ast.FunctionDef) -> set[str]:
    found = set()
    for deco in node.decorator_list:
        target = deco.func if isinstance(deco, ast.Call) else deco
        if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Attribute) \
                and target.value.attr == "mark":
            found.add(target.attr)
    return found


def _module_marks(tree: ast.Module) -> set[str]:
    found = set()
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark"
                                                for t in stmt.targets):
            for sub in ast.walk(stmt.value):
                if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Attribute) \
                        and sub.value.attr == "mark":
                    found.add(sub.attr)
    return found


def _starts_server(node: ast.AST, helpers: set[str]) -> bool:
    """Whether the body starts a server: ``.start()`` / ``with`` on ``LocalModelServer(...)``,
    ``<x>.serve()`` as a context manager, or a call of a module helper that does."""
    servers: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Assign) and isinstance(sub.value, ast.Call) \
                and getattr(sub.value.func, "id", None) == "LocalModelServer":
            servers.update(t.id for t in sub.targets if isinstance(t, ast.Name))
    for sub in ast.walk(node):
        if isinstance(sub, ast.withitem):
            call = sub.context_expr
            if isinstance(call, ast.Call) and (getattr(call.func, "id", None) == "LocalModelServer"
                                               or getattr(call.func, "attr", None) == "serve"):
                return True
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) \
                and sub.func.attr == "start" and getattr(sub.func.value, "id", None) in servers:
            return True
        if isinstance(sub, ast.Call) and getattr(sub.func, "id", None) in helpers:
            return True
    return False


def _replaces_the_server(node: ast.AST) -> bool:
    """Whether the body swaps ``pipelines.serving``'s ``LocalModelServer`` for a stand-in."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call) and getattr(sub.func, "attr", None) == "setattr" \
                and getattr(sub.func.value, "id", None) == "monkeypatch" and sub.args:
            target = sub.args[0]
            if isinstance(target, ast.Constant) and target.value == \
                    "pipelines.serving.LocalModelServer":
                return True
            if getattr(target, "id", None) == "serving" and len(sub.args) > 1 and \
                    isinstance(sub.args[1], ast.Constant) and sub.args[1].value == "LocalModelServer":
                return True
    return False


def unmarked_server_tests(source: str) -> list[str]:
    tree = ast.parse(source)
    if _module_marks(tree) & MARKS:
        return []
    functions = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    helpers: set[str] = set()
    for fn in functions:  # module helpers that start a server (one level is what tests use)
        if not fn.name.startswith("test") and _starts_server(fn, set()):
            helpers.add(fn.name)
    return [fn.name for fn in functions if fn.name.startswith("test")
            and _starts_server(fn, helpers) and not _marks(fn) & MARKS
            and not _replaces_the_server(fn)]


def test_the_scan_sees_each_way_of_starting_a_server():
    unmarked = '''
def test_a(tmp_path):
    server = LocalModelServer(model_path=tmp_path)
    server.start()

def test_b(p):
    with LocalModelServer(model_path=p) as s:
        pass

def test_c(spec):
    with spec.serve() as (url, name, key):
        pass

def _helper(p):
    with LocalModelServer(model_path=p):
        pass

def test_d(p):
    _helper(p)

def test_e(tmp_path):
    LocalModelServer(model_path=tmp_path).command()

def test_f(spec, monkeypatch):
    monkeypatch.setattr(serving, "LocalModelServer", StandInServer)
    with spec.serve() as (url, name, key):
        pass

def test_g(spec, monkeypatch):
    monkeypatch.setattr(resources, "LocalModelServer", StandInServer)
    with spec.serve() as (url, name, key):
        pass
'''
    assert unmarked_server_tests(unmarked) == ["test_a", "test_b", "test_c", "test_d", "test_g"]
    marked = unmarked.replace("def test_", "@pytest.mark.server\ndef test_")
    assert unmarked_server_tests(marked) == []
    assert unmarked_server_tests("import pytest\npytestmark = pytest.mark.slow\n" + unmarked) == []


def test_every_test_that_starts_a_server_is_marked():
    offenders = [f"{path.relative_to(TESTS)}::{name}" for path in sorted(TESTS.rglob("test_*.py"))
                 for name in unmarked_server_tests(path.read_text())]
    assert not offenders, ("these tests start a real model server but are marked neither "
                           f"`server` nor `slow`: {offenders}")


def test_session_server_users_are_marked(request):
    """Every collected test that requests the session server carries ``server`` (from the hook
    when it does not say so itself), so ``-m "not server"`` really leaves the server out."""
    users = [item for item in request.session.items
             if "local_server" in getattr(item, "fixturenames", ())]
    unmarked = [item.nodeid for item in users if not item.get_closest_marker("server")]
    assert not unmarked, unmarked
