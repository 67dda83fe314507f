"""DUET under data parallelism: two real processes (torch.distributed.run, gloo on CPU) must
compute ONE allocation over the whole generation batch (DUET §3.1, Eq. 4: one lam* and one
budget B over all of a step's prompts), equal on both processes and equal to the
single-process allocator on the gathered inputs, and keep one controller state that resumes.
The processes run tests/training/duet/dist_worker.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from pipelines.settings import PROJECT_ROOT
from training.duet import coin_draws, neyman_allocation, stratification_factors

WORKER = PROJECT_ROOT / "tests" / "training" / "duet" / "dist_worker.py"
SLOTS = 4


def _launch(tmp_path, *args: str, timeout: int) -> list[dict]:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               str(WORKER), *args]
    done = subprocess.run(command, cwd=PROJECT_ROOT, capture_output=True, text=True,
                          timeout=timeout, check=False,
                          env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT),
                               "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-4000:]
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]


def _by_prompt(rows: list, slots: int = SLOTS):
    """Global rows (key, s_hat, L_hat), concatenated in rank order -> per-prompt lists."""
    groups = [rows[i:i + slots] for i in range(0, len(rows), slots)]
    assert all(len({r[0] for r in g}) == 1 for g in groups)
    return [g[0][0] for g in groups], [g[0][1] for g in groups], [g[0][2] for g in groups]


def test_two_processes_allocate_once_over_the_gathered_prompts(tmp_path):
    ranks = _launch(tmp_path, "plain", str(tmp_path), timeout=300)
    plans = [r["plan"] for r in ranks]
    for key in ("keys", "counts", "lam", "budget", "s_pre", "allocated"):
        assert plans[0][key] == plans[1][key], key
    assert [p["offset"] for p in plans] == [0, 6] and [p["world"] for p in plans] == [2, 2]
    # Independent: the single-process allocator on the rows both processes hold, in rank order.
    keys, s_hat, l_hat = _by_prompt(ranks[0]["local"] + ranks[1]["local"])
    expected = neyman_allocation(s_hat, l_hat, 1.0 * 2 * sum(l_hat), n_min=1, n_max=SLOTS)
    assert plans[0]["keys"] == keys == ["A", "B", "C"]
    assert plans[0]["counts"] == expected.counts and plans[0]["lam"] == expected.lam
    assert plans[0]["budget"] == pytest.approx(2 * sum(l_hat))
    assert plans[0]["s_pre"] == pytest.approx(stratification_factors(expected.counts, 0.05))
    assert plans[0]["allocated"] == [i % SLOTS < expected.counts[i // SLOTS]
                                     for i in range(3 * SLOTS)]
    # Rows gathered in global order: process 0's rows, then process 1's.
    assert ranks[0]["gathered"] == ranks[1]["gathered"] == (
        [[0, i] for i in range(6)] + [[1, i] for i in range(6)])
    # Diverged estimates for the prompt both processes hold: both refuse, neither hangs.
    assert all(r["error"] and "diverged" in r["error"] for r in ranks)


@pytest.mark.slow
def test_duet_run_on_two_processes_shares_one_controller(tmp_path, embedded_model_dir):
    ranks = _launch(tmp_path, "train", str(tmp_path), str(embedded_model_dir), timeout=900)
    assert [r["world"] for r in ranks] == [2, 2]
    steps = [r["steps"] for r in ranks]
    assert len(steps[0]) == len(steps[1]) == 2
    for s0, s1 in zip(*steps, strict=True):
        p0, p1 = s0["plan"], s1["plan"]
        assert p0["lam"] == p1["lam"] and p0["counts"] == p1["counts"]  # one lam*, one n_q
        assert p0["allocated"] == p1["allocated"] and (p0["offset"], p1["offset"]) == (0, 8)
        # Independent: Eq. 4 on the (key, s_hat, L_hat) each process held, concatenated.
        keys, s_hat, l_hat = _by_prompt(s0["local"] + s1["local"])
        expected = neyman_allocation(s_hat, l_hat, 3 * sum(l_hat), n_min=2, lam0=s0["lam0"],
                                     n_max=SLOTS)
        assert p0["keys"] == keys and p0["counts"] == expected.counts
        assert p0["lam"] == pytest.approx(expected.lam, rel=1e-12)
        assert s0["adv_global"] == s1["adv_global"]
        # Each process's advantages are its slice of the global batch's, times its weights
        # (Eq. 6: 0 for unallocated or aborted rows, else 1 / (s_pre p_abort) >= 1).
        for s, p in ((s0, p0), (s1, p1)):
            assert len(s["advantages"]) == 8
            for i, a in enumerate(s["advantages"]):
                g = s["adv_global"][p["offset"] + i]
                assert a == 0 or (p["allocated"][p["offset"] + i] and g != 0
                                  and a / g >= 1 - 1e-6)
        # Coins: one per slot of the global batch, distinct, from (seed, step).
        coins = {int(i): u for s in (s0, s1) for i, u in s["coins"].items()}
        draws = coin_draws(ranks[0]["seed"], s0["step"], 4 * SLOTS)
        assert sorted(coins) == [i for i, a in enumerate(p0["allocated"]) if a]
        assert all(u == draws[i] for i, u in coins.items()) and len(set(coins.values())) == len(
            coins)
    first = steps[0][0]["plan"]
    assert len(set(first["counts"])) > 1  # the seeded sigmas give different n_q
    # One controller state: equal on both processes, saved once, resumed on both.
    assert ranks[0]["state"] == ranks[1]["state"]
    prompts = ranks[0]["state"]["prompts"]
    assert len(prompts["length"]) == 4, "Phase 4 recorded kept lengths of every prompt"
    # Eq. 3 observed (beyond the seeded value) for prompts of both processes: their loss-pass
    # log-probs were gathered. First step: process 0 held prompts 0-1, process 1 prompts 2-3.
    observed = {k for k, (_, count) in prompts["sigma"].items() if count > 1}
    held = [set(steps[0][0]["plan"]["keys"][:2]), set(steps[0][0]["plan"]["keys"][2:])]
    assert observed & held[0] and observed & held[1]
    saved = json.loads((tmp_path / "run" / "checkpoint-2" / "duet_state.json").read_text())
    assert saved == ranks[0]["state"]
    for r in ranks:
        assert r["cold"] != saved and r["resumed"] == saved


class _Pretend:
    """A two-process group seen from process 0, whose partner holds ``other``."""

    rank, world = 0, 2

    def __init__(self, other):
        self.other = other

    def all_gather(self, obj):
        return [obj, self.other]

    def broadcast(self, obj):
        return obj


def test_bad_layouts_are_refused_with_the_reason():
    from training.duet import DuetSettings
    from training.duet.dist import TorchGroup, global_plan

    settings = DuetSettings(n_min=1)
    rows = [("A", 1.0, 5.0)] * 4
    with pytest.raises(ValueError, match="different numbers of rows"):
        global_plan(_Pretend(rows[:2]), rows, SLOTS, settings, None)
    with pytest.raises(ValueError, match="consecutive rows"):
        global_plan(_Pretend([("B", 1.0, 5.0)] * 2 + [("C", 1.0, 5.0)] * 2), rows, SLOTS,
                    settings, None)
    with pytest.raises(ValueError, match="multiple of num_generations"):
        global_plan(_Pretend(rows[:3]), rows[:3], SLOTS, settings, None)
    single = global_plan(TorchGroup(), rows, SLOTS, settings, None)  # no process group
    assert (single["offset"], single["local_rows"], single["world"]) == (0, 4, 1)
    assert single["counts"] == [SLOTS] and single["keys"] == ["A"]
