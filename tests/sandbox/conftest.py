"""Fixtures for the sandbox tests: the real bubblewrap jail (skipped, with the reason, only on a
machine where it cannot run), the plain-subprocess fallback, and the local benchmark files."""

import pytest

from pipelines.sandbox import Limits, LocalSandbox
from pipelines.sandbox.jail import SandboxUnavailable


@pytest.fixture(scope="session")
def jail() -> LocalSandbox:
    sandbox = LocalSandbox(Limits(timeout_s=10), isolation="bwrap")
    try:
        assert sandbox.isolation == "bwrap"
    except SandboxUnavailable as exc:  # pragma: no cover - this machine has bubblewrap
        pytest.skip(f"bubblewrap jail unavailable: {exc}")
    return sandbox


@pytest.fixture(scope="session")
def fallback() -> LocalSandbox:
    return LocalSandbox(Limits(timeout_s=10), isolation="subprocess")
