"""``python -m cli.results``: list the result assets, or print an experiment's run config at
both scales (``--print-config NAME``) as YAML, ready for the Launchpad or ``weft job``."""

import argparse
import sys

import yaml

from assets.results import EXPERIMENTS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cli.results", description=__doc__)
    parser.add_argument("--print-config", metavar="NAME", default=None,
                        help="an experiment (result asset) name, or 'all'")
    args = parser.parse_args(argv)
    by_name = {e.name: e for e in EXPERIMENTS}
    if args.print_config is None:
        for e in EXPERIMENTS:
            print(f"{e.name:<24} job {e.name}_job: {e.description}")
        return 0
    names = list(by_name) if args.print_config == "all" else [args.print_config]
    unknown = [n for n in names if n not in by_name]
    if unknown:
        print(f"unknown experiment {unknown[0]!r}; the result assets are: "
              f"{', '.join(by_name)}", file=sys.stderr)
        return 2
    for name in names:
        e = by_name[name]
        print(f"# {name}: {e.description}")
        print(f"# run it: weft job {name}_job --config-json '{{\"scale\": \"cpu\"}}' "
              "(or pick the scale in the Launchpad)")
        for scale in e.scale_names:
            print(f"# --- scale: {scale}" + (f" (what limits it: {e.limits[scale]})"
                                             if e.limits.get(scale) else ""))
            print(yaml.safe_dump({scale: e.run_config(scale)}, sort_keys=False).rstrip())
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
