"""`interplab zoo list | info NAME | train NAME [--steps N] [--out DIR]`.

The top-level CLI (interplab/cli.py) calls `add_parser(subparsers)`; `python -m interplab.zoo.cli ...` also works.
"""
from __future__ import annotations

import argparse
import json
import sys


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register the `zoo` command on an argparse subparsers object."""
    p = subparsers.add_parser("zoo", help="list, inspect and build model organisms",
                              description="Model organisms: shipped weights or built locally with `train`.")
    sub = p.add_subparsers(dest="zoo_cmd", required=True)
    sub.add_parser("list", help="list organisms and whether they are available")
    pi = sub.add_parser("info", help="recipe, model card and location of one organism")
    pi.add_argument("name")
    pi.add_argument("--json", action="store_true", help="print JSON")
    pt = sub.add_parser("train", help="build an organism from its recipe (into the user zoo by default)")
    pt.add_argument("name")
    pt.add_argument("--steps", type=int, default=None, help="override the recipe's steps (e.g. 30 for a smoke run)")
    pt.add_argument("--out", default=None, help="output directory (default: $INTERPLAB_HOME/zoo/NAME)")
    pt.add_argument("--force", action="store_true", help="replace an existing checkpoint at the output directory")
    pt.add_argument("--resume", action="store_true", help="continue an interrupted build")
    pt.add_argument("--time-budget", type=float, default=None,
                    help="finish the schedule within this many seconds (steps becomes a cap)")
    pt.add_argument("--threads", type=int, default=None, help="torch threads")
    pt.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    from interplab.core.errors import InterplabError
    from interplab.zoo.cards import read_card
    from interplab.zoo.registry import get_recipe, list_organisms

    try:
        if args.zoo_cmd == "list":
            rows = list_organisms()
            w = max(len(r.name) for r in rows) if rows else 4
            print(f"{'name':<{w}}  {'available':<9}  {'parent':<10}  description")
            for r in rows:
                print(f"{r.name:<{w}}  {'yes' if r.available else 'no':<9}  {r.parent or '-':<10}  {r.description}")
            return 0
        if args.zoo_cmd == "info":
            r = get_recipe(args.name)
            info = r.summary()
            card = read_card(r.path) if r.path else {}
            if card:
                info["card"] = {k: card.get(k) for k in ("n_params", "size_bytes", "metrics", "built_at")}
                info["card"]["train_seconds"] = card.get("train", {}).get("train_seconds")
                info["card"]["steps_done"] = card.get("train", {}).get("steps_done")
            if args.json:
                print(json.dumps(info, indent=2, default=str))
            else:
                for k, v in info.items():
                    print(f"{k}: {v}")
                if not r.available:
                    print(f"\nnot built: run `interplab zoo train {r.name}`")
            return 0
        if args.zoo_cmd == "train":
            from interplab.zoo.build import train_organism

            path = train_organism(args.name, steps=args.steps, out=args.out, force=args.force, resume=args.resume,
                                  progress=not args.no_progress, num_threads=args.threads,
                                  time_budget_s=args.time_budget)
            card = read_card(path)
            print(f"built {args.name} at {path}")
            for k, v in sorted(card.get("metrics", {}).items()):
                print(f"  {k}: {v:.4f}")
            return 0
    except InterplabError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 1


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] != "zoo":
        argv = ["zoo", *argv]
    parser = argparse.ArgumentParser(prog="interplab")
    add_parser(parser.add_subparsers(dest="cmd", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
