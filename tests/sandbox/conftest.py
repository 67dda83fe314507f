"""Fixtures for the sandbox tests: the real bubblewrap jail (skipped, with the reason, only on a
machine where it cannot run), the plain-subprocess fallback, and the local benchmark files."""

import os

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
    # A uid of its own when root: the fallback's process limit counts every process of its
    # uid on the host, bubblewrap jails of tests running beside it included.
    uid = 65533 if os.geteuid() == 0 else -1
    return LocalSandbox(Limits(timeout_s=10), isolation="subprocess", uid=uid)
