"""assets/tandem.py: tandem_checkpoint, tandem_eval, tandem_legibility, tandem_comparison.

Legibility and drift run the real models (the embedded model as senior, a seeded perturbed copy
saved as the junior) over hand-written outputs and are checked against independent
computations (transformers' own masked loss, token counts by list.count, the closed-form
log-ratio and KL); the comparison is checked against per-problem pass@k computed from binomial
coefficients. The slow test trains Tandem RL and the KL-to-junior ablation through Pipes and
evaluates the Tandem checkpoint solo and in handoff mode on the local vLLM server.
"""

from __future__ import annotations

import math
from pathlib import Path

import dagster as dg
import pytest
import torch

from assets.resources import GraderResource, LLMResource, WarehouseResource
from assets.tandem import (
    TANDEM_ASSETS,
    tandem_checkpoint,
    tandem_comparison,
    tandem_eval,
    tandem_legibility,
)
from assets.training import TrainerLauncher
from eval.handoff_team import handoff_label
from training.tandem.study import recipe_method
from warehouse import Lineage, Warehouse

PROBLEMS = [
    {"problem_id": "gsm8k-a", "source": "gsm8k", "split": "test", "answer": "12",
     "problem": "Tom has 5 apples and buys 7 more. How many apples does he have?",
     "solution": "", "answer_type": "number", "meta": "{}", "dataset_version": "t"},
    {"problem_id": "gsm8k-b", "source": "gsm8k", "split": "test", "answer": "6",
     "problem": "A box holds 2 rows of 3 eggs. How many eggs are in the box?",
     "solution": "", "answer_type": "number", "meta": "{}", "dataset_version": "t"},
]
SENIOR_OUT = {"gsm8k-a": [("Tom starts with 5 apples. He buys 7 more, so 5 + 7 = 12. "
                          "The answer is \\boxed{12}."),
                          "We add the apples: 5 and 7 make 12, so \\boxed{12}."],
              "gsm8k-b": [("There are 2 rows with 3 eggs in each row, so 2 * 3 = 6 eggs. "
                          "The answer is \\boxed{6}."),
                          "Two rows of three eggs is six eggs: \\boxed{6}."]}
JUNIOR_OUT = {"gsm8k-a": ["The apples are 5 and 7 and the total is 12, so the answer is 12.",
                          "He has 5 apples and then 7 apples, and 5 plus 7 is 12."],
              "gsm8k-b": ["The box has 2 rows and 3 eggs in a row, so the box has 6 eggs.",
                          "There are 3 eggs and 2 rows, and 3 times 2 is 6, so 6 eggs."]}


def _resources():
    return {"trainer": TrainerLauncher(), "warehouse": WarehouseResource(),
            "grader": GraderResource(processes=1), "llm": LLMResource(max_concurrency=2)}


def _samples(model: str, outputs: dict[str, list[str]]) -> list[dict]:
    return [{"model": model, "benchmark": "gsm8k", "problem_id": pid, "sample_index": i,
             "prompt": "", "output": text, "gold": "", "correct": True, "mode": "single",
             "gen_error": None, "checkpoint_id": None}
            for pid, texts in outputs.items() for i, text in enumerate(texts)]


@pytest.fixture
def junior_dir(tmp_path, embedded_model_dir, load_model_pair):
    tok, _, junior = load_model_pair(embedded_model_dir, seed=5)
    path = tmp_path / "junior-model"
    junior.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def test_definitions_load_with_the_tandem_assets():
    defs = dg.Definitions(assets=TANDEM_ASSETS, resources=_resources())
    dg.Definitions.validate_loadable(defs)
    graph = defs.resolve_asset_graph()
    assert graph.get(dg.AssetKey("tandem_eval")).parent_keys == {
        dg.AssetKey("tandem_checkpoint"), dg.AssetKey("problems")}


def test_recipe_method_tells_tandem_from_kl_junior_and_refuses_plain_grpo():
    from training.config import load_config

    assert recipe_method(load_config("tandem_grpo.cpu")) == "tandem"
    assert recipe_method(load_config("kl_junior_grpo.cpu")) == "kl_junior"
    with pytest.raises(ValueError, match="grpo_checkpoint"):
        recipe_method(load_config("rlvr_grpo.cpu"))


def test_tandem_checkpoint_refuses_a_plain_grpo_recipe_before_launching(weft_home):
    result = dg.materialize([tandem_checkpoint], resources=_resources(), raise_on_error=False,
                            run_config={"ops": {"tandem_checkpoint": {"config": {
                                "recipe": "rlvr_grpo.cpu"}}}})
    assert not result.success
    (failure,) = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert "materialize grpo_checkpoint" in str(failure.step_failure_data.user_failure_data
                                                .description)
    assert not Warehouse().read("runs").to_pylist()  # nothing was launched or recorded


def test_fresh_warehouse_has_the_tandem_views(weft_home):
    wh = Warehouse()
    for view in ("tandem_summary_latest", "tandem_pairwise_latest", "tandem_legibility",
                 "tandem_drift"):
        assert wh.sql(f"SELECT count(*) AS n FROM {view}").to_pylist() == [{"n": 0}]


def test_legibility_asset_rows_match_independent_computations(weft_home, embedded_model_dir,
                                                              junior_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from eval.benchmarks import get as get_benchmark
    from eval.models import ModelSpec, register_model

    wh = Warehouse()
    senior_id = "senior-model"
    register_model(ModelSpec(model_id=senior_id, kind="local", path=str(embedded_model_dir)), wh)
    register_model(ModelSpec(model_id="junior-model", kind="local", path=str(junior_dir)), wh)
    wh.write("problems", PROBLEMS, lineage=Lineage(partition="gsm8k"))
    wh.write("eval_samples", _samples(senior_id, SENIOR_OUT),
             lineage=Lineage(partition=f"gsm8k|{senior_id}"))
    wh.write("eval_samples", _samples("junior-model", JUNIOR_OUT),
             lineage=Lineage(partition="gsm8k|junior-model"))
    config = {"model": senior_id, "junior": "junior-model", "benchmark": "gsm8k",
              "min_count": 3}
    result = dg.materialize([tandem_legibility], resources=_resources(),
                            run_config={"ops": {"tandem_legibility": {"config": config}}})
    assert result.success
    (mat,) = result.asset_materializations_for_node("tandem_legibility")

    # §4.5 cross-entropy: transformers' masked LM loss of the junior on prompt + output
    tok = AutoTokenizer.from_pretrained(embedded_model_dir)
    junior = AutoModelForCausalLM.from_pretrained(junior_dir, dtype=torch.float32).eval()
    rows = {(r["problem_id"], r["sample_index"]): r for r in
            wh.sql("SELECT * FROM tandem_legibility").to_pylist()}
    assert len(rows) == 4
    for problem in PROBLEMS:
        for i, text in enumerate(SENIOR_OUT[problem["problem_id"]]):
            user = get_benchmark("gsm8k").render(problem)  # the prompt the senior answered
            prompt = tok.apply_chat_template([{"role": "user", "content": user}],
                                             add_generation_prompt=True, tokenize=False)
            p_ids = tok(prompt, add_special_tokens=False)["input_ids"]
            c_ids = tok(text, add_special_tokens=False)["input_ids"]
            ids = torch.tensor([p_ids + c_ids])
            labels = ids.clone()
            labels[0, :len(p_ids)] = -100
            with torch.no_grad():
                loss = float(junior(input_ids=ids, labels=labels).loss)
            row = rows[(problem["problem_id"], i)]
            assert row["tokens"] == len(c_ids)
            assert row["junior_ce_nats"] == pytest.approx(loss, rel=1e-4)
            assert 0.0 < row["overlap"] < 1.0

    # §4.4 drift: counts by list.count over the re-tokenized outputs, closed-form log-ratio/KL
    def ids_of(outputs):
        return [t for texts in outputs.values() for x in texts
                for t in tok(x, add_special_tokens=False)["input_ids"]]

    s_ids, j_ids = ids_of(SENIOR_OUT), ids_of(JUNIOR_OUT)
    n_s, n_j = len(s_ids), len(j_ids)
    drift = wh.sql("SELECT * FROM tandem_drift ORDER BY token_id").to_pylist()
    frequent = sorted({t for t in j_ids if j_ids.count(t) >= 3})
    assert [d["token_id"] for d in drift] == frequent and frequent
    for d in drift:
        t = d["token_id"]
        assert d["senior_count"] == s_ids.count(t) and d["junior_count"] == j_ids.count(t)
        expected = math.log((s_ids.count(t) + 0.5) / n_s) - math.log((j_ids.count(t) + 0.5) / n_j)
        assert d["log_ratio"] == pytest.approx(expected, rel=1e-9)
    # KL on the shared support: the tokens both outputs contain, each renormalised there
    shared = set(s_ids) & set(j_ids)
    in_s = sum(s_ids.count(t) for t in shared)
    in_j = sum(j_ids.count(t) for t in shared)
    kl = sum((s_ids.count(t) / in_s) * math.log((s_ids.count(t) / in_s) / (j_ids.count(t) / in_j))
             for t in shared)
    (summary,) = wh.sql("SELECT * FROM tandem_summary_latest").to_pylist()
    assert summary["kl"] == pytest.approx(kl, rel=1e-9)
    assert summary["kl_tokens"] == len(shared)
    assert summary["kl_senior_mass"] == pytest.approx(in_s / n_s)
    assert summary["kl_junior_mass"] == pytest.approx(in_j / n_j)
    assert mat.metadata["kl_tokens"].value == len(shared)
    shares = [sum(abs(d["log_ratio"]) > th for d in drift) / len(drift)
              for th in summary["survival_thresholds"]]
    assert summary["survival"] == pytest.approx(shares)
    # §4.5 over every position: per-sample means weighted by their token counts
    tokens = sum(r["tokens"] for r in rows.values())
    assert summary["junior_ce_nats"] == pytest.approx(
        sum(r["junior_ce_nats"] * r["tokens"] for r in rows.values()) / tokens)
    assert summary["overlap"] == pytest.approx(
        sum(r["overlap"] * r["tokens"] for r in rows.values()) / tokens)
    # the plots are in the metadata and on disk
    assert {"plot_drift_survival", "plot_legibility"} <= set(mat.metadata)
    assert "data:image/png;base64," in mat.metadata["plot_drift_survival"].value
    assert list((Path(weft_home) / "reports" / "tandem").rglob("drift_survival.png"))


def test_tandem_eval_writes_solo_and_team_rows_like_eval_samples(weft_home):
    """Senior and junior are scripted endpoints (registered models): four evaluations land as
    ordinary eval_samples / eval_scores partitions that the leaderboard and the runs check
    accept."""
    from assets.common import runs_disagreements
    from eval.models import ModelSpec, register_model
    from pipelines.llm.testing import FakeLLMServer

    answers = {"apples": "12", "eggs": "6"}

    def senior(body, index):  # a step, then the right answer when it continues
        if body.get("response_format"):   # the endpoint check, answered as vLLM does
            return '{"k"'
        question = body["messages"][0]["content"]
        if body["messages"][-1]["role"] == "assistant":
            return f"So \\boxed{{{next(a for w, a in answers.items() if w in question)}}}."
        if body.get("stop"):
            return "Let me count.\n\n"
        return f"\\boxed{{{next(a for w, a in answers.items() if w in question)}}}"

    def junior(body, index):  # alone it is wrong; in a team it writes one step
        if body.get("response_format"):
            return '{"k"'
        return "I think it is \\boxed{0}." if not body.get("stop") else "Keep going.\n\n"

    wh = Warehouse()
    wh.write("problems", PROBLEMS, lineage=Lineage(partition="gsm8k"))
    with FakeLLMServer(models=("s",), responder=senior) as s, \
            FakeLLMServer(models=("j",), responder=junior) as j:
        register_model(ModelSpec(model_id="sen", kind="endpoint", base_url=s.base_url,
                                 served_model="s"), wh)
        register_model(ModelSpec(model_id="jun", kind="endpoint", base_url=j.base_url,
                                 served_model="j"), wh)
        result = dg.materialize([tandem_eval], resources=_resources(), run_config={"ops": {
            "tandem_eval": {"config": {"model": "sen", "junior": "jun", "limit": 2,
                                       "sampling": {"k": 2}}}}})
    assert result.success
    board = {r["model"]: r for r in wh.sql("SELECT * FROM leaderboard").to_pylist()}
    assert board["sen"]["accuracy"] == 1.0 and board["jun"]["accuracy"] == 0.0
    team_s, team_j = "sen:handoff:jun:senior-first", "sen:handoff:jun:junior-first"
    # senior first: S writes a step, J a step, S answers; junior first: J, S answers
    assert board[team_s]["accuracy"] == 1.0 and board[team_j]["accuracy"] == 1.0
    rows = wh.sql("SELECT model, segment_authors, partner, output FROM eval_samples "
                  "WHERE mode = 'handoff'").to_pylist()
    assert {(r["model"], r["segment_authors"]) for r in rows} == {(team_s, "SJS"),
                                                                  (team_j, "JS")}
    assert {r["partner"] for r in rows} == {"jun"}
    data = wh.sql("SELECT DISTINCT partition, run_id FROM eval_samples").to_pylist()
    runs = wh.sql("SELECT DISTINCT asset, partition, run_id, status FROM runs").to_pylist()
    calls = wh.sql("SELECT DISTINCT asset, partition, run_id FROM llm_calls").to_pylist()
    assert len(data) == 4 and runs_disagreements("eval_samples", data, runs, calls) == []
    (mat,) = result.asset_materializations_for_node("tandem_eval")
    assert mat.metadata[f"{team_j} pass@1"].value == 1.0


def _pass_at_k(n: int, c: int, k: int) -> float:
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def test_comparison_asset_tests_each_claim_in_its_direction(weft_home):
    wh = Warehouse()
    junior = "base"
    # per problem: correct samples out of 4 for A and B (A better on most problems)
    correct = {"A": [3, 4, 2, 4, 1, 3], "B": [1, 2, 2, 1, 0, 2]}
    for model, counts in correct.items():
        for starts in ("senior", "junior"):
            label = handoff_label(model, junior, starts)
            rows = [{"model": label, "benchmark": "gsm8k", "problem_id": f"p{j}",
                     "sample_index": i, "correct": i < c, "gen_error": None, "mode": "handoff"}
                    for j, c in enumerate(counts) for i in range(4)]
            wh.write("eval_samples", rows, lineage=Lineage(partition=f"gsm8k|{label}"))
        ce = [1.0, 1.2, 0.9, 1.1, 1.3, 1.0] if model == "A" else [1.4, 1.5, 1.2, 1.3, 1.6, 1.1]
        leg = [{"model": model, "junior": junior, "benchmark": "gsm8k", "problem_id": f"p{j}",
                "sample_index": 0, "tokens": 10, "junior_ce_nats": v, "overlap": 1.0 - v / 4}
               for j, v in enumerate(ce)]
        wh.write("tandem_legibility", leg, lineage=Lineage(partition=f"gsm8k|{model}|{junior}"))
    config = {"model_a": "A", "model_b": "B", "junior": junior, "ks": [1, 2], "n_boot": 500}
    result = dg.materialize([tandem_comparison], resources=_resources(),
                            run_config={"ops": {"tandem_comparison": {"config": config}}})
    assert result.success
    rows = wh.sql("SELECT * FROM tandem_pairwise_latest").to_pylist()
    assert len(rows) == 2 * 2 + 2
    for r in rows:
        if r["statistic"] == "handoff_pass@k":
            k = r["k"]
            a = [_pass_at_k(4, c, k) for c in correct["A"]]
            b = [_pass_at_k(4, c, k) for c in correct["B"]]
            assert r["alternative"] == "greater" and r["n"] == 6
            assert r["diff"] == pytest.approx(sum(a) / 6 - sum(b) / 6)
            assert r["p_ttest"] < 0.05
        elif r["statistic"] == "junior_ce_nats":
            assert r["alternative"] == "less" and r["diff"] < 0 and r["p_ttest"] < 0.05
        else:
            assert r["statistic"] == "overlap" and r["alternative"] == "greater"
            assert r["diff"] > 0 and r["p_ttest"] < 0.05


def test_comparison_without_rows_says_what_to_materialize(weft_home):
    result = dg.materialize([tandem_comparison], resources=_resources(), raise_on_error=False,
                            run_config={"ops": {"tandem_comparison": {"config": {
                                "model_a": "A", "model_b": "B", "junior": "base"}}}})
    assert not result.success
    (failure,) = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert "Materialize tandem_eval" in str(failure.step_failure_data.user_failure_data.description)


@pytest.mark.slow
@pytest.mark.server
def test_tandem_and_kl_junior_train_then_evaluate_solo_and_in_handoff(weft_home,
                                                                     embedded_model_dir):
    """From a fresh WEFT_HOME: both .cpu recipes train through Pipes; the Tandem checkpoint
    is evaluated solo and with the junior (both starts) on two local vLLM servers; legibility
    and drift land in the warehouse."""
    wh = Warehouse()
    wh.write("problems", PROBLEMS, lineage=Lineage(partition="gsm8k"))
    instance = dg.DagsterInstance.ephemeral()
    short = [f"model_name_or_path={embedded_model_dir}", "max_steps=1", "dataset_limit=8", "max_completion_length=12", 'save_strategy="no"']
    kl = dg.materialize([tandem_checkpoint], resources=_resources(), instance=instance,
                        run_config={"ops": {"tandem_checkpoint": {"config": {
                            "recipe": "kl_junior_grpo.cpu", "overrides": short}}}})
    assert kl.success
    (kl_mat,) = kl.asset_materializations_for_node("tandem_checkpoint")
    assert kl_mat.metadata["method"].value == "kl_junior"
    run_config = {"ops": {
        "tandem_checkpoint": {"config": {"recipe": "tandem_grpo.cpu", "overrides": short}},
        "tandem_eval": {"config": {"limit": 2, "sampling": {"k": 2, "max_tokens": 40},
                                   "max_concurrency": 2}},
        "tandem_legibility": {"config": {"min_count": 2}},
    }}
    result = dg.materialize([tandem_checkpoint, tandem_eval, tandem_legibility],
                            resources=_resources(), instance=instance, run_config=run_config)
    assert result.success
    (mat,) = result.asset_materializations_for_node("tandem_checkpoint")
    assert mat.metadata["method"].value == "tandem"
    assert Path(mat.metadata["junior_path"].value) == Path(embedded_model_dir)
    senior = str(mat.metadata["registered_model"].value)
    rows = wh.sql("SELECT model, mode, partner, handoff_starts, segment_authors FROM eval_samples "
                  "WHERE mode = 'handoff'").to_pylist()
    assert {r["handoff_starts"] for r in rows} == {"senior", "junior"}
    assert all(r["model"].startswith(f"{senior}:handoff:") for r in rows)
    assert all(r["segment_authors"][0] == r["handoff_starts"][0].upper() for r in rows)
    board = {r["model"] for r in wh.sql("SELECT model FROM leaderboard").to_pylist()}
    assert senior in board and any(m.endswith("junior-first") for m in board)
    (summary,) = wh.sql("SELECT * FROM tandem_summary_latest").to_pylist()
    assert summary["model"] == senior and summary["samples"] > 0
