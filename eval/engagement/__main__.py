"""``python -m eval.engagement toy|llm``: print the toy tables (§5.1) or an LLM-experiment
comparison (§5.2).

Examples::

    python -m eval.engagement toy --env deliberation --setting single
    python -m eval.engagement toy --env deliberation --setting sequential --train 30000
    python -m eval.engagement toy --env patrol --setting module
    python -m eval.engagement toy --env patrol --setting state --depth 3

    python -m eval.engagement llm --env assistant --scripted --setting single
    python -m eval.engagement llm --env kitchen --scripted --setting multi
    python -m eval.engagement llm --env assistant --method ep --seeds 1 --episodes 1

``--train`` / ``--eval`` override the episode counts of the configuration; ``--seed`` its seed.
``llm`` without ``--scripted`` uses ``--base-url``/``--model`` (or ``WEFT_LLM_BASE_URL`` /
``WEFT_LLM_MODEL``), else starts (or reuses) the local server of the embedded model.

Stopping: Ctrl-C (SIGINT), SIGTERM or SIGHUP at any point of ``llm`` (while the server starts,
during the run) stops the vLLM server this command started (its whole process group; a reused
server is left running), prints that it was stopped and exits with status 130. Further signals
while the server is being stopped are ignored so that the stop completes. Not guaranteed:
SIGKILL cannot be caught, so a server started by a killed command keeps running (``python -m
pipelines.serving stop`` stops it).
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from eval.engagement import deliberation as D
from eval.engagement import patrol as P
from eval.engagement.tables import (
    deliberation_rows,
    format_table,
    mode_distribution,
    patrol_rows,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eval.engagement")
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
    llm = sub.add_parser("llm", help="run an LLM experiment of §5.2 and print its table")
    llm.add_argument("--env", choices=("assistant", "kitchen"), required=True)
    llm.add_argument("--method", action="append", default=None,
                     help="a method to run (repeatable; default all): assistant: agentloop, "
                          "poll, ep; kitchen: agentloop, poll, reflexpatch, ep")
    llm.add_argument("--setting", default=None,
                     help="assistant: single|milestones (default milestones); "
                          "kitchen: one|multi (default one)")
    llm.add_argument("--scripted", action="store_true", help="scripted policies, no model")
    llm.add_argument("--seeds", type=int, default=None, help="assistant: seeds (default 20)")
    llm.add_argument("--episodes", type=int, default=None,
                     help="assistant: episodes per seed (default 5)")
    llm.add_argument("--cases", type=int, default=None, help="kitchen: cases per cell")
    llm.add_argument("--main-tokens", type=int, default=300,
                     help="assistant: max tokens per main-task milestone (LLM outputs)")
    llm.add_argument("--base-url", default=None)
    llm.add_argument("--model", default=None)
    llm.add_argument("--seed", type=int, default=42)
    args = parser.parse_args(argv)

    if args.command == "llm":
        return _llm(parser, args)
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


def _llm(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from eval.engagement.llm_runs import methods_for, run_comparison, score_table

    settings = ("single", "milestones") if args.env == "assistant" else ("one", "multi")
    if args.setting is not None and args.setting not in settings:
        parser.error(f"--setting for {args.env} is {' or '.join(settings)}, not {args.setting!r}")
    bad = [m for m in args.method or () if m not in methods_for(args.env)]
    if bad:
        parser.error(f"--method for {args.env} is one of {methods_for(args.env)}, not {bad}")
    server = None
    try:
        with _signals_interrupt():
            try:
                client, server = _client(parser, args)
                comp = run_comparison(args.env, args.method, setting=args.setting,
                                      client=client, n_seeds=args.seeds,
                                      episodes_per_seed=args.episodes,
                                      cases_per_cell=args.cases, main_tokens=args.main_tokens,
                                      log=False, seed=args.seed)
            finally:
                if server is not None:
                    _stop_server(server)
    except KeyboardInterrupt as exc:
        print(f"interrupted ({exc or 'SIGINT'}): the run stopped, and the model server this "
              "command started (if any) was stopped", file=sys.stderr)
        return 130
    title = (f"{args.env}, {comp.setting}, policy {comp.policy} "
             f"(LLM calls {comp.llm['calls']}, unusable replies {comp.llm['failures']})")
    print(format_table(score_table(comp), title))
    return 0


def _client(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[Any, Any]:
    """(client, the local server this command started or reused, or None). A start that is
    interrupted or fails stops what it spawned before the exception propagates."""
    if args.scripted:
        return None, None
    from pipelines.llm import LLMClient

    if args.base_url or args.model:
        if not (args.base_url and args.model):
            parser.error("--base-url and --model go together")
        return LLMClient(args.base_url, args.model), None
    import os

    from pipelines.llm import ENV_MODEL

    if os.environ.get(ENV_MODEL):
        return LLMClient.from_env(), None
    from pipelines import serving

    server = serving.LocalModelServer()
    try:
        server.start()
    except BaseException:
        _stop_server(server)
        raise
    return LLMClient(server.base_url, str(server.served_name)), server


def _stop_server(server: Any) -> None:
    """Stop ``server`` if this process spawned it, with SIGINT/SIGTERM/SIGHUP ignored meanwhile
    (a second Ctrl-C must not leave it half-stopped)."""
    old = {sig: signal.signal(sig, signal.SIG_IGN) for sig in _SIGNALS}
    try:
        process = getattr(server, "process", None)
        if process is not None and process.poll() is None:
            server.owned = True  # spawned here, even if interrupted before it was marked
        server.stop()
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextmanager
def _signals_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP raise KeyboardInterrupt like Ctrl-C does, so cleanup code runs."""
    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    old = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    old[signal.SIGINT] = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


if __name__ == "__main__":
    sys.exit(main())
