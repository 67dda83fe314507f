"""The Dagster resource: backend chosen by configuration, used from a real materialization."""

import dagster as dg
import pytest

from assets.sandbox_resource import SandboxResource
from pipelines.sandbox import E2BSandbox, LocalSandbox


def test_resource_runs_code_inside_a_materialization(jail, monkeypatch):
    monkeypatch.delenv("E2B_API_KEY", raising=False)

    @dg.asset
    def squares(sandbox: SandboxResource) -> dict:
        pool = sandbox.get_pool()
        results = pool.run_many([f"print({i} ** 2)" for i in range(4)])
        with pool.session() as session:
            session.execute("acc = 40")
            value = session.execute("acc + 2").value
        return {"squares": [r.stdout.strip() for r in results],
                "isolation": results[0].isolation, "value": value}

    resource = SandboxResource(backend="local", timeout_s=5, workers=2)
    outcome = dg.materialize([squares], resources={"sandbox": resource})
    assert outcome.success
    out = outcome.output_for_node("squares")
    assert out == {"squares": ["0", "1", "4", "9"], "isolation": "bwrap", "value": "42"}


def test_resource_builds_limits_and_backends(monkeypatch):
    monkeypatch.delenv("E2B_API_KEY", raising=False)
    resource = SandboxResource(timeout_s=3, memory_mb=256, processes=32)
    limits = resource.limits()
    assert (limits.timeout_s, limits.memory_mb, limits.processes) == (3, 256, 32)
    assert isinstance(resource.get_sandbox(), LocalSandbox)  # auto without a key
    keyed = SandboxResource(backend="auto", e2b_api_key="from-config")
    assert isinstance(keyed.get_sandbox(), E2BSandbox)
    monkeypatch.setenv("E2B_API_KEY", "from-env")
    assert isinstance(SandboxResource().get_sandbox(), E2BSandbox)
    assert isinstance(SandboxResource(backend="local").get_sandbox(), LocalSandbox)


def test_resource_rejects_bad_configuration():
    with pytest.raises(ValueError, match="backend must be one of"):
        SandboxResource(backend="docker").get_sandbox()
    with pytest.raises(ValueError, match="memory_mb"):
        SandboxResource(memory_mb=1).limits()
