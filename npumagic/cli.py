"""``npumagic`` command line: the same analyses as the magics, offline, on output directories
collected elsewhere (e.g. a torch_npu job on a cluster); ``run`` and ``trigger`` to capture an
unmodified script or torchrun job (see :mod:`npumagic.capture.launch`); and the demo.

Exit status: 0 on success, 2 on bad input (one line on stderr naming the file); ``run`` exits
with its command's status."""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any, Sequence

from .errors import NpumagicError

# render.views.VIEWS, spelled out so parsing the command line does not import matplotlib
VIEWS = ("timeline", "steps", "kernels", "memory", "comm", "matrix")


def _load(args, path) -> Any:
    from . import analysis

    # a progress bar on a terminal, never in --json mode (stdout must stay machine-readable)
    return analysis.load(path, progress=not getattr(args, "json", False) and sys.stderr.isatty())


def _summary(args, path, rank=None):
    from . import parallel

    # many ranks: an outline of each rank with one rank in full, or every rank as a parallel task
    # (Dask); one rank in this process
    return parallel.analyze(path, rank=rank, scheduler=getattr(args, "scheduler", None),
                            progress=not getattr(args, "json", False) and sys.stderr.isatty(),
                            every_rank=getattr(args, "every_rank", False) or getattr(args, "all", False))


def _records(frame, limit: int | None = None) -> list[dict]:
    frame = frame.head(limit) if limit else frame
    return json.loads(frame.to_json(orient="records"))


def _print_json(payload: dict) -> None:
    print(json.dumps(payload, default=str, indent=2, allow_nan=False))


def _clean(value):
    """NaN/inf -> None, recursively, so the JSON is strict."""
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def _analyze(args) -> int:
    from .analysis.checklist import checklist
    from .render.tables import kernel_table, rank_caption, rank_table

    summary = _summary(args, args.path, args.rank)
    verdict = checklist(summary)
    if args.json:
        _print_json(_clean({"path": str(args.path), "meta": summary.meta, "headline": summary.headline,
                            "verdict": verdict.as_dict(), "steps": _records(summary.steps),
                            "kernels": _records(summary.kernels, args.top), "ranks": _records(summary.ranks),
                            "comm": _records(summary.comm), "memory": _records(summary.memory)}))
        return 0
    print(summary)
    print()
    print(kernel_table(summary.kernels, args.top).to_text())
    if len(summary.ranks) > 1:
        print()
        print(rank_table(summary.ranks, rank_caption(summary)).to_text())
    print()
    print(verdict)
    return 0


def _advise(args) -> int:
    from .analysis.advice import advise_run

    advice = advise_run(_summary(args, args.path, args.rank), str(args.path), every_rank=args.all, low=args.all)
    if args.json:
        _print_json(_clean({"path": str(args.path), "findings": [f.as_dict() for f in advice],
                            "low_findings_not_shown": advice.hidden_low, "steps_inferred": advice.steps_inferred,
                            **({"otherwise": advice.otherwise} if advice.otherwise else {})}))
    else:
        print(advice)
    return 0


def _compare(args) -> int:
    from .analysis.compare import compare

    a = _summary(args, args.path_a, args.rank_a)
    b = _summary(args, args.path_b, args.rank_b)
    name_a, name_b = Path(args.path_a).name, Path(args.path_b).name
    if name_a == name_b:  # e.g. two rank0_ascend_pt directories: say which is which
        name_a, name_b = (f"{Path(p).parent.name}/{Path(p).name}" for p in (args.path_a, args.path_b))
    cmp = compare(a, b, name_a, name_b)
    if args.json:
        _print_json(_clean({"a": str(args.path_a), "b": str(args.path_b), "speedup": cmp.speedup, "ci": list(cmp.ci),
                            "p_value": cmp.p_value, "significant": cmp.significant, "verdict": cmp.sentence(),
                            "decided_by": cmp.decided_by or None,
                            "explained_by": cmp.explained_by.column if cmp.explained_by else None, "changed": cmp.changed,
                            "breakdown": _records(cmp.breakdown), "kernels": _records(cmp.kernels, 50)}))
    else:
        print(cmp)
    return 0


def _show(args) -> int:
    from . import analysis
    from .render.views import build_view, view_range

    trace = _load(args, args.path)
    summary = analysis.summarize(trace, rank=args.rank)
    view = next((v for v in VIEWS if getattr(args, v)), "timeline")
    options = {}
    if view == "timeline":
        if args.step_range:
            options["steps"] = view_range(args.step_range, int, "--step-range")
        if args.zoom:
            options["window"] = view_range(args.zoom, float, "--zoom")
    fig = build_view(view, trace, summary, title=f"{Path(args.path).name}: {view}", **options)
    out = Path(args.output)
    out = out if out.suffix else out.with_name(out.name + ".png")  # what savefig writes; said as written
    fig.savefig(out, dpi=args.dpi)
    print(f"wrote {out}")
    return 0


def _runs(args) -> int:
    from .render.tables import runs_table

    out = _output_dir(args)
    store = _history(out)
    if store is None:
        print(f"no runs in {out}")
        return 0
    table = store.table()
    if args.json:
        print(table.to_json(orient="records", date_format="iso"))
    else:
        print(runs_table(table).to_text() if len(table) else f"no runs in {out}")
    return 0


def _export(args) -> int:
    from .render.export import render_markdown, write_log

    store = _history(_output_dir(args))
    runs = store.runs() if store is not None else []
    if args.md or args.csv:
        write_log(runs, md=args.md, csv=args.csv)
    else:
        print(render_markdown(runs))
    return 0


def _run(args) -> int:
    from .capture import CaptureOptions
    from .session import Session

    from .capture.launch import check_command

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    check_command(command)
    options = CaptureOptions(wait=args.wait, warmup=args.warmup, steps=args.steps, repeat=args.repeat,
                             skip_first=args.skip_first, activities=_items(args.activities), memory=args.memory,
                             shapes=args.shapes, stack=args.stack, modules=args.modules, level=args.level,
                             aic_metrics=args.aic_metrics, export=_items(args.export) or ("text",),
                             host=not args.no_host)
    session = Session(args.out or OUTPUT_DIR, backend=args.backend)
    if args.on_demand:
        from .on_demand import run_on_demand

        def started(job_dir) -> None:
            print(f"npumagic: on demand: `npumagic trigger {job_dir} --steps N` captures the job's next N steps",
                  file=sys.stderr, flush=True)

        _, ended = run_on_demand(session, command, options, name=args.name, shown=_print_run, started=started)
        return ended.exit_status
    outcome, ended = session.run_command(command, options, name=args.name)
    _print_run(outcome)
    return ended.exit_status


def _trigger(args) -> int:
    from .capture.launch import job_info, trigger

    steps = args.steps if args.steps is not None else int(job_info(args.run_dir).get("steps") or 3)
    ident = trigger(Path(args.run_dir), steps)
    print(f"npumagic: trigger {ident} sent: the job captures its next {steps} steps (after its --wait and --warmup) "
          f"into {Path(args.run_dir) / f'trigger-{ident}'}")
    return 0


def _print_run(outcome) -> None:
    """The run as the magics show it, in text: notes, step table, rank table, checklist."""
    from .render import RunReport
    from .render.tables import rank_caption, rank_table

    sys.stdout.flush()
    print(RunReport(outcome.run, outcome.summary, outcome.verdict, outcome.notes))
    if outcome.summary is not None and len(outcome.summary.ranks) > 1:
        print()
        print(rank_table(outcome.summary.ranks, rank_caption(outcome.summary)).to_text())
    sys.stdout.flush()


def _items(text: str | None) -> tuple[str, ...] | None:
    return tuple(x.strip().lower() for x in text.split(",") if x.strip()) if text else None


def _run_arguments(p: argparse.ArgumentParser) -> None:
    """``npumagic run``'s options: the schedule and recording options of %%npuprofile."""
    p.add_argument("--wait", type=int, default=1, help="steps to wait before warming up (default 1)")
    p.add_argument("--warmup", type=int, default=1, help="warm-up steps, traced and discarded (default 1)")
    p.add_argument("--steps", type=int, default=3, help="active steps recorded per cycle (default 3)")
    p.add_argument("--repeat", type=int, default=1, help="cycles of wait+warmup+steps (default 1)")
    p.add_argument("--skip-first", type=int, default=0, help="steps skipped before the first cycle (default 0)")
    p.add_argument("--name", default=None, help="run name (default run1, run2, ...; NAME-2, ... when taken)")
    p.add_argument("--out", default=None, metavar="OUTPUT_DIR",
                   help=f"output directory: the history and one folder per run (default ./{OUTPUT_DIR})")
    p.add_argument("--backend", choices=("npu", "cuda", "cpu"), default=None, help="force a backend (default the best)")
    p.add_argument("--activities", default=None, help="comma list of cpu, cuda, npu (default: what the backend has)")
    p.add_argument("--memory", action="store_true", help="record memory allocations (profile_memory)")
    p.add_argument("--shapes", action="store_true", help="record input shapes (record_shapes)")
    p.add_argument("--stack", action="store_true", help="record Python stacks (with_stack)")
    p.add_argument("--modules", action="store_true", help="record the nn.Module hierarchy (with_modules)")
    p.add_argument("--level", type=int, default=0, help="torch_npu profiler level 0, 1 or 2 (default 0)")
    p.add_argument("--aic-metrics", default=None, help="torch_npu AI Core metrics (e.g. PipeUtilization)")
    p.add_argument("--export", default=None, help="torch_npu: comma list of text, db (default text)")
    p.add_argument("--no-host", action="store_true", help="do not sample the host's CPU and memory")
    p.add_argument("--on-demand", action="store_true",
                   help="arm the capture idle: nothing is recorded until `npumagic trigger JOB_DIR` asks for the next "
                        "steps (each trigger a run in the history)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS...: the command to run, unmodified")


def _history(out: str):
    """The history of ``out``, opened read-only; None for an output directory without one."""
    from .history import DB_NAME, HistoryStore

    if Path(out).is_dir() and not (Path(out) / DB_NAME).exists():
        return None
    return HistoryStore(out, create=False)


def _demo(args) -> int:
    from .demo import run_demo

    return run_demo(args.out)


def _scheduler_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="where the ranks of a many-rank job are read and summarised in parallel: a dask.distributed "
                        "scheduler (tcp://HOST:8786, its workers must see the same paths), 'local' (a local Dask "
                        "cluster) or 'serial' (this process); default: a local cluster from "
                        "8 ranks on, this process below; naming one implies --every-rank")
    p.add_argument("--every-rank", action="store_true",
                   help="read and summarise every rank of a torch_npu job in full; by default, from 8 ranks on, each "
                        "rank's step_trace_time.csv and communication files are read (as msprof-analyze's cluster "
                        "analysis reads them) and only the described rank in full")


def dpi(text: str) -> int:
    value = int(text)
    if not 20 <= value <= 600:  # 100000 dpi asks matplotlib for terabytes
        raise argparse.ArgumentTypeError(f"{value} is not from 20 to 600")
    return value


PATH_HELP = "a torch.profiler or torch_npu output directory (one rank or several), or a trace file"


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of every subcommand."""
    parser = argparse.ArgumentParser(prog="npumagic", description="Profile analysis for PyTorch on Ascend NPU, CUDA and "
                                                                  "CPU: the %%npuprofile analyses, offline.")
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name: str, func, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text.replace("%%", "%"))  # help is %-formatted
        p.set_defaults(func=func)
        return p

    p = add("analyze", _analyze, "step table, top kernels and the checklist verdict of a profiler output")
    p.add_argument("path", help=PATH_HELP)
    p.add_argument("--rank", type=int, default=None, help="rank to describe (default the lowest)")
    p.add_argument("--top", type=int, default=10, help="kernels to list (default 10)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    _scheduler_argument(p)
    p = add("advise", _advise, "ranked findings with evidence and fixes")
    p.add_argument("path", help=PATH_HELP)
    p.add_argument("--rank", type=int, default=None, help="rank to advise on (default the lowest)")
    p.add_argument("--all", action="store_true", help="every rank of a multi-rank job, and low-severity findings")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    _scheduler_argument(p)
    p = add("compare", _compare, "compare two outputs: step time with a 95%% CI, breakdown and kernel deltas")
    p.add_argument("path_a", help="the reference")
    p.add_argument("path_b", help="the run to check")
    p.add_argument("--rank-a", type=int, default=None, help="rank of the reference to compare (default the lowest)")
    p.add_argument("--rank-b", type=int, default=None, help="rank of the run to check (default the lowest)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    _scheduler_argument(p)
    p = add("show", _show, "draw one view of an output to an image file (default the timeline)")
    p.add_argument("path", help=PATH_HELP)
    views = p.add_mutually_exclusive_group()
    for view in VIEWS:
        views.add_argument(f"--{view}", action="store_true", help=f"the {view} view")
    p.add_argument("-o", "--output", required=True, help="image file to write (.png, .svg, .pdf)")
    p.add_argument("--rank", type=int, default=None, help="rank to draw (default the lowest)")
    p.add_argument("--step-range", default=None, help="timeline: steps FIRST:LAST")
    p.add_argument("--zoom", default=None, help="timeline: START_MS:END_MS from the first step")
    p.add_argument("--dpi", type=dpi, default=110, help="image resolution, 20 to 600 (default 110)")
    p = add("runs", _runs, "list the run history of an output directory")
    _output_dir_arguments(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p = add("export", _export, "the troubleshooting log (verdicts, findings, notes) as Markdown or CSV")
    _output_dir_arguments(p)
    p.add_argument("--md", default=None, help="write Markdown here (default: print it)")
    p.add_argument("--csv", default=None, help="write CSV here")
    p = add("run", _run, "run a command unmodified (python train.py, torchrun ...) under the scheduled capture: "
                         "the trace of each rank, the step table, the checklist, and a run in the history; exits "
                         "with the command's own status")
    _run_arguments(p)
    p = add("trigger", _trigger, "make a job started with `npumagic run --on-demand` capture its next steps")
    p.add_argument("run_dir", metavar="JOB_DIR", help="the folder `npumagic run --on-demand` printed")
    p.add_argument("--steps", type=int, default=None, help="active steps to record (default the job's --steps)")
    p = add("demo", _demo, "profile a small CPU training loop through the magics in a real IPython shell")
    p.add_argument("--out", default=DEMO_DIR, help=f"output directory (default ./{DEMO_DIR})")
    return parser


OUTPUT_DIR = "npumagic_runs"  # where the magics write their runs by default (NpuMagics.output_dir)
DEMO_DIR = "npumagic_demo"


def _output_dir_arguments(p: argparse.ArgumentParser) -> None:
    """The output directory of the runs, as ``DIR`` or ``--out DIR`` (as the other commands take
    their path); :func:`_output_dir` reads it."""
    where = f"output directory the magics (or the demo) wrote the runs to (default ./{OUTPUT_DIR})"
    p.add_argument("dir", nargs="?", default=None, metavar="DIR", help=where)
    p.add_argument("--out", default=None, help="the same, as an option")


def _output_dir(args) -> str:
    if args.dir is not None and args.out is not None and Path(args.dir).resolve() != Path(args.out).resolve():
        raise NpumagicError(f"two output directories given, {args.dir} and --out {args.out}: give one")
    out = args.dir if args.dir is not None else args.out
    if out is None and not Path(OUTPUT_DIR).exists():
        from .history import DB_NAME

        hint = f"; the demo's is here: npumagic {args.command} {DEMO_DIR}" if Path(DEMO_DIR, DB_NAME).is_file() else ""
        raise NpumagicError(f"no ./{OUTPUT_DIR} here (the magics' default output directory): give the directory "
                            f"the runs were written to, npumagic {args.command} DIR{hint}")
    return out or OUTPUT_DIR


def _one_line_warning(message, category, filename, lineno, line=None) -> str:
    """Warnings as the CLI's other messages read (``npumagic: warning: ...``), not Python's
    ``file:line: UserWarning:`` form with a line of npumagic's source under it."""
    return f"npumagic: warning: {message}\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand; return the exit status (2 on bad input)."""
    args = build_parser().parse_args(argv)
    python_format, warnings.formatwarning = warnings.formatwarning, _one_line_warning  # printed ones only
    try:
        status = args.func(args)
        sys.stdout.flush()  # here, not at exit: a reader that has gone is met inside this try
        return status
    except BrokenPipeError:  # `npumagic analyze JOB | head`: the reader has all it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        return 1
    except (NpumagicError, ValueError, OSError) as exc:
        print(f"npumagic: error: {exc}", file=sys.stderr)
        return 2
    finally:
        warnings.formatwarning = python_format


if __name__ == "__main__":
    sys.exit(main())
