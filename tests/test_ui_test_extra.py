"""The browser test's Python dependency (Playwright) is declared in pyproject.toml's `ui-test`
extra, pinned, and the Makefile installs it through that extra rather than by a name of its own."""

import re
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _ui_test_pin() -> str:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    (requirement,) = [r for r in extras["ui-test"] if r.startswith("playwright")]
    match = re.fullmatch(r"playwright==(\d+(?:\.\d+)*)", requirement)
    assert match, f"playwright must be pinned exactly in the ui-test extra, got {requirement!r}"
    return match.group(1)


def test_makefile_installs_playwright_through_the_ui_test_extra():
    _ui_test_pin()
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("$(UI_TEST_STAMP):", 1)[1].split("\ntest-slow:", 1)[0]
    assert '-e ".[ui-test]"' in recipe
    # no second, separately pinned install that could drift from the extra
    assert not re.search(r"install[^\n]*playwright", makefile)


def test_installed_playwright_is_the_pinned_one():
    try:
        installed = metadata.version("playwright")
    except metadata.PackageNotFoundError:
        pytest.skip("playwright is not installed (make test-slow installs the ui-test extra)")
    assert installed == _ui_test_pin()
