"""``python -m pipelines.engagement toy --env deliberation|patrol``: print the toy tables.

Examples::

    python -m pipelines.engagement toy --env deliberation --setting single
    python -m pipelines.engagement toy --env deliberation --setting sequential --train 30000
    python -m pipelines.engagement toy --env patrol --setting module
    python -m pipelines.engagement toy --env patrol --setting state --depth 3

``--train`` / ``--eval`` override the episode counts of the configuration; ``--seed`` its seed.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from pipelines.engagement import deliberation as D
from pipelines.engagement import patrol as P
from pipelines.engagement.tables import (
    deliberation_rows,
    format_table,
    mode_distribution,
    patrol_rows,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipelines.engagement")
    sub = parser.add_subparsers(dest="command", required=True)
    toy = sub.add_parser("toy", help="run a toy experiment of §5.1 and print its table")
    toy.add_argument("--env", choices=("deliberation", "patrol"), required=True)
    toy.add_argument("--setting", default=None,
                     help="deliberation: single|sequential (default single); "
                          "patrol: module|state (default module)")
    toy.add_argument("--depth", type=int, choices=(2, 3), default=2,
                     help="patrol state-level phase depth")
    toy.add_argument("--train", type=int, default=None, help="training episodes")
    toy.add_argument("--eval", type=int, default=None, help="evaluation episodes")
    toy.add_argument("--seed", type=int, default=None)
    toy.add_argument("--modes", action="store_true",
                     help="deliberation: also print mode shares per urgency level (Figs 3-4)")
    args = parser.parse_args(argv)

    if args.env == "deliberation":
        setting = args.setting or "single"
        if setting not in ("single", "sequential"):
            parser.error(f"--setting for deliberation is single or sequential, not {setting!r}")
        cfg = D.SINGLE_TASK if setting == "single" else D.SEQUENTIAL
        if args.seed is not None:
            cfg = replace(cfg, seed=args.seed)
        agents = {t: D.train(cfg, t, args.train) for t in D.TIMINGS}
        print(format_table(deliberation_rows(cfg, None, args.eval, agents),
                           f"Urgency-aware deliberation, {setting} task (Table 1 / 8-9)"))
        if args.modes:
            print()
            print(format_table(mode_distribution(cfg, None, args.eval, agents),
                               "Mode shares per urgency level under EP evaluation (Fig. 3-4)"))
    else:
        setting = args.setting or "module"
        if setting not in ("module", "state"):
            parser.error(f"--setting for patrol is module or state, not {setting!r}")
        pcfg = P.MODULE_LEVEL if setting == "module" else P.STATE_LEVEL[args.depth]
        if args.seed is not None:
            pcfg = replace(pcfg, seed=args.seed)
        title = ("Patrol, module-level interruption (Table 2a / 14)" if setting == "module"
                 else f"Patrol, state-level interruption, depth {args.depth} (Table 2b)")
        print(format_table(patrol_rows(pcfg, args.train, args.eval), title))
    return 0


if __name__ == "__main__":
    sys.exit(main())
