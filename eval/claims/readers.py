"""Claims in the warehouse: the scores result assets read (:func:`problem_scores`,
:func:`step_values`, :func:`newest_samples`), the newest run of an experiment table
(:func:`newest_rows`, :func:`run_settings`, :func:`upstream_draw`), the ``claims`` and ``claim_history`` tables
(:func:`latest_claims`, :func:`keep_history`, :func:`claim_history`, :func:`rejudge`) and their
Markdown tables (:func:`results_table`, :func:`history_table`), which print each verdict as
:func:`eval.claims.shown_verdict` words it (an inconclusive part says why; setup checks read
``check passed`` / ``check failed`` and the Results table lists them apart)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from eval.claims import ClaimError, is_check, is_plumbing, row_judgement, shown_verdict
from eval.replicates import as_seed, design_hash, run_seed


def problem_scores(wh: Any, model: str, benchmark: str, *, mode: str | None = None,
                   budget: int | None = None, column: str = "correct") -> dict[str, float]:
    """Mean of ``column`` per problem over the samples of the newest evaluation run of
    ``model`` on ``benchmark`` (optionally one ``mode`` and one ``budget``) in ``eval_samples``.
    Samples with no value (a failed generation, an ungraded answer) count as 0 for ``correct``
    (a failure is not a right answer) and are left out for any other column. Raises
    ClaimError when there is no such run."""
    if column not in ("correct", "completion_tokens", "tokens_used", "ari", "abo", "airw",
                      "tool_errors", "turns"):
        raise ClaimError(f"problem_scores: unsupported column {column!r}")
    where = ["model = $model", "benchmark = $benchmark"]
    params: dict[str, Any] = {"model": model, "benchmark": benchmark}
    if mode is not None:
        where.append("mode = $mode")
        params["mode"] = mode
    if budget is not None:
        where.append("budget = $budget")
        params["budget"] = int(budget)
    cond = " AND ".join(where)
    value = (f"coalesce(CAST({column} AS DOUBLE), 0.0)" if column == "correct"
             else f"CAST({column} AS DOUBLE)")
    query = f"""
        WITH newest AS (SELECT run_id FROM eval_samples WHERE {cond}
                        ORDER BY created_at DESC LIMIT 1)
        SELECT problem_id, avg({value}) AS score FROM eval_samples
        WHERE {cond} AND run_id = (SELECT run_id FROM newest)
        GROUP BY problem_id"""
    if "eval_samples" not in wh.tables():
        raise ClaimError("the warehouse has no eval_samples table yet: evaluate the arms first")
    rows = wh.sql(query, params).to_pylist()
    scores = {r["problem_id"]: float(r["score"]) for r in rows if r["score"] is not None}
    if not scores:
        raise ClaimError(f"no {column} samples of model {model!r} on {benchmark!r}"
                         + (f" in mode {mode!r}" if mode else "")
                         + (f" at budget {budget}" if budget is not None else "")
                         + ": evaluate that arm first")
    return scores


def step_values(wh: Any, checkpoint_id: str, column: str) -> dict[int, float]:
    """``column`` of ``train_metrics`` per training step of ``checkpoint_id`` (the steps are the
    pairing unit when two arms ran the same number of steps on the same prompts)."""
    allowed = ("tokens_generated", "seconds_per_step", "generation_s", "reward_mean",
               "completion_length")
    if column not in allowed:
        raise ClaimError(f"step_values: column must be one of {allowed}, got {column!r}")
    if "train_metrics" not in wh.tables():
        raise ClaimError("the warehouse has no train_metrics table yet: train the arms first")
    rows = wh.sql(f"SELECT step, CAST({column} AS DOUBLE) AS v FROM train_metrics "
                  "WHERE checkpoint_id = $ck AND step IS NOT NULL", {"ck": checkpoint_id}
                  ).to_pylist()
    values = {int(r["step"]): float(r["v"]) for r in rows if r["v"] is not None}
    if not values:
        raise ClaimError(f"no {column} in train_metrics for checkpoint {checkpoint_id!r}")
    return values


def newest_samples(wh: Any, model: str, benchmark: str) -> list[dict[str, Any]]:
    """Every ``eval_samples`` row of the newest evaluation run of ``model`` on ``benchmark``."""
    if "eval_samples" not in wh.tables():
        raise ClaimError("the warehouse has no eval_samples table yet: evaluate the arms first")
    rows = wh.sql("""
        SELECT * FROM eval_samples WHERE model = $model AND benchmark = $benchmark
          AND run_id = (SELECT run_id FROM eval_samples WHERE model = $model
                        AND benchmark = $benchmark ORDER BY created_at DESC LIMIT 1)""",
                  {"model": model, "benchmark": benchmark}).to_pylist()
    if not rows:
        raise ClaimError(f"no samples of model {model!r} on {benchmark!r}: evaluate that arm "
                         "first")
    return rows


def newest_rows(wh: Any, table: str, key: str) -> list[dict[str, Any]]:
    """The rows of ``table`` whose ``key`` is the newest one written (an experiment table's
    newest sweep, table id, ...). ClaimError when the table does not exist yet."""
    if table not in wh.tables():
        raise ClaimError(f"no {table} rows yet: materialize its asset first")
    return wh.sql(f"SELECT * FROM {table} WHERE {key} = (SELECT {key} FROM {table} "
                  "ORDER BY created_at DESC LIMIT 1)").to_pylist()


def rows_of(wh: Any, table: str, key: str, value: str | None, *, asset: str,
            missing: str) -> list[dict[str, Any]]:
    """The rows of ``table`` whose ``key`` is ``value`` (None: the newest, :func:`newest_rows`).
    ClaimError when ``table`` does not exist (materialize ``asset``) or holds no such rows:
    ``missing`` then the stored values of ``key``, newest first."""
    if value is None:
        return newest_rows(wh, table, key)
    if table not in wh.tables():
        raise ClaimError(f"no {table} rows yet: materialize {asset} first")
    rows = wh.sql(f"SELECT * FROM {table} WHERE {key} = $v", {"v": value}).to_pylist()
    if not rows:
        stored = [r[key] for r in wh.sql(
            f"SELECT {key} FROM {table} GROUP BY {key} ORDER BY max(created_at) DESC"
        ).to_pylist()]
        raise ClaimError(f"{missing}; stored: {', '.join(stored) or 'none'}")
    return rows


def run_settings(wh: Any, asset: str, partition: str) -> dict[str, Any]:
    """The recorded config of the newest ``runs`` row of ``asset`` and ``partition`` ({} if
    none)."""
    import json

    runs = wh.sql("SELECT config_json FROM runs WHERE asset = $a AND partition = $p "
                  "ORDER BY created_at DESC LIMIT 1", {"a": asset, "p": partition}).to_pylist()
    return json.loads(runs[0]["config_json"]) if runs and runs[0]["config_json"] else {}


def upstream_draw(wh: Any, asset: str, partition: str,
                  own: Mapping[str, Any]) -> dict[str, Any]:
    """The ``seed`` and ``design`` of a result whose arms an upstream experiment drew: the seed
    of the newest ``asset`` run of ``partition`` (its recorded config) and the design hash of
    that config and ``own`` (the result asset's settings), both without their seeds."""
    settings = run_settings(wh, asset, partition)
    seed = as_seed(settings.get("seed"))
    design = design_hash({"result": {k: v for k, v in own.items() if k != "seed"},
                          asset: {k: v for k, v in settings.items() if k != "seed"}})
    return {"seed": seed, "design": design}


# ---- the Results table, read back from the warehouse ------------------------------------------

CLAIMS_TABLE = "claims"
# the newest run of each experiment's claims (an experiment re-run replaces its partition; the
# window also guards against several runs' rows landing in one read)
LATEST_CLAIMS_SQL = """
SELECT * EXCLUDE (rank_) FROM (
  SELECT *, dense_rank() OVER (PARTITION BY experiment ORDER BY created_at DESC, run_id DESC)
         AS rank_
  FROM claims)
WHERE rank_ = 1
ORDER BY paper, experiment, section, claim, metric
"""


def _value(row: Mapping[str, Any], prefix: str, digits: int) -> str:
    value, low, high = (row.get(f"{prefix}_value") if prefix else row.get("diff"),
                        row.get(f"{prefix}_ci_low" if prefix else "diff_ci_low"),
                        row.get(f"{prefix}_ci_high" if prefix else "diff_ci_high"))
    if value is None:
        return "—"
    fmt = f"{{:.{digits}f}}" if prefix else f"{{:+.{digits}f}}"

    def show(x: float) -> str:  # a float sum a hair below 0 reads 0.000, not -0.000
        return fmt.format(0.0 if round(x, digits) == 0 else x)
    return f"{show(value)} [{show(low)}, {show(high)}]"


def _n_cell(row: Mapping[str, Any]) -> str:
    """``n``, with the units whose scores differ when the row counted them: ``40 (12 differ)``."""
    differ = row.get("n_discordant")
    return f"{row.get('n')}" if differ is None else f"{row.get('n')} ({differ} differ)"


def _claims_lines(rows: Sequence[Mapping[str, Any]], digits: int, last: str) -> list[str]:
    header = ("| paper | where | claim | metric | paper reports | weft: reference | "
              f"weft: treatment | treatment − reference | n | {last} |")
    lines = [header, "|" + "---|" * 10]
    for row in rows:
        cells = [row.get("paper"), row.get("section"), row.get("claim"), row.get("metric"),
                 row.get("paper_value") or "—",
                 f"{row.get('reference')}: {_value(row, 'reference', digits)}",
                 f"{row.get('treatment')}: {_value(row, 'treatment', digits)}",
                 _value(row, "", digits), _n_cell(row), f"**{shown_verdict(row)}**"]
        lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
    return lines


CHECKS_HEADING = ("Setup checks (each holds by construction of its experiment; shown apart and "
                  "never counted in a claim's verdict):")


PLUMBING_HEADING = ("Plumbing runs (the pipeline ran end to end at this scale, but the statement "
                    "needs a capable model the scale lacks; no verdict, never counted):")


def results_table(rows: Sequence[Mapping[str, Any]], digits: int = 3) -> str:
    """Markdown: one line per claim row — paper and where, the claim, what the paper reports,
    weft's reference and treatment values and their difference with 95% CIs, n (and how many
    units differ), the verdict (with the reason when inconclusive). Setup checks follow in a
    table of their own under :data:`CHECKS_HEADING`, their verdicts read ``check passed`` /
    ``check failed`` / ``check inconclusive``; plumbing runs under :data:`PLUMBING_HEADING`,
    read ``plumbing run``."""
    claims = [r for r in rows if not is_check(r) and not is_plumbing(r)]
    checks = [r for r in rows if is_check(r)]
    plumbing = [r for r in rows if is_plumbing(r)]
    lines = (_claims_lines(claims, digits, "verdict") if claims or not (checks or plumbing)
             else [])
    for heading, group, last in ((CHECKS_HEADING, checks, "check"),
                                 (PLUMBING_HEADING, plumbing, "plumbing")):
        if group:
            lines += ([""] if lines else []) + [heading, ""]
            lines += _claims_lines(group, digits, last)
    return "\n".join(lines)


def latest_claims(wh: Any) -> list[dict[str, Any]]:
    """The newest run's rows of every experiment in ``wh``'s ``claims`` table ([] if none)."""
    if CLAIMS_TABLE not in wh.tables():
        return []
    return wh.sql(LATEST_CLAIMS_SQL).to_pylist()


CLAIM_HISTORY_TABLE = "claim_history"
HISTORY_SQL = """
SELECT * FROM claim_history {where}
ORDER BY paper, experiment, section, claim, metric, created_at, run_id
"""


def keep_history(wh: Any, experiment: str) -> int:
    """Copy the ``claims`` rows of ``experiment`` into ``claim_history``, one folder per run
    (``<experiment>/<run_id>``; the rows keep their run id, time stamp and ``partition``
    column), unless that run is there already. Returns the rows copied.

    ``claims`` holds only the newest run of an experiment (a re-run replaces its partition), so
    a writer calls this before replacing the partition (the run being replaced stays, even one
    written before the history existed) and after (the new run). A second run of the same
    experiment and config that changes a verdict is then visible: the CIs of one run cover the
    problems (or steps, episodes) it evaluated, not the randomness of training the arms again."""
    import pyarrow.compute as pc

    if CLAIMS_TABLE not in wh.tables() or experiment not in wh.partitions(CLAIMS_TABLE):
        return 0
    table = wh.read(CLAIMS_TABLE, experiment)
    have = (set(wh.partitions(CLAIM_HISTORY_TABLE))
            if CLAIM_HISTORY_TABLE in wh.tables() else set())
    copied = 0
    for run_id in sorted({str(r) for r in table.column("run_id").to_pylist()}):
        folder = f"{experiment}/{run_id}"
        if folder in have:
            continue
        rows = table.filter(pc.equal(table["run_id"], run_id))
        wh.write(CLAIM_HISTORY_TABLE, rows, partition=experiment, folder=folder)
        copied += rows.num_rows
    return copied


def claim_history(wh: Any, experiments: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Every recorded run's rows of ``experiments`` (all when empty) from ``claim_history``,
    oldest run first within each claim part ([] if none)."""
    if CLAIM_HISTORY_TABLE not in wh.tables():
        return []
    where = ""
    if experiments:
        names = ", ".join("'" + e.replace("'", "''") + "'" for e in experiments)
        where = f"WHERE experiment IN ({names})"
    return wh.sql(HISTORY_SQL.format(where=where)).to_pylist()


def _seed_of(row: Mapping[str, Any]) -> str:
    """``", seed N"`` when the row's config names its seed (the claims whose own config holds
    one), else ``""``."""
    seed = run_seed(row)
    return "" if seed is None else f", seed {seed}"


def history_table(rows: Sequence[Mapping[str, Any]], digits: int = 3) -> str:
    """Markdown: one line per claim part per run (the run's date, id and seed, the difference
    with its 95% CI, n, the verdict as :func:`eval.claims.shown_verdict` prints it), then the
    parts whose verdict differs between runs."""
    lines = ["| paper | where | metric | run | treatment − reference | n | verdict |",
             "|" + "---|" * 7]
    verdicts: dict[tuple[str, str, str, str], list[str]] = {}
    for row in rows:
        stamp = row.get("created_at")
        when = stamp.strftime("%Y-%m-%d %H:%M") if hasattr(stamp, "strftime") else str(stamp)
        run = f"{when} ({str(row.get('run_id'))[:8]}{_seed_of(row)})"
        cells = [row.get("paper"), row.get("section"), row.get("metric"), run,
                 _value(row, "", digits), _n_cell(row), f"**{shown_verdict(row)}**"]
        lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
        part = (str(row.get("experiment")), str(row.get("section")), str(row.get("claim")),
                str(row.get("metric")))
        verdicts.setdefault(part, []).append(str(row.get("verdict")))
    moved = [(part, v) for part, v in verdicts.items() if len(set(v)) > 1]
    if moved:
        lines += ["", "Verdicts that differ between runs of the same experiment:"]
        lines += [f"- {exp} {section} {metric}: {' -> '.join(v)}"
                  for (exp, section, _claim, metric), v in moved]
    return "\n".join(lines)


def rejudge(wh: Any) -> list[tuple[str, str, str, str, str, str]]:
    """Re-apply the verdict rule to every row stored in ``wh``'s ``claims`` table (after the rule
    changed) and rewrite the experiments whose verdict or ``inconclusive_reason`` moved; every
    other column, the run id and the time stamp included, is kept (a row stored before
    ``inconclusive_reason`` existed gets that column). Rows stored before ``n_discordant``,
    ``role`` or the bounds existed are judged on what they hold (:func:`eval.claims.uninformative`
    skips the rules whose columns are null; no role reads as a claim). Returns ``(experiment,
    section, metric, old verdict, new verdict, why inconclusive in words or "")`` for each row
    that changed."""
    import pyarrow as pa

    from eval.claims import reason_text
    from warehouse.schema import TABLES

    if CLAIMS_TABLE not in wh.tables():
        return []
    changed: list[tuple[str, str, str, str, str, str]] = []
    for partition in wh.partitions(CLAIMS_TABLE):
        table = wh.read(CLAIMS_TABLE, partition)
        rows = table.to_pylist()
        moved = False
        for row in rows:
            old = str(row["verdict"])
            new, reason = row_judgement(row)
            if (new, reason) != (old, row.get("inconclusive_reason")):
                row["verdict"], row["inconclusive_reason"] = new, reason
                changed.append((str(row.get("experiment")), str(row["section"]),
                                str(row["metric"]), old, new, reason_text(row)))
                moved = True
        if moved:
            schema = table.schema
            if "inconclusive_reason" not in schema.names:
                schema = schema.append(TABLES[CLAIMS_TABLE].field("inconclusive_reason"))
            wh.write(CLAIMS_TABLE, pa.Table.from_pylist(rows, schema=schema),
                     partition=partition)
    return changed
