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


@pytest.fixture
def no_bubblewrap(monkeypatch):
    """A machine without bubblewrap (``shutil.which`` finds nothing), decided afresh."""
    import pipelines.sandbox.jail as jail_mod

    monkeypatch.delenv("E2B_API_KEY", raising=False)
    monkeypatch.setattr(jail_mod.shutil, "which", lambda name: None)
    jail_mod.resolve_spec.cache_clear()
    yield
    jail_mod.resolve_spec.cache_clear()


def test_evaluation_mosaic_and_rewards_refuse_the_fallback_by_default(no_bubblewrap, monkeypatch):
    from eval import code_grader
    from pipelines.mosaic import session_factory
    from pipelines.sandbox import SandboxUnavailable

    # evaluation and MOSAIC assets: the resource's pool and sessions
    resource = SandboxResource(backend="local")
    try:
        with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap"):
            resource.get_pool().run("print(1)")
        with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap"):
            resource.get_pool().session()
    finally:
        resource.close()
    # MOSAIC without a configured sandbox
    with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap"):
        session_factory()()
    # the code grader (one grader for evaluation and RL rewards) with its default sandbox
    monkeypatch.setattr(code_grader, "_DEFAULT", [])
    problem = {"task_id": "t/0", "prompt": "def f():\n", "test": "def check(f):\n    pass\n",
               "entry_point": "f"}
    with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap"):
        code_grader.grade_code("    return 1\n", problem)


def test_the_fallback_runs_only_when_the_config_opts_in(no_bubblewrap):
    resource = SandboxResource(backend="local", allow_unjailed=True, timeout_s=5)
    try:
        with pytest.warns(RuntimeWarning, match="FALLING BACK"):
            result = resource.get_pool().run("print(6 * 7)")
        assert result.ok and result.stdout == "42\n" and result.isolation == "subprocess"
    finally:
        resource.close()


def test_resource_passes_the_file_count_limit(jail, monkeypatch):
    monkeypatch.delenv("E2B_API_KEY", raising=False)
    resource = SandboxResource(backend="local", disk_files=100, timeout_s=5)
    assert resource.limits().disk_files == 100
    code = ("made = 0\ntry:\n    for i in range(1000):\n        open(f'f{i}', 'w').close()\n"
            "        made += 1\nexcept OSError:\n    pass\nprint(made)")
    try:
        assert resource.get_pool().run(code).stdout == "99\n"  # the tmpfs root is one inode
    finally:
        resource.close()
