"""The Dagster webserver serves weft's code location: assets and the schedule over GraphQL, and
(slow) the UI pages a researcher opens, rendered in headless Chromium over a small materialized
graph, with screenshots kept under WEFT_HOME/screenshots for a person to look at."""

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _graphql(port: int, query: str) -> dict:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql", data=json.dumps({"query": query}).encode(),
        headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def _dagster_home(path: Path) -> Path:
    (path / ".nux").mkdir(parents=True)
    (path / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    (path / ".nux" / "nux.yaml").write_text("seen: 1\n")  # no first-run modal over the UI
    return path


def _start_webserver(home: Path, weft_home: Path, port: int) -> subprocess.Popen:
    env = dict(os.environ, DAGSTER_HOME=str(home), WEFT_HOME=str(weft_home))
    exe = Path(sys.executable).with_name("dagster-webserver")
    proc = subprocess.Popen(
        [str(exe), "-m", "assets.definitions", "-h", "127.0.0.1", "-p", str(port)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 180
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=2):
                return proc
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                _stop(proc)
                out = proc.stdout.read().decode(errors="replace")[-3000:]
                pytest.fail(f"webserver did not start (rc={proc.poll()}):\n{out}")
            time.sleep(0.5)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_webserver_lists_assets_and_schedule(tmp_path):
    home = _dagster_home(tmp_path / "dagster_home")
    port = _free_port()
    proc = _start_webserver(home, tmp_path / "weft", port)
    try:
        assets = _graphql(port, "{ assetNodes { assetKey { path } groupName } }")
        keys = {"/".join(n["assetKey"]["path"]) for n in assets["data"]["assetNodes"]}
        assert {"problems", "eval_samples", "eval_scores", "gsm8k_problems"} <= keys
        schedules = _graphql(port, """{ workspaceOrError { ... on Workspace { locationEntries {
            locationOrLoadError { ... on RepositoryLocation { repositories { schedules { name cronSchedule } } } } } } } }""")
        names = [
            (s["name"], s["cronSchedule"])
            for entry in schedules["data"]["workspaceOrError"]["locationEntries"]
            for repo in entry["locationOrLoadError"]["repositories"]
            for s in repo["schedules"]
        ]
        assert ("nightly_eval", "0 2 * * *") in names
        _added_benchmark_reaches_the_running_ui(tmp_path / "weft", port, proc.pid)
    finally:
        _stop(proc)
    assert proc.returncode is not None


def _added_benchmark_reaches_the_running_ui(weft_home: Path, port: int, pid: int) -> None:
    """A benchmark declared in the benchmarks file after the UI loaded shows in it once `weft`
    has reloaded the code location (cli.instance.reload_ui_for_benchmarks)."""
    from cli.instance import UI_STATE, ensure_dagster_home, reload_ui_for_benchmarks

    old = os.environ.get("WEFT_HOME")
    os.environ["WEFT_HOME"] = str(weft_home)
    weft_home.mkdir(parents=True, exist_ok=True)
    try:
        (weft_home / "late.jsonl").write_text(
            json.dumps({"question": "What is 2 + 2?", "gold": "4"}) + "\n")
        (weft_home / "benchmarks.yaml").write_text(
            "benchmarks:\n  - name: late_arith\n    path: late.jsonl\n"
            "    fields: {problem: question, answer: gold}\n    grader: math\n"
            "    prompt: math\n")
        (ensure_dagster_home() / UI_STATE).write_text(json.dumps(
            {"host": "127.0.0.1", "port": port, "pid": pid, "loaded_at": time.time() - 60}))
        query = "{ assetNodes { assetKey { path } } }"
        before = {"/".join(n["assetKey"]["path"])
                  for n in _graphql(port, query)["data"]["assetNodes"]}
        assert "late_arith_problems" not in before
        line = reload_ui_for_benchmarks()
        assert line and "reloaded the UI's code location" in line, line
        after = {"/".join(n["assetKey"]["path"])
                 for n in _graphql(port, query)["data"]["assetNodes"]}
        assert "late_arith_problems" in after
    finally:
        if old is None:
            os.environ.pop("WEFT_HOME", None)
        else:
            os.environ["WEFT_HOME"] = old


CHROMIUM = Path("/usr/bin/chromium")
PAGE_TIMEOUT_MS = 180_000  # a loaded 2-core machine renders the UI slowly


@contextlib.contextmanager
def _browser(home: Path, weft_home: Path):
    """A page of headless Chromium (Debian's, driven by Playwright) at 1,600 x 1,100 px on a
    Dagster webserver started on ``home``: yields ``(page, base URL)``; the browser and the
    webserver are stopped afterwards. Fails saying what to install when either is missing."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("the browser test needs Playwright: `make test-slow` installs it "
                    "(or: .venv/bin/pip install playwright==1.65.2)")
    if not CHROMIUM.is_file():
        pytest.fail("the browser test needs Debian's chromium: `make test-slow` installs it "
                    "as root (or: apt-get install -y chromium)")
    port = _free_port()
    proc = _start_webserver(home, weft_home, port)
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(
                executable_path=str(CHROMIUM),
                args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
            try:
                page = browser.new_page(viewport={"width": 1600, "height": 1100})
                page.set_default_timeout(PAGE_TIMEOUT_MS)
                yield page, f"http://127.0.0.1:{port}"
            finally:
                browser.close()
    finally:
        _stop(proc)


@pytest.mark.slow
def test_ui_pages_in_headless_chromium(tmp_path, weft_home, shared_data, embedded_model_dir,
                                       monkeypatch):
    """The asset graph, an asset page with metadata and the plot image, the automation page
    and the runs page, as a browser renders them (Debian's chromium driven by Playwright)."""
    import dagster as dg

    from pipelines.llm.testing import FakeLLMServer
    from tests.assets.small_graph import materialize_small_graph, responder

    home = _dagster_home(tmp_path / "dagster_home")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    instance = dg.DagsterInstance.get()
    with FakeLLMServer(models=("scripted",), responder=responder) as server:
        materialize_small_graph(instance, server.base_url, embedded_model_dir, sxs_chain=False)
    run_ids = [r.run_id for r in instance.get_runs()]
    assert run_ids
    shots = weft_home / "screenshots"
    shots.mkdir()
    with _browser(home, weft_home) as (page, base):
        # the asset graph: every stage, and the train group with its upstream data
        page.goto(f"{base}/asset-groups", timeout=PAGE_TIMEOUT_MS)
        for group in ("ingest", "synthesize", "mosaic", "train", "evaluate", "report"):
            page.get_by_text(group, exact=True).filter(visible=True).first.wait_for()
        page.screenshot(path=str(shots / "asset_graph.png"))
        page.goto(f"{base}/locations/assets.definitions/asset-groups/train/lineage",
                  timeout=PAGE_TIMEOUT_MS)
        for name in ("sft_checkpoint", "grpo_checkpoint", "sxs_sft_dataset",
                     "math_train_problems", "tir_sft_checkpoint", "tir_sft_dataset",
                     "step_instances"):
            page.get_by_text(name, exact=True).filter(visible=True).first.wait_for()
        page.screenshot(path=str(shots / "train_lineage.png"))

        # an asset page: its metadata, the skipped plots with reasons, the leaderboard
        # plot inline as a text figure (its title and a bar line, not behind a link)
        page.goto(f"{base}/assets/eval_reports", timeout=PAGE_TIMEOUT_MS)
        page.get_by_text("plots_skipped", exact=True).filter(visible=True).first.wait_for()
        page.get_by_text("no interleaved samples yet", exact=False).filter(visible=True).first.wait_for()
        title = page.get_by_text("leaderboard: accuracy [95% CI] on shared problems",
                                 exact=True).filter(visible=True).first
        title.wait_for()
        title.scroll_into_view_if_needed()
        figure = page.locator("code", has_text="gsm8k ").filter(visible=True).first
        figure.wait_for()
        assert "█" in figure.inner_text() or "·" * 12 in figure.inner_text()
        page.screenshot(path=str(shots / "asset_eval_reports.png"))

        # automation: the nightly schedule and the models sensor
        page.goto(f"{base}/automation", timeout=PAGE_TIMEOUT_MS)
        page.get_by_text("nightly_eval", exact=True).filter(visible=True).first.wait_for()
        page.get_by_text("models_sensor", exact=True).filter(visible=True).first.wait_for()
        page.screenshot(path=str(shots / "automation.png"))

        # runs: the runs that materialized the graph
        page.goto(f"{base}/runs", timeout=PAGE_TIMEOUT_MS)
        page.get_by_text(run_ids[0][:8], exact=False).filter(visible=True).first.wait_for()
        page.screenshot(path=str(shots / "runs.png"))
    for name in ("asset_graph", "train_lineage", "asset_eval_reports", "automation", "runs"):
        assert (shots / f"{name}.png").stat().st_size > 10_000, name


@pytest.mark.slow
def test_a_claim_page_reads_at_1600_pixels(tmp_path, weft_home, monkeypatch):
    """A result asset's page at 1,600 px: the claims table's verdict column lies inside the
    viewport without scrolling, and every metadata key is short enough to show whole."""
    import dagster as dg

    from assets.definitions import defs

    home = _dagster_home(tmp_path / "dagster_home")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    tiny = {"training_seeds": 2, "train_episodes": 1500, "eval_episodes": 60, "n_boot": 500}
    job = defs.resolve_job_def("ep_deliberation_claim_job")
    with dg.DagsterInstance.get() as instance:
        result = job.execute_in_process(
            run_config={"scale": "cpu", "ops": {"ep_deliberation_claim": {"config": tiny}}},
            instance=instance)
    assert result.success
    shots = weft_home / "screenshots"
    shots.mkdir(exist_ok=True)
    with _browser(home, weft_home) as (page, base):
        page.goto(f"{base}/assets/ep_deliberation_claim", timeout=PAGE_TIMEOUT_MS)
        page.get_by_text("why inconclusive", exact=True).filter(
            visible=True).first.wait_for()
        page.screenshot(path=str(shots / "claim_page_1600.png"), full_page=True)
        header = page.get_by_text("verdict", exact=True).filter(visible=True).first
        box = header.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 1600, box
        for key in ("verdict_1", "plot_1", "what_limits_it"):
            cell = page.get_by_text(key, exact=True).filter(visible=True).first
            cell.wait_for()
            kbox = cell.bounding_box()
            assert kbox is not None and kbox["x"] + kbox["width"] <= 1600, (key, kbox)
