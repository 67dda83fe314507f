"""Two vLLM CPU servers side by side: both on vLLM's default pinning vs weft's core split.

Starts server A (vLLM's ``auto`` pinning), then server B twice, one configuration after the
other in one run: (1) ``auto`` as well (what happened before weft chose the binding: both pin
their compute threads to the same cores), (2) the binding ``choose_cpu_bind`` picks. For each,
it times B's start-up and then sends the same chat requests to A and B at once and reports the
combined tokens/s. Prints one JSON line with both configurations and the throughput ratio.

    .venv/bin/python bench/serving_bind.py --requests 8 --max-tokens 96

``--single`` instead times one server alone under each configuration in turn (``auto``, all
allowed cores, ``nobind``, then all cores with ``--dtype bfloat16`` and ``float32``) with the
same requests, and prints tokens/s of each and their ratios to ``auto``: what a lone server
(the test suite's, the demo's) should use.

``--busy-host`` measures a server started while another vLLM CPU server already holds every
core (on the reference host, the lead run's server on port 8000; with ``--own-other``, or when
no other server runs, one this script starts bound to every allowed core and keeps busy with
requests of its own). It starts two candidate servers next to it: one unpinned (``nobind``,
what weft chose before) and one on the binding ``choose_cpu_bind`` picks now, then sends the
same requests to one and then the other, ``--repeat`` rounds rotating which goes first
(AB, BA, ...), and prints each one's tokens/s per round, their means and the ratio new / old, with the
load average before and after. ``--also-all-cores`` adds a third candidate pinned to every
allowed core (stacked on the other server's cores), rotated with the other two.

    .venv/bin/python bench/serving_bind.py --busy-host --requests 2 --max-tokens 24 --repeat 2
"""

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    import httpx

    from pipelines.serving import BIND_ENV, LocalModelServer, free_port

    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=8, help="requests per server")
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--startup-timeout", type=float, default=420.0)
    ap.add_argument("--single", action="store_true",
                    help="one server alone under each binding in turn")
    ap.add_argument("--only", default="", help="with --single: comma-separated configurations")
    ap.add_argument("--repeat", type=int, default=1,
                    help="with --single / --busy-host: rounds, interleaved")
    ap.add_argument("--busy-host", action="store_true",
                    help="next to a server that holds every core: nobind vs weft's choice")
    ap.add_argument("--own-other", action="store_true",
                    help="with --busy-host: start and load the other server here")
    ap.add_argument("--also-all-cores", action="store_true",
                    help="with --busy-host: also time a candidate pinned to every allowed core")
    args = ap.parse_args()
    if args.requests < 1 or args.max_tokens < 1 or args.repeat < 1:
        raise SystemExit("--requests, --max-tokens and --repeat must be at least 1")
    prompt = [{"role": "user", "content": "Explain step by step why the sum of two odd numbers is even."}]

    async def load(servers) -> tuple[float, int]:
        async with httpx.AsyncClient(timeout=900) as http:
            async def one(server):
                r = await http.post(f"{server.base_url}/chat/completions", json={
                    "model": server.served_name, "messages": prompt, "max_tokens": args.max_tokens,
                    "temperature": 0.0, "seed": 0, "ignore_eos": True})
                r.raise_for_status()
                return r.json()["usage"]["completion_tokens"]
            start = time.perf_counter()
            tokens = await asyncio.gather(*[one(s) for s in servers for _ in range(args.requests)])
            return time.perf_counter() - start, sum(tokens)

    saved = os.environ.pop(BIND_ENV, None)
    if args.busy_host:
        try:
            print(json.dumps(busy_host(args, load, prompt)))
        finally:
            if saved is not None:
                os.environ[BIND_ENV] = saved
        return 0
    if args.single:
        try:
            print(json.dumps(single(args, load)))
        finally:
            if saved is not None:
                os.environ[BIND_ENV] = saved
        return 0
    a = LocalModelServer(port=free_port(), served_name="bench-a")
    os.environ[BIND_ENV] = "auto"
    a.start()
    os.environ.pop(BIND_ENV)
    results = {}
    try:
        for label, forced in (("both_auto", "auto"), ("weft_split", None)):
            if forced:
                os.environ[BIND_ENV] = forced
            b = LocalModelServer(port=free_port(), served_name="bench-b",
                                 startup_timeout_s=args.startup_timeout)
            started = time.perf_counter()
            try:
                b.start()
            except Exception as err:  # noqa: BLE001 — a start-up that never finishes is the result itself
                results[label] = {"bind_b": forced or "?", "startup_s": None, "error": str(err)[:200]}
                continue
            finally:
                os.environ.pop(BIND_ENV, None)
            startup = time.perf_counter() - started
            try:
                asyncio.run(load([a, b]))  # warm-up
                wall, tokens = asyncio.run(load([a, b]))
            finally:
                b.stop()
            results[label] = {"bind_a": a.cpu_bind, "bind_b": b.cpu_bind, "startup_s": round(startup, 1),
                              "wall_s": round(wall, 2), "tokens": tokens,
                              "tok_per_s": round(tokens / wall, 1)}
    finally:
        a.stop()
        if saved is not None:
            os.environ[BIND_ENV] = saved
    both, split = results.get("both_auto", {}), results.get("weft_split", {})
    if both.get("tok_per_s") and split.get("tok_per_s"):
        results["throughput_ratio_split_over_auto"] = round(split["tok_per_s"] / both["tok_per_s"], 2)
    print(json.dumps(results))
    return 0


def single(args, load) -> dict:
    """One server at a time under each configuration, ``--repeat`` rounds interleaved."""
    from pipelines.serving import format_cpu_list

    every = format_cpu_list(sorted(os.sched_getaffinity(0)))
    configs = (("auto", "auto", ()), ("all_cores", every, ()), ("nobind", "nobind", ()),
               ("all_cores_bf16", every, ("--dtype", "bfloat16")),
               ("all_cores_fp32", every, ("--dtype", "float32")))
    if args.only:
        wanted = args.only.split(",")
        unknown = set(wanted) - {c[0] for c in configs}
        if unknown:
            raise SystemExit(f"unknown configuration(s) {sorted(unknown)}; "
                             f"choose from {[c[0] for c in configs]}")
        configs = tuple(c for c in configs if c[0] in wanted)
    runs: dict[str, list[dict]] = {}
    for _ in range(args.repeat):
        for label, bind, extra in configs:
            runs.setdefault(label, []).append(_time_one(args, load, label, bind, extra))
    results: dict = {}
    for label, done in runs.items():
        speeds = [r["tok_per_s"] for r in done if r.get("tok_per_s")]
        results[label] = done[0] if len(done) == 1 else {
            "runs": done, "tok_per_s": round(sum(speeds) / len(speeds), 1) if speeds else None}
    for label, ref in (("all_cores", "auto"), ("nobind", "auto"),
                       ("all_cores_fp32", "all_cores_bf16")):
        a, b = (results.get(k, {}).get("tok_per_s") for k in (label, ref))
        if a and b:
            results[f"ratio_{label}_over_{ref}"] = round(a / b, 2)
    return results


def busy_host(args, load, prompt) -> dict:
    """The old (``nobind``) and the new binding of a server started beside one that holds
    every core, timed on the same requests in alternating rounds."""
    import threading

    import httpx

    from pipelines.serving import (
        BIND_ENV,
        LocalModelServer,
        choose_cpu_bind,
        cpu_busy_fractions,
        format_cpu_list,
        free_port,
        running_cpu_binds,
    )

    allowed = sorted(os.sched_getaffinity(0))
    started: list[LocalModelServer] = []
    stop_other = threading.Event()
    other_threads: list[threading.Thread] = []
    other_errors: list[str] = []  # failed requests of the busy server's clients
    load_before = os.getloadavg()
    try:
        if args.own_other or not running_cpu_binds():
            os.environ[BIND_ENV] = format_cpu_list(allowed)
            other = LocalModelServer(port=free_port(), served_name="bench-other",
                                     startup_timeout_s=args.startup_timeout)
            try:
                other.start()
            finally:
                os.environ.pop(BIND_ENV, None)
            started.append(other)

            def keep_busy() -> None:  # the other server's own clients, for the whole run
                with httpx.Client(timeout=900) as http:
                    while not stop_other.is_set():
                        try:
                            http.post(f"{other.base_url}/chat/completions", json={
                                "model": other.served_name, "messages": prompt,
                                "max_tokens": 64, "temperature": 0.0, "ignore_eos": True})
                        except httpx.HTTPError as err:  # keep the host busy; say so below
                            other_errors.append(type(err).__name__)
                            stop_other.wait(1.0)

            other_threads = [threading.Thread(target=keep_busy, daemon=True) for _ in range(4)]
            for t in other_threads:
                t.start()
        running = running_cpu_binds()
        new_bind = choose_cpu_bind(allowed, running, cpu_busy_fractions())
        candidates = {}
        configs = [("old_nobind", "nobind"), ("new_weft", new_bind)]
        if args.also_all_cores:
            configs.append(("all_cores", format_cpu_list(allowed)))
        for label, bind in configs:
            os.environ[BIND_ENV] = bind
            server = LocalModelServer(port=free_port(), served_name=f"bench-{label}",
                                      startup_timeout_s=args.startup_timeout)
            t0 = time.perf_counter()
            try:
                server.start()
            finally:
                os.environ.pop(BIND_ENV, None)
            started.append(server)
            candidates[label] = (server, round(time.perf_counter() - t0, 1))
            asyncio.run(load([server]))  # warm-up
        rounds: dict[str, list[dict]] = {label: [] for label in candidates}
        labels = list(candidates)
        for r in range(args.repeat):  # rotate the order round by round (AB BA ..., ABC BCA ...)
            shift = r % len(labels)
            for label in labels[shift:] + labels[:shift]:
                wall, tokens = asyncio.run(load([candidates[label][0]]))
                rounds[label].append({"wall_s": round(wall, 2), "tokens": tokens,
                                      "tok_per_s": round(tokens / wall, 2),
                                      "load_1m": round(os.getloadavg()[0], 2)})
    finally:
        stop_other.set()
        for server in reversed(started):
            server.stop()
    result: dict = {"other_binds": running, "allowed": format_cpu_list(allowed),
                    "requests": args.requests, "max_tokens": args.max_tokens,
                    "load_before": [round(x, 2) for x in load_before],
                    "load_after": [round(x, 2) for x in os.getloadavg()],
                    "other_request_errors": len(other_errors)}
    for label, (server, startup) in candidates.items():
        speeds = [x["tok_per_s"] for x in rounds[label]]
        result[label] = {"bind": server.cpu_bind, "startup_s": startup, "rounds": rounds[label],
                         "tok_per_s": round(sum(speeds) / len(speeds), 2)}
    result["ratio_new_over_old"] = round(result["new_weft"]["tok_per_s"]
                                         / result["old_nobind"]["tok_per_s"], 2)
    if "all_cores" in result:
        result["ratio_new_over_all_cores"] = round(result["new_weft"]["tok_per_s"]
                                                   / result["all_cores"]["tok_per_s"], 2)
    return result


def _time_one(args, load, label: str, bind: str, extra: tuple[str, ...]) -> dict:
    """Start one server under ``bind`` and ``extra`` arguments, warm it up, time the load."""
    from pipelines.serving import BIND_ENV, LocalModelServer, free_port

    os.environ[BIND_ENV] = bind
    server = LocalModelServer(port=free_port(), served_name=f"bench-{label}",
                              startup_timeout_s=args.startup_timeout, extra_args=extra)
    started = time.perf_counter()
    try:
        server.start()
    except Exception as err:  # noqa: BLE001 — a start-up that never finishes is the result itself
        return {"bind": bind, "args": extra, "startup_s": None, "error": str(err)[:200]}
    finally:
        os.environ.pop(BIND_ENV, None)
    startup = time.perf_counter() - started
    try:
        asyncio.run(load([server]))  # warm-up
        wall, tokens = asyncio.run(load([server]))
    finally:
        server.stop()
    return {"bind": bind, "args": extra, "startup_s": round(startup, 1), "wall_s": round(wall, 2),
            "tokens": tokens, "tok_per_s": round(tokens / wall, 1)}


if __name__ == "__main__":
    sys.exit(main())
