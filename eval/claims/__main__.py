"""``python -m eval.claims``: the Results table (claims, then setup checks under a heading of
their own), the claim history or the seed-pooled table from the warehouse; ``--rejudge``
re-applies the verdict rule to the stored rows. Every verdict is printed as
``eval.claims.shown_verdict`` words it: an inconclusive part says why."""

from __future__ import annotations

import argparse
import sys

from eval.claims.readers import (
    claim_history,
    history_table,
    latest_claims,
    rejudge,
    results_table,
)
from eval.replicates import pooled_rows, seeds_table
from warehouse import Warehouse


def main(argv: list[str] | None = None) -> int:
    """``python -m eval.claims``: print the Results table from the warehouse."""
    parser = argparse.ArgumentParser(
        prog="python -m eval.claims",
        description="Print every paper claim's latest verdict from the warehouse's claims table "
                    "as a Markdown table (the table of docs/results.md).")
    parser.add_argument("experiments", nargs="*", metavar="EXPERIMENT",
                        help="only these experiments (result asset names, e.g. ep_patrol_claim); "
                             "all when none is named")
    parser.add_argument("--warehouse", help="warehouse folder (default: WEFT_HOME/warehouse)")
    parser.add_argument("--digits", type=int, default=3, help="decimals shown (default 3)")
    parser.add_argument("--history", nargs="*", metavar="EXPERIMENT",
                        help="print every recorded run of these experiments (all when none is "
                             "named), one line per claim part per run, instead of the newest "
                             "run's table")
    parser.add_argument("--seeds", nargs="*", metavar="EXPERIMENT",
                        help="pool every claim part over the newest run of each seed recorded "
                             "for these experiments (all when none is named; same scale and "
                             "design), instead of the newest run's table")
    parser.add_argument("--export", metavar="CSV",
                        help="write every claim part (newest run of each experiment, pooled over "
                             "seeds where two or more were recorded) to this CSV file, the "
                             "committed source of docs/results.md's table")
    parser.add_argument("--render", metavar="CSV",
                        help="print the Markdown table of an export file (no warehouse needed)")
    parser.add_argument("--rejudge", action="store_true",
                        help="first re-apply the current verdict rule to the stored rows and "
                             "rewrite those whose verdict changed (prints each change)")
    args = parser.parse_args(argv)
    if args.render:
        from eval.claims.export import read_csv, render

        try:
            print(render(read_csv(args.render), digits=args.digits))
        except (OSError, ValueError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        return 0
    wh = Warehouse(args.warehouse)
    if args.rejudge:
        for experiment, section, metric, old, new, why in rejudge(wh):
            print(f"rejudged {experiment} {section} {metric}: {old} -> {new}"
                  + (f" ({why})" if why else ""), file=sys.stderr)
    if args.export:
        from eval.claims.export import export_rows, write_csv

        rows = export_rows(wh)
        if not rows:
            print("no claims recorded yet in this warehouse: nothing to export",
                  file=sys.stderr)
            return 1
        path = write_csv(rows, args.export)
        pooled = sum(r.get("pooled_verdict") is not None for r in rows)
        print(f"wrote {len(rows)} claim parts ({pooled} pooled over seeds) to {path}")
        return 0
    if args.seeds is not None:
        pooled = pooled_rows(claim_history(wh, args.seeds))
        if not pooled:
            print("no claim part of "
                  f"{', '.join(args.seeds) or 'any experiment'} has runs with two different "
                  "seeds (same scale and design) in claim_history: run the experiment's job "
                  "again with another seed (docs/results.md says where each seed is)",
                  file=sys.stderr)
            return 1
        print(seeds_table(pooled, digits=args.digits))
        return 0
    if args.history is not None:
        history = claim_history(wh, args.history)
        if not history:
            print("no claim history in this warehouse for "
                  f"{', '.join(args.history) or 'any experiment'}: it is kept from the first "
                  "result run that writes claims", file=sys.stderr)
            return 1
        print(history_table(history, digits=args.digits))
        return 0
    rows = latest_claims(wh)
    if args.experiments:
        known = sorted({r["experiment"] for r in rows})
        unknown = [e for e in args.experiments if e not in known]
        if unknown:
            print(f"no claims of {', '.join(unknown)} in this warehouse; recorded experiments: "
                  f"{', '.join(known) or 'none'}", file=sys.stderr)
            return 1
        rows = [r for r in rows if r["experiment"] in args.experiments]
    if not rows:
        print("no claims recorded yet in this warehouse: materialize an asset of the `results` "
              "group (the Dagster UI, or `weft materialize`), then run this again",
              file=sys.stderr)
        return 1
    print(results_table(rows, digits=args.digits))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
