"""Read model outputs: short previews for asset metadata and whole samples for the terminal.

``preview_markdown`` renders a handful of rows as a Markdown table of excerpts (newlines folded,
``|`` escaped, long text cut in the middle so an answer at the end stays visible); the Dagster
assets put it in their metadata (``eval_samples_preview`` picks wrong and right samples of an
evaluation, ``synthesis_preview`` the first rows of a synthesis table). ``read_samples`` and
``format_sample`` back ``python -m warehouse samples``, which prints whole samples (problem,
output, extracted answer, gold, correct) where the SQL table view cuts text at 40 characters.

Not guaranteed: a preview is a sample, not a summary; which rows it shows is deterministic
(ordered by problem and sample index) but says nothing about the rest.
"""

from __future__ import annotations

import difflib
import re
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

PREVIEW_ROWS = 5
EXCERPT_CHARS = 160
RULE = "─" * 78

# (label, column, width) of the eval_samples preview
EVAL_PREVIEW_COLUMNS = (
    ("problem", "problem_id", 24), ("text", "problem_text", 120), ("output", "output", EXCERPT_CHARS),
    ("extracted", "extracted", 40), ("gold", "gold", 40), ("correct", "correct", 8),
)
# synthesis previews: (label, column, width) of sxs_alignments and mosaic trajectory rows
SXS_PREVIEW_COLUMNS = (
    ("problem", "problem_id", 40), ("interleaved output", "tagged", 240), ("k_r", "k_r", 6),
    ("k_a", "k_a", 6), ("segments", "n_segments", 8), ("collapsed", "collapsed", 9),
)
MOSAIC_PREVIEW_COLUMNS = (
    ("problem", "problem", 100), ("trajectory", "text", 200), ("status", "status", 12),
    ("turns", "num_turns", 5), ("answer", "final_answer", 40), ("gold", "answer", 40),
    ("correct", "correct", 8),
)


def excerpt(value: Any, width: int = EXCERPT_CHARS) -> str:
    """One-line text of at most ``width`` characters: whitespace folded; a longer text keeps
    its first two thirds and its last third around `` … `` (answers sit at the end)."""
    if width < 5:
        raise ValueError(f"excerpt width must be at least 5 characters, got {width}")
    text = "" if value is None else re.sub(r"\s+", " ", str(value)).strip()
    if len(text) <= width:
        return text
    tail = (width - 3) // 3
    head = width - 3 - tail
    return f"{text[:head]} … {text[len(text) - tail:]}" if tail else text[:width]


def _md_cell(value: Any, width: int) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    return excerpt(value, width).replace("|", "\\|")


def preview_markdown(rows: Sequence[Mapping[str, Any]],
                     columns: Sequence[tuple[str, str, int]], n: int = PREVIEW_ROWS,
                     title: str = "") -> str:
    """A Markdown table of the first ``n`` rows: one column per (label, key, width)."""
    if n < 1:
        raise ValueError(f"a preview shows at least one row, got n={n}")
    if not rows:
        return f"{title}\n\n(no rows)" if title else "(no rows)"
    head = "| " + " | ".join(label for label, _, _ in columns) + " |"
    rule = "|" + "---|" * len(columns)
    body = ["| " + " | ".join(_md_cell(r.get(key), width) for _, key, width in columns) + " |"
            for r in list(rows)[:n]]
    shown = f"{min(n, len(rows))} of {len(rows)} rows"
    return "\n".join(([title, ""] if title else []) + [head, rule, *body, "", f"({shown})"])


def pick_eval_samples(rows: Sequence[Mapping[str, Any]], n: int = PREVIEW_ROWS) -> list[dict]:
    """Up to ``n`` samples to show: wrong answers first (half of the slots, more when there are
    not enough right ones), then right ones, then failed generations; each group ordered by
    (problem_id, sample_index)."""
    def order(r: Mapping[str, Any]) -> tuple:
        return str(r.get("problem_id")), int(r.get("sample_index") or 0)

    wrong = sorted((r for r in rows if r.get("correct") is False), key=order)
    right = sorted((r for r in rows if r.get("correct") is True), key=order)
    failed = sorted((r for r in rows if r.get("correct") is None), key=order)
    n_right = min(len(right), n - min(len(wrong), (n + 1) // 2))
    chosen = wrong[: n - n_right] + right[:n_right]
    chosen += failed[: n - len(chosen)]
    return [dict(r) for r in chosen]


def eval_samples_preview(rows: Sequence[Mapping[str, Any]], n: int = PREVIEW_ROWS,
                         problems: Mapping[str, str] | None = None) -> str:
    """Markdown preview of an evaluation's samples (wrong and right ones side by side); the text
    column is the problem's text from ``problems`` (id -> text) where given, else the prompt
    (empty for benchmarks whose text is private)."""
    chosen = pick_eval_samples(rows, n)
    for row in chosen:
        row["problem_text"] = (problems or {}).get(row.get("problem_id")) or row.get("prompt")
    wrong = sum(1 for r in rows if r.get("correct") is False)
    title = (f"{len(chosen)} of {len(rows)} samples ({wrong} wrong); whole samples: "
             "`python -m warehouse samples --benchmark B --model M [--wrong]`")
    return preview_markdown(chosen, EVAL_PREVIEW_COLUMNS, n=n, title=title)


def synthesis_preview(rows: Sequence[Mapping[str, Any]], columns: Sequence[tuple[str, str, int]],
                      table: str, n: int = PREVIEW_ROWS) -> str:
    """Markdown preview of the first ``n`` rows of a synthesis table (SxS alignments, MOSAIC
    trajectories), with the SQL that shows the rest."""
    title = f"first {min(n, len(rows))} of {len(rows)} rows; all: " \
            f"`python -m warehouse sql --format json \"SELECT * FROM {table}\"`"
    return preview_markdown(rows, columns, n=n, title=title)


def sxs_preview(rows: Sequence[Mapping[str, Any]], n: int = PREVIEW_ROWS) -> str:
    """Preview of `sxs_alignments` rows (the interleaved output and its alignment counts)."""
    return synthesis_preview(rows, SXS_PREVIEW_COLUMNS, "sxs_alignments", n)


def mosaic_preview(rows: Sequence[Mapping[str, Any]], table: str, n: int = PREVIEW_ROWS) -> str:
    """Preview of MOSAIC / baseline trajectory rows (problem, trajectory, answer, gold)."""
    return synthesis_preview(rows, MOSAIC_PREVIEW_COLUMNS, table, n)


# ------------------------------------------------------------------- the `samples` command


class SamplesQueryError(ValueError):
    """No samples match; the message says what exists instead."""


def _suggest(name: str, known: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    return f" Did you mean {', '.join(close)}?" if close else ""


def read_samples(wh: Any, benchmark: str, model: str, *, wrong: bool = False,
                 limit: int | None = 10, problem_id: str | None = None) -> list[dict]:
    """Samples of (benchmark, model) from `eval_samples`, ordered by problem and sample index;
    ``wrong`` keeps graded-wrong ones only. Raises SamplesQueryError naming the evaluated
    (benchmark, model) pairs when the pair has no samples."""
    if limit is not None and limit < 1:
        raise SamplesQueryError(f"--limit must be at least 1, got {limit}")
    if "eval_samples" not in wh.tables():
        raise SamplesQueryError("the warehouse has no eval_samples yet: materialize eval_samples "
                                "(see the README's evaluation section) first")
    pairs = wh.sql("SELECT DISTINCT benchmark, model FROM eval_samples "
                   "ORDER BY benchmark, model").to_pylist()
    if not any(p["benchmark"] == benchmark and p["model"] == model for p in pairs):
        listing = ", ".join(f"{p['benchmark']}|{p['model']}" for p in pairs) or "none"
        hint = _suggest(benchmark, sorted({p["benchmark"] for p in pairs})) + \
            _suggest(model, sorted({p["model"] for p in pairs}))
        raise SamplesQueryError(f"no eval_samples for benchmark {benchmark!r} and model "
                                f"{model!r}.{hint} Evaluated (benchmark|model): {listing}")
    where = ["benchmark = $benchmark", "model = $model"]
    params: dict[str, Any] = {"benchmark": benchmark, "model": model}
    if wrong:
        where.append("correct = false")
    if problem_id:
        where.append("problem_id = $problem_id")
        params["problem_id"] = problem_id
    query = (f"SELECT * FROM eval_samples WHERE {' AND '.join(where)} "
             "ORDER BY problem_id, sample_index, budget NULLS FIRST, thinking_cap NULLS FIRST")
    if limit is not None:
        query += f" LIMIT {int(limit)}"
    rows = wh.sql(query, params).to_pylist()
    ids = source_ids(wh, {str(r["problem_id"]) for r in rows})
    return [dict(r, source_id=ids.get(str(r["problem_id"]))) for r in rows]


def source_ids(wh: Any, problem_ids: set[str]) -> dict[str, str]:
    """The benchmark's own id (``meta.original_id`` of the ``problems`` row) of each of
    ``problem_ids`` that has one: weft's ``problem_id`` is a content hash, which a reader cannot
    look up in the benchmark."""
    if not problem_ids or "problems" not in wh.tables():
        return {}
    rows = wh.sql("SELECT DISTINCT problem_id, json_extract_string(meta, '$.original_id') AS oid "
                  "FROM problems WHERE list_contains($ids, problem_id) AND meta IS NOT NULL",
                  {"ids": sorted(problem_ids)}).to_pylist()
    return {r["problem_id"]: r["oid"] for r in rows if r["oid"] not in (None, "")}


def _verdict(row: Mapping[str, Any]) -> str:
    if row.get("gen_error") is not None:
        return "NO RESPONSE"
    return {True: "CORRECT", False: "WRONG"}.get(row.get("correct"), "UNGRADED")


def _block(label: str, text: Any, width: int) -> list[str]:
    body = "" if text is None else str(text)
    lines = [f"── {label}"]
    for line in (body.splitlines() or ["(empty)"]):
        lines.extend(textwrap.wrap(line, width, replace_whitespace=False, drop_whitespace=False)
                     or [""])
    return lines


def format_sample(row: Mapping[str, Any], width: int = 100) -> str:
    """A whole sample as readable text: header, prompt, output, then extracted / gold / grade."""
    extras = [f"{k}={row[k]}" for k in ("budget", "thinking_cap") if row.get(k) is not None]
    source = f" ({row['source_id']} in the benchmark)" if row.get("source_id") else ""
    head = (f"{row.get('benchmark')} | {row.get('model')} | problem {row.get('problem_id')}"
            f"{source} | "
            f"sample {row.get('sample_index')} | {_verdict(row)}"
            + (f" | {', '.join(extras)}" if extras else ""))
    lines = [RULE, head, RULE]
    lines += _block("prompt", row.get("prompt") or "(not stored: the benchmark's text is private)",
                    width)
    lines += _block("output", row.get("output"), width)
    lines.append(f"── extracted: {row.get('extracted')!s}   gold: {row.get('gold')!s}   "
                 f"correct: {row.get('correct')!s}")
    for key in ("gen_error", "grade_error", "finish_reason"):
        if row.get(key) not in (None, "", "stop"):
            lines.append(f"── {key}: {row[key]}")
    return "\n".join(lines)
