"""``npumagic`` command line: the same analyses offline, on output directories collected
elsewhere (a torch_npu job on a cluster), plus the demo. Exit status 0, or 2 on bad input."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

from .errors import NpumagicError


def _analyze(args) -> int:
    from . import analysis
    from .analysis.checklist import checklist

    trace = analysis.load(args.path, progress=not args.json and sys.stderr.isatty())
    summary = analysis.summarize(trace, rank=args.rank)
    verdict = checklist(summary)
    if args.json:
        payload = {"path": str(args.path), "meta": summary.meta, "headline": summary.headline,
                   "verdict": verdict.as_dict(), "steps": summary.steps.to_dict(orient="records"),
                   "kernels": summary.kernels.head(args.top).to_dict(orient="records"),
                   "ranks": summary.ranks.to_dict(orient="records")}
        print(json.dumps(payload, default=str, indent=2))
    else:
        print(summary)
        print()
        print(summary.kernels.head(args.top)[["name", "type", "count", "total_us", "mean_us", "share"]].to_string(index=False))
        if len(summary.ranks) > 1:
            print()
            print(summary.ranks.to_string(index=False))
        print()
        print(verdict)
    return 0


def _runs(args) -> int:
    from .history import HistoryStore

    table = HistoryStore(args.out).table()
    if args.json:
        print(table.to_json(orient="records", date_format="iso"))
    else:
        print(table.to_string(index=False) if len(table) else f"no runs in {args.out}")
    return 0


def _demo(args) -> int:
    from .demo import run_demo

    return run_demo(args.out)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="npumagic", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("analyze", help="step table, top kernels and checklist verdict of a profiler output")
    p.add_argument("path", help="a torch.profiler or torch_npu output directory, or a trace file")
    p.add_argument("--rank", type=int, default=None, help="rank to describe (default the lowest)")
    p.add_argument("--top", type=int, default=10, help="kernels to list (default 10)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_analyze)
    p = sub.add_parser("runs", help="list the run history of an output directory")
    p.add_argument("--out", default="npumagic_runs", help="output directory (default ./npumagic_runs)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_runs)
    p = sub.add_parser("demo", help="profile a small CPU training loop through the magics")
    p.add_argument("--out", default="npumagic_demo", help="output directory (default ./npumagic_demo)")
    p.set_defaults(func=_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (NpumagicError, ValueError) as exc:
        print(f"npumagic: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
