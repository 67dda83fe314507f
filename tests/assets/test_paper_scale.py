"""`scale: paper` is the paper's setup: every experiment's paper run config names the model,
data, steps, rollouts, lengths and evaluation that ``assets.results.paper_setups.PAPER_SETUPS``
records from the paper, validates against its job's Dagster config schema, and is listed in the
docs table with the same model; a claim that has the `llm` resource play the paper's controller
refuses the embedded default at paper scale, before any work."""

import re
from pathlib import Path

import dagster as dg
import pytest

from assets.results import EXPERIMENTS
from assets.results.experiments import Experiment, require_paper_llm
from assets.results.paper_setups import NO_MODEL, PAPER_SETUPS, configured_setup, mismatches

PAPER_EXPERIMENTS = [e for e in EXPERIMENTS if "paper" in e.scale_names]
DOCS = Path(__file__).resolve().parents[2] / "docs" / "results.md"


def test_every_paper_experiment_has_a_recorded_setup():
    assert {e.name for e in PAPER_EXPERIMENTS} == set(PAPER_SETUPS)
    for name, setup in PAPER_SETUPS.items():
        assert setup.get("section") and setup.get("model"), name


@pytest.mark.parametrize("experiment", PAPER_EXPERIMENTS, ids=lambda e: e.name)
def test_paper_config_is_the_papers_setup(experiment):
    assert mismatches(experiment) == {}, (
        f"{experiment.name}: paper config differs from the paper (setting: (paper, config))")
    # a language-model claim never trains or judges the embedded model at paper scale
    assert configured_setup(experiment).get("model") != "embedded"
    assert experiment.limits.get("paper"), f"{experiment.name}: say what the config cannot express"


def test_the_duet_check_catches_an_embedded_model():
    from assets.results.budget_results import DUET

    ops = {k: dict(v) for k, v in DUET.scales["paper"].items()}
    sweep = dict(ops["duet_sweep"]["config"])
    sweep["overrides"] = [o for o in sweep["overrides"] if "model_name_or_path" not in o]
    ops["duet_sweep"] = {"config": sweep}
    drifted = Experiment(name=DUET.name, paper=DUET.paper, description="d",
                         upstream=DUET.upstream, scales={"cpu": DUET.scales["cpu"],
                                                         "paper": ops})
    assert mismatches(drifted)["model"] == ("Qwen/Qwen3-1.7B-Base", "embedded")


@pytest.mark.parametrize("experiment", PAPER_EXPERIMENTS, ids=lambda e: e.name)
def test_paper_config_validates_against_the_job_schema(experiment):
    from assets.definitions import defs

    job = defs.resolve_job_def(f"{experiment.name}_job")
    result = dg.validate_run_config(job, {"scale": "paper"})
    config = result["ops"][experiment.name]["config"]
    assert config["scale"] == "paper"


def test_every_scale_of_every_claim_job_validates():
    """Every experiment's run config at each of its scales fits its job's config schema (a key
    an asset no longer takes, e.g. a sampling setting left flat, fails here, not in a run)."""
    from assets.definitions import defs
    from assets.results import EXPERIMENTS

    for experiment in EXPERIMENTS:
        job = defs.resolve_job_def(f"{experiment.name}_job")
        for scale in experiment.scale_names:
            dg.validate_run_config(job, {"scale": scale})


def _docs_rows() -> dict[str, str]:
    text = DOCS.read_text()
    start = text.index("## Paper setup vs weft's configs")
    section = text[start:].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        match = re.match(r"\|\s*`(\w+)`\s*\|", line)
        if match:
            assert match.group(1) not in rows, f"two rows for {match.group(1)}"
            rows[match.group(1)] = line
    return rows


def test_docs_table_has_one_row_per_experiment_naming_the_model():
    rows = _docs_rows()
    assert set(rows) == set(PAPER_SETUPS)
    for name, line in rows.items():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        assert len(cells) == 5, f"{name}: claim | paper's setup | paper config | cpu config | why"
        model = PAPER_SETUPS[name]["model"]
        wanted = NO_MODEL if model == NO_MODEL else model.split("/")[-1]
        assert wanted in cells[1] and wanted in cells[2], f"{name}: docs do not name {model}"


class _FakeLLM:
    """Stands in for ``LLMResource``: ``base_url`` "" is the embedded default."""

    def __init__(self, base_url: str = "", model: str = ""):
        self.base_url, self.model = base_url, model

    def model_label(self) -> str:
        return self.model if self.base_url else "SmolLM2-135M-Instruct"


@pytest.mark.parametrize("name", ["ep_assistant_claim", "ep_kitchen_claim",
                                  "mosaic_synthesis_claim", "mosaic_recovery_claim"])
def test_controller_claims_refuse_the_embedded_default_at_paper_scale(name):
    experiment = next(e for e in EXPERIMENTS if e.name == name)
    with pytest.raises(dg.Failure, match=r"WEFT_LLM_BASE_URL/WEFT_LLM_MODEL to a "
                                         r"DeepSeek-V3\.2 endpoint"):
        require_paper_llm(experiment, "paper", _FakeLLM())
    require_paper_llm(experiment, "cpu", _FakeLLM())  # the embedded model is the cpu setup
    require_paper_llm(experiment, "paper", _FakeLLM("http://gpu:8000/v1", "deepseek-v3.2"))


def test_assistant_asset_refuses_before_any_work(weft_home, monkeypatch):
    """The asset itself, through its job with a fake `llm` resource config: at paper scale the
    run fails naming the endpoint and no episode runs; at cpu scale (scripted) it runs."""
    from assets.resources import LLMResource, WarehouseResource
    from assets.results.engagement_results import ASSISTANT, ep_assistant_claim
    from assets.results.experiments import claim_job
    from eval.engagement import llm_runs

    calls = []
    real = llm_runs.run_comparison

    def counting(*args, **kwargs):
        calls.append(kwargs.get("client"))
        return real(*args, **{**kwargs, "n_seeds": 2, "episodes_per_seed": 1})

    monkeypatch.setattr(llm_runs, "run_comparison", counting)
    defs = dg.Definitions(assets=[ep_assistant_claim], jobs=[claim_job(ASSISTANT)],
                          resources={"llm": LLMResource(), "warehouse": WarehouseResource()})
    job = defs.resolve_job_def("ep_assistant_claim_job")
    paper = job.execute_in_process(run_config={"scale": "paper"},
                                   instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
    assert not paper.success and calls == []
    failure = next(e for e in paper.all_events if e.event_type_value == "STEP_FAILURE")
    message = str(failure.event_specific_data.error)
    assert "DeepSeek-V3.2" in message and "WEFT_LLM_BASE_URL" in message
    cpu = job.execute_in_process(run_config={"scale": "cpu", "ops": {"ep_assistant_claim": {
        "config": {"n_boot": 200}}}}, instance=dg.DagsterInstance.ephemeral())
    assert cpu.success and calls and all(c is None for c in calls)
