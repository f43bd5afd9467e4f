"""``npumagic`` command line: the same analyses as the magics, offline, on output directories
collected elsewhere (e.g. a torch_npu job on a cluster); ``run`` and ``trigger`` to capture an
unmodified script or torchrun job (see :mod:`npumagic.capture.launch`); and the demo.

Exit status: 0 on success, 2 on bad input (one line on stderr naming the file), 130 on Ctrl-C;
``compare --fail-if-slower`` and ``check`` exit 1 when they find a regression and 3 when they
cannot tell (a contended run, a single step a side, steps too few or too noisy to tell the change
from noise: ``"decided": false`` in the JSON, with why); ``check`` before its configuration has 2
earlier runs exits 0, undecided; ``run`` exits with its command's status (a signal as 128 + N)."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import warnings
from pathlib import Path
from typing import Any, Sequence

from .wording import SHELL
from .errors import NpumagicError
from .terminal import SafeStream, safe_text, terminal_width

# render.views.VIEWS, spelled out so parsing the command line does not import matplotlib
VIEWS = ("timeline", "steps", "kernels", "memory", "comm", "matrix")


def _load(args, path) -> Any:
    _exists(path)
    from . import analysis

    # a progress bar on a terminal, never in --json mode (stdout must stay machine-readable)
    return analysis.load(path, progress=not getattr(args, "json", False) and sys.stderr.isatty())


def _summary(args, path, rank=None):
    _exists(path)
    from . import parallel

    if getattr(args, "parse_raw", False):
        from .offline import parse_raw

        for rank_dir in parse_raw(path):
            print(f"npumagic: parsed {rank_dir} with torch_npu's offline analysis", file=sys.stderr)

    # many ranks: an outline of each rank with one rank in full, or every rank as a parallel task
    # (Dask); one rank in this process
    return parallel.analyze(path, rank=rank, scheduler=getattr(args, "scheduler", None),
                            progress=not getattr(args, "json", False) and sys.stderr.isatty(),
                            every_rank=getattr(args, "every_rank", False) or getattr(args, "all", False))


def _exists(path) -> None:
    """A missing path is refused before pandas is imported (the reader says the same, later)."""
    if not Path(path).exists():
        from .errors import TraceError

        raise TraceError(path, "no such file or directory")


def _print_json(payload: dict) -> None:
    print(json.dumps(payload, default=str, indent=2, allow_nan=False))


def _analyze(args) -> int:
    summary = _summary(args, args.path, args.rank)
    from .analysis.checklist import checklist
    from .render.tables import format_kernels, format_ranks, kernel_caption, rank_caption

    verdict = checklist(summary)
    if args.json:
        from .jsonout import analyze_doc

        _print_json(analyze_doc(summary, verdict, args.path, args.top))
        return 0
    from .render.text import summary_text, verdict_text

    width = terminal_width()
    print(summary_text(summary, width))
    print()
    print(format_kernels(summary.kernels, args.top, kernel_caption(summary)).to_text(width))
    if len(summary.ranks) > 1:
        print()
        print(format_ranks(summary.ranks, rank_caption(summary)).to_text(width))
    print()
    print(verdict_text(verdict, width))
    return 0


def _advise(args) -> int:
    summary = _summary(args, args.path, args.rank)
    from .analysis.advice import advise_run

    advice = advise_run(summary, str(args.path), every_rank=args.all, low=args.all)
    if args.json:
        from .jsonout import advice_doc

        _print_json(advice_doc(advice, args.path))
    else:
        from .render.text import advice_text

        print(advice_text(advice, terminal_width()))
    return 0


def _side(args, runs, ref: str, rank):
    """(Summary, name, record) of one side of ``compare``: a run of ``--history`` by name, else a path."""
    if runs is not None and runs.has(ref):
        return runs.summary(ref), ref, runs.context(ref)
    if runs is not None and not Path(ref).exists():
        known = ", ".join(r.name for r in runs.records()) or "none yet"
        raise NpumagicError(f"{ref}: neither a run of {args.history} (known: {known}) nor a path")
    return _summary(args, ref, rank), None, None


def _compare(args) -> int:
    if args.log:
        from .trackers import available

        available(args.log)
    runs = None
    if args.history is not None:
        runs = _named_runs(args.history)
    else:  # a missing side is said before the other is read, and before pandas is imported
        _exists(args.path_a)
        _exists(args.path_b)
    from .analysis.compare import compare
    from .named_runs import two_sides

    if runs is None:  # one output on both sides would read as "no difference", a measurement
        two_sides(str(Path(args.path_a).resolve()), str(Path(args.path_b).resolve()), "paths")

    if runs is not None:  # -1 the latest run, -2 the one before, as the magics take them
        args.path_a, args.path_b = (runs.resolve(r) if re.fullmatch(r"-\d+", r) else r
                                    for r in (args.path_a, args.path_b))
    a, run_a, context_a = _side(args, runs, args.path_a, args.rank_a)
    b, run_b, context_b = _side(args, runs, args.path_b, args.rank_b)
    name_a, name_b = run_a or Path(args.path_a).name, run_b or Path(args.path_b).name
    if run_a and run_b:
        two_sides(run_a, run_b)
    if name_a == name_b:  # e.g. two rank0_ascend_pt directories: say which is which
        name_a, name_b = (f"{Path(p).parent.name}/{Path(p).name}" for p in (args.path_a, args.path_b))
    if run_a and run_b:  # as %npucompare A B: with the history's run-to-run noise
        cmp = runs.compare(run_a, run_b)
    else:
        cmp = compare(a, b, name_a, name_b, context_a, context_b)
    failed = args.fail_if_slower is not None and _slower_beyond(cmp, args.fail_if_slower)
    # the gate cannot tell (exit 3) where the comparison cannot judge a slowdown beyond the allowance
    unsure = "" if args.fail_if_slower is None or failed else cmp.undecided(args.fail_if_slower / 100)
    operators = _by_operator(args, runs) if args.by_operator else None
    if args.json:
        from .jsonout import comparison_doc, records

        doc = comparison_doc(cmp, args.path_a, args.path_b)
        if args.fail_if_slower is not None:  # the gate's own question decides
            doc["decided"], doc["undecided"] = not unsure, unsure or None
        doc["gate"] = None if args.fail_if_slower is None else {"fail_if_slower_pct": args.fail_if_slower,
                                                                "failed": failed, "decided": not unsure,
                                                                "undecided": unsure or None}
        if operators is not None:
            doc["operators"] = records(operators)
        _print_json(doc)
    else:
        from .render.text import comparison_text

        print(comparison_text(cmp, width=terminal_width()))
        if operators is not None:
            from .render.text import operator_match_text

            print()
            print(operator_match_text(operators, name_a, name_b))
        if unsure:
            print(f"\ncannot tell: --fail-if-slower {args.fail_if_slower:g}%: whether {name_b} is slower than "
                  f"{name_a} by more than that: {unsure}")
        elif args.fail_if_slower is not None:
            print(f"\n{'FAIL' if failed else 'pass'}: --fail-if-slower {args.fail_if_slower:g}%: {name_b} is "
                  + (f"significantly slower than {name_a}, by {1 / cmp.speedup - 1:.1%}" if failed else
                     f"not significantly slower than {name_a} by more than that"))
    if args.log:
        _track([cmp], args.log)
    return 1 if failed else (CANNOT_TELL if unsure else 0)


CANNOT_TELL = 3  # the CI gate's exit status where the comparison cannot judge (not a pass, not a failure)


def _by_operator(args, runs):
    """Both sides' device time matched by framework operator (the traces are re-read)."""
    from .analysis.crossbackend import match_operators, operator_device_time

    def side(ref: str, rank):
        path = runs.run_dir(ref) if runs is not None and runs.has(ref) else ref
        if not path or not Path(path).exists():
            raise NpumagicError(f"{ref}: --by-operator needs its trace files, and {path} is gone")
        return operator_device_time(_load(args, path).events, rank)

    return match_operators(side(args.path_a, args.rank_a), side(args.path_b, args.rank_b))


def _slower_beyond(cmp, pct: float) -> bool:
    """The CI gate: B significantly slower than A (the comparison's own verdict, run-to-run noise
    included) and its median step longer by more than ``pct`` percent."""
    return bool(cmp.significant and cmp.speedup < 1 and 1 / cmp.speedup - 1 > pct / 100)


def percent(text: str) -> float:
    value = float(text)
    if not 0 <= value < 1000:
        raise argparse.ArgumentTypeError(f"{text} is not a percentage from 0 to 1000")
    return value


def _check(args) -> int:
    import numpy as np

    runs = _history(args.history) if Path(args.history).is_dir() else None
    if runs is None:
        raise NpumagicError(f"--history {args.history}: no history there (the output directory of the magics)")
    if runs.has(args.run):
        name, like = args.run, args.run
        walls = runs.step_walls(name)
        band = runs.band(like, include=False)
        summary = _stored_summary(runs, name)
    elif Path(args.run).exists():
        done = [r.name for r in runs.records() if r.status == "ok" and r.kind == "profile"]
        like = args.like or (done[-1] if done else None)
        summary = _summary(args, args.run)
        name, walls = str(args.run), summary.steps["wall_us"].to_numpy(float)
        band = runs.band(like, include=True) if like is not None else None
    else:
        known = ", ".join(r.name for r in runs.records()) or "none yet"
        raise NpumagicError(f"{args.run}: neither a run of {args.history} (known: {known}) nor a path")
    if not walls.size:
        raise NpumagicError(f"{name}: no steps to check")
    unsure = _check_undecided(band, like, args.history, walls, summary)
    if unsure:
        # no band yet is no failure (the nightly recipe works from its first night): 0; a band the
        # run cannot be judged against (contended, one step): the gate's "cannot tell"
        status = 0 if band is None else CANNOT_TELL
        if args.json:
            from .jsonout import document

            _print_json(document("check", run=name, like=like, decided=False, undecided=unsure, outside=None,
                                 median_us=float(np.median(walls))))
        else:
            print(f"{'no band yet' if band is None else 'cannot tell'}: {name}: {unsure}")
        return status
    alert = band.check(float(np.median(walls)))
    if args.json:
        from .jsonout import document

        _print_json(document("check", run=name, like=like, decided=True, undecided=None, **alert.to_dict()))
    else:
        print(f"{'ALERT' if alert.outside else 'ok'}: {name}: median step {alert.median_us / 1000:,.2f} ms, "
              f"{alert.sentence()} (runs of {like}'s configuration)")
    return 1 if alert.outside else 0


def _stored_summary(runs, name: str):
    """Run ``name``'s Summary, or None where it can no longer be read (its step times still can)."""
    try:
        return runs.summary(name)
    except NpumagicError:
        return None


def _check_undecided(band, like, history: str, walls, summary) -> str:
    """Why ``check`` cannot judge the run ("" when it can): no band yet, a contended run (as a
    comparison with it is never significant, :mod:`npumagic.analysis.trust`), a single step."""
    if band is None:
        of = f"{like}'s configuration" if like else "a finished run"
        return f"fewer than 2 earlier finished runs of {of} in {history}: no band to check against yet"
    if summary is not None:
        from .analysis.trust import reasons

        said = reasons(summary)
        if said:
            return f"its step times are unreliable: {'; '.join(said)}"
    if walls.size < 2:
        return "1 step: no spread to tell its median from noise; profile more steps"
    return ""


def _show(args) -> int:
    from .ranges import view_range

    view = next((v for v in VIEWS if getattr(args, v)), "timeline")
    options = {}
    if view == "timeline":
        if args.step_range:
            options["steps"] = view_range(args.step_range, int, "--step-range")
        if args.zoom:
            options["window"] = view_range(args.zoom, float, "--zoom")
    trace = _load(args, args.path)
    from . import analysis
    from .render.views import build_view

    summary = analysis.summarize(trace, rank=args.rank)
    fig = build_view(view, trace, summary, title=f"{Path(args.path).name}: {view}", **options)
    if args.output is None:
        from .named_runs import name_for

        args.output = f"{name_for(Path(args.path))}_{view}.png"
    if not args.output.strip():
        raise NpumagicError("-o/--output is empty: give the image file to write (e.g. -o timeline.png)")
    out = Path(args.output)
    out = out if out.suffix else out.with_name(out.name + ".png")  # what savefig writes; said as written
    from .render.views import figure_bytes
    from .safeio import write_atomic

    write_atomic(out, figure_bytes(fig, out.suffix[1:].lower(), dpi=args.dpi))  # a link planted there: replaced
    if args.json:
        from .jsonout import show_doc

        _print_json(show_doc(args.path, view, out, summary, options))
    else:
        print(f"wrote {out}")
    return 0


def _runs(args) -> int:
    out = _output_dir(args)
    from .render.tables import format_runs

    runs = _history(out)
    table = runs.table() if runs is not None else None
    if args.json:
        from .jsonout import runs_doc

        _print_json(runs_doc(table, out))
    elif table is None:
        print(f"no runs in {out}")
    else:
        print(format_runs(table).to_text() if len(table) else f"no runs in {out}")
    return 0


def _export(args) -> int:
    out = _output_dir(args)
    from .render.export import render_markdown, write_log

    history = _history(out)
    runs = history.records() if history is not None else []
    if args.md or args.csv:
        write_log(runs, md=args.md, csv=args.csv)
    files = [p for p in (args.md, args.csv) if p and p != "-"]  # "-" is standard output
    if args.json:
        from .jsonout import export_doc

        _print_json(export_doc(runs, out, files))
    elif not (args.md or args.csv):
        print(render_markdown(runs))
    elif files:  # as `show` says what it wrote (beside a log printed to stdout: on stderr)
        print(f"exported {len(runs)} run{'' if len(runs) == 1 else 's'} to {', '.join(files)}",
              file=sys.stderr if "-" in (args.md, args.csv) else sys.stdout)
    return 0


def _run(args) -> int:
    from .capture import CaptureOptions
    from .session import Session

    from .capture.launch import check_command

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    check_command(command)
    if args.log:
        from .trackers import available

        available(args.log)  # before the command runs, not after an hour of training
    options = CaptureOptions(wait=args.wait, warmup=args.warmup, steps=args.steps, repeat=args.repeat,
                             skip_first=args.skip_first, activities=_items(args.activities), memory=args.memory,
                             shapes=args.shapes, stack=args.stack, modules=args.modules, level=args.level,
                             aic_metrics=args.aic_metrics, export=_items(args.export) or ("text",),
                             host=not args.no_host)
    session = Session(args.out or OUTPUT_DIR, backend=args.backend)
    _reference(session, args.baseline, command)
    # with --json, stdout holds the one document: the command's own output goes to stderr
    output = sys.stderr if args.json else None
    shown = None if args.json else _unless_gone(_print_run)
    if args.on_demand:
        from .on_demand import run_on_demand

        def started(job_dir) -> None:
            print(f"npumagic: on demand: `npumagic trigger {job_dir} --steps N` captures the job's next N steps",
                  file=sys.stderr, flush=True)

        outcomes, ended = run_on_demand(session, command, options, name=args.name, output=output, shown=shown,
                                        started=started)
    else:
        outcome, ended = session.run_command(command, options, name=args.name, output=output)
        outcomes = [outcome]
        if shown is not None:
            shown(outcome)
    if args.log:
        _track(outcomes, args.log)
    if args.json:
        from .jsonout import command_doc

        _unless_gone(_print_json)(command_doc(command, outcomes, ended))
    return ended.exit_status


def _track(results, tracker: str) -> None:
    """Log each recorded run (or a comparison, on its later run) to the tracker; one that cannot
    be logged is said (the command's own exit status stands: the runs are in the history either way)."""
    from .trackers import log

    for result in results:
        what = result.run.name if hasattr(result, "run") else f"the comparison {result.a} -> {result.b}"
        try:
            run_id = log(result, tracker)
        except Exception as exc:  # noqa: BLE001 - any tracker error (a server down, a refused key)
            print(f"npumagic: warning: {what} not logged to {tracker}: {type(exc).__name__}: {safe_text(exc)}",
                  file=sys.stderr)
        else:
            print(f"npumagic: {what} logged to {tracker} run {run_id}", file=sys.stderr)


def _unless_gone(show):
    """``show`` that stops writing once stdout's reader has gone: `npumagic run ... | tee log`
    and a Ctrl-C stops tee with the command; npumagic still records the run and exits with the
    command's status (an on-demand job runs on), not with a broken pipe's 1."""
    def shown(*args) -> None:
        try:
            show(*args)
        except BrokenPipeError:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at the next flush
    return shown


def _reference(session, named: str | None, command: list[str]) -> None:
    """The run the checklist's Verify step compares with: ``--baseline``, else the latest run of
    the history that recorded steps with the same command line, else with the same program and
    script and other arguments (``--batch 16`` after ``--batch 8``: Verify says what changed).
    Each CLI run is a new process: no earlier run of its own; another script is no baseline
    unless named."""
    if named is not None:
        session.set_baseline(named)  # one that cannot be analysed is an error
        return
    done = [(r.name, (r.arguments or {}).get("command")) for r in session.runs.records() if r.status == "ok"]
    same = [name for name, line in done if line == list(command)]
    alike = [name for name, line in done if isinstance(line, list) and line and _entry(line) == _entry(command)]
    for found in (same, alike):
        if found:
            try:
                session.set_baseline(found[-1])
                return
            except NpumagicError:  # its summary is gone: verified against nothing, as a first run
                pass


def _entry(command: list[str]) -> tuple[str, ...]:
    """What a command runs, without the arguments it passes: the program, then its first
    argument that is no option (the script: ``python train.py``, ``torchrun --nproc-per-node 2
    train.py``) or the module of ``-m``."""
    program, rest = command[0], command[1:]
    for i, word in enumerate(rest):
        if word == "-m" and i + 1 < len(rest):
            return program, "-m", rest[i + 1]
        if not word.startswith("-"):
            return program, word
    return (program,)


def _trigger(args) -> int:
    from .capture.launch import JOB_START_WAIT, job_info, trigger

    job = job_info(args.run_dir, wait=JOB_START_WAIT)  # started in the same breath (`... &`): its folder comes
    steps = args.steps if args.steps is not None else job["steps"]
    ident = trigger(Path(args.run_dir), steps)
    into = Path(args.run_dir) / f"trigger-{ident}"
    if args.json:
        from .jsonout import trigger_doc

        _print_json(trigger_doc(args.run_dir, ident, steps, into))
        return 0
    print(f"npumagic: trigger {ident} sent: the job captures its next {steps} steps (after its --wait and --warmup) "
          f"into {into}")
    return 0


def _print_run(outcome) -> None:
    """The run as the magics show it, in text: notes, step table, rank table, checklist."""
    from .render import RunReport
    from .render.tables import format_ranks, rank_caption

    sys.stdout.flush()
    print(RunReport(outcome.run, outcome.summary, outcome.verdict, outcome.notes).text(terminal_width()))
    if outcome.summary is not None and len(outcome.summary.ranks) > 1:
        print()
        print(format_ranks(outcome.summary.ranks, rank_caption(outcome.summary)).to_text())
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
    p.add_argument("--json", action="store_true",
                   help="machine-readable output on stdout (the command's own output goes to stderr)")
    p.add_argument("--baseline", default=None, metavar="RUN",
                   help="the run the checklist's Verify step compares with (default: the latest run of --out)")
    p.add_argument("--log", choices=("mlflow", "wandb"), default=None,
                   help="log each recorded run to this experiment tracker (its active run, else a new one; "
                        "MLFLOW_TRACKING_URI / WANDB_PROJECT say where); needs npumagic[mlflow] or npumagic[wandb]")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS...: the command to run, unmodified")


def _history(out: str):
    """The runs of ``out``'s history, read only (:class:`~npumagic.named_runs.NamedRuns`, as the
    magics see them); None for an output directory without a history."""
    from .names import DB_NAME

    if Path(out).is_dir() and not (Path(out) / DB_NAME).exists():
        return None
    return _named_runs(out)


def _named_runs(out: str):
    from .named_runs import NamedRuns

    return NamedRuns(Path(out), create=False)


def _mcp(args) -> int:
    try:
        from .mcp_server import serve
    except ImportError as exc:
        if (exc.name or "").partition(".")[0] != "mcp":
            raise
        raise NpumagicError("npumagic mcp needs the MCP Python SDK (2.x): pip install 'npumagic[mcp]'") from None
    serve(args.out, args.root)
    return 0


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


def _parse_raw_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--parse-raw", action="store_true",
                   help="first parse the torch_npu ranks that hold only raw PROF_* data (the export failed or was "
                        "skipped) with torch_npu's offline analysis; needs torch_npu")


def dpi(text: str) -> int:
    value = int(text)
    if not 20 <= value <= 600:  # 100000 dpi asks matplotlib for terabytes
        raise argparse.ArgumentTypeError(f"{value} is not from 20 to 600")
    return value


PATH_HELP = "a torch.profiler or torch_npu output directory (one rank or several), or a trace file"


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of every subcommand."""
    parser = argparse.ArgumentParser(prog="npumagic", description="Profile analysis for PyTorch on Ascend NPU, CUDA and "
                                                                  "CPU: the notebook magics' analyses, offline.")
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
    _parse_raw_argument(p)
    p = add("advise", _advise, "ranked findings with evidence and fixes")
    p.add_argument("path", help=PATH_HELP)
    p.add_argument("--rank", type=int, default=None, help="rank to advise on (default the lowest)")
    p.add_argument("--all", action="store_true", help="every rank of a multi-rank job, and low-severity findings")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    _scheduler_argument(p)
    _parse_raw_argument(p)
    p = add("compare", _compare, "compare two outputs: step time with a 95%% CI, breakdown and kernel deltas")
    p.add_argument("path_a", help="the reference: an output path, or a run of --history (a name, or -2 for the "
                                  "run before the latest)")
    p.add_argument("path_b", help="the run to check: an output path, or a run of --history (a name, or -1 for the "
                                  "latest)")
    p.add_argument("--history", default=None, metavar="DIR",
                   help="an output directory of the magics: A and B may name its runs (replicates there measure "
                        "the run-to-run noise)")
    p.add_argument("--by-operator", action="store_true",
                   help="also match device time by framework operator (aten op), e.g. a CUDA run against a torch_npu run")
    p.add_argument("--fail-if-slower", type=percent, default=None, metavar="PCT",
                   help="CI gate: exit 1 when B is significantly slower than A by more than PCT percent, 3 when "
                        "the comparison cannot tell (a contended run, one step a side, steps too few or too noisy), "
                        "0 otherwise")
    p.add_argument("--rank-a", type=int, default=None, help="rank of the reference to compare (default the lowest)")
    p.add_argument("--rank-b", type=int, default=None, help="rank of the run to check (default the lowest)")
    p.add_argument("--log", choices=("mlflow", "wandb"), default=None,
                   help="log the result on the later run's tracker run (found by its npumagic.run tag, else the "
                        "active or a new one); needs npumagic[mlflow] or npumagic[wandb]")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    _scheduler_argument(p)
    p = add("check", _check, "check a run against the band learned from the earlier runs of its configuration "
                              "(exit 1 outside it, 0 inside or before 2 earlier runs give a band, 3 when the run "
                              "cannot be judged: contended, or a single step)")
    p.add_argument("run", metavar="RUN_OR_DIR", help="a run name of --history, or a profiler output path")
    p.add_argument("--history", default=OUTPUT_DIR, metavar="DIR",
                   help=f"the magics' output directory holding the earlier runs (default ./{OUTPUT_DIR})")
    p.add_argument("--like", default=None, metavar="RUN",
                   help="for a path: the run whose configuration's runs give the band (default the latest finished)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p = add("show", _show, "draw one view of an output to an image file (default the timeline)")
    p.add_argument("path", help=PATH_HELP)
    views = p.add_mutually_exclusive_group()
    for view in VIEWS:
        views.add_argument(f"--{view}", action="store_true", help=f"the {view} view")
    p.add_argument("-o", "--output", default=None,
                   help="image file to write (.png, .svg, .pdf; default NAME_VIEW.png here, NAME the trace's)")
    p.add_argument("--rank", type=int, default=None, help="rank to draw (default the lowest)")
    p.add_argument("--step-range", default=None, help="timeline: steps FIRST:LAST")
    p.add_argument("--zoom", default=None, help="timeline: START_MS:END_MS from the first step")
    p.add_argument("--dpi", type=dpi, default=110, help="image resolution, 20 to 600 (default 110)")
    p.add_argument("--json", action="store_true", help="machine-readable output: the file written and the view's data")
    p = add("runs", _runs, "list the run history of an output directory")
    _output_dir_arguments(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p = add("export", _export, "the troubleshooting log (verdicts, findings, notes) as Markdown or CSV")
    _output_dir_arguments(p)
    p.add_argument("--md", default=None, help="write Markdown here (- or no --md at all: print it)")
    p.add_argument("--csv", default=None, help="write CSV here (-: print it)")
    p.add_argument("--json", action="store_true", help="machine-readable output: the log, and the files written")
    p = add("mcp", _mcp, "serve these analyses to coding assistants: a Model Context Protocol server over stdio")
    p.add_argument("--out", default=OUTPUT_DIR, help=f"output directory whose runs the tools may name (default "
                                                     f"./{OUTPUT_DIR}); the server writes nowhere else")
    p.add_argument("--root", action="append", default=None, metavar="DIR",
                   help="a folder below which the tools may read profiler outputs (repeatable; default the "
                        "working directory and --out). The roots an MCP client declares are added, and take the "
                        "working directory's place as a default")
    p = add("run", _run, "run a command unmodified (python train.py, torchrun ...) under the scheduled capture: "
                         "the trace of each rank, the step table, the checklist, and a run in the history; exits "
                         "with the command's own status")
    _run_arguments(p)
    p = add("trigger", _trigger, "make a job started with `npumagic run --on-demand` capture its next steps")
    p.add_argument("run_dir", metavar="JOB_DIR", help="the folder `npumagic run --on-demand` printed")
    p.add_argument("--steps", type=int, default=None, help="active steps to record (default the job's --steps)")
    p.add_argument("--json", action="store_true", help="machine-readable output: the trigger sent")
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
        from .names import DB_NAME

        hint = f"; the demo's is here: npumagic {args.command} {DEMO_DIR}" if Path(DEMO_DIR, DB_NAME).is_file() else ""
        raise NpumagicError(f"no ./{OUTPUT_DIR} here (the magics' default output directory): give the directory "
                            f"the runs were written to, npumagic {args.command} DIR{hint}")
    return out or OUTPUT_DIR


def _one_line_warning(message, category, filename, lineno, line=None) -> str:
    """Warnings as the CLI's other messages read (``npumagic: warning: ...``), not Python's
    ``file:line: UserWarning:`` form with a line of npumagic's source under it."""
    return f"npumagic: warning: {safe_text(message)}\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand; return the exit status (2 on bad input)."""
    args = build_parser().parse_args(argv)
    python_format, warnings.formatwarning = warnings.formatwarning, _one_line_warning  # printed ones only
    # no escape sequence from a trace reaches the terminal; stderr's messages are made safe where
    # they are written (the progress bar there needs its carriage returns)
    stdout, sys.stdout = sys.stdout, SafeStream(sys.stdout)
    shell = SHELL.set("cli")  # the core's messages name commands, not magics
    try:
        status = args.func(args)
        sys.stdout.flush()  # here, not at exit: a reader that has gone is met inside this try
        return status
    except BrokenPipeError:  # `npumagic analyze JOB | head`: the reader has all it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        return 1
    except (NpumagicError, ValueError, OSError) as exc:
        print(f"npumagic: error: {safe_text(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: one line, the shell's status for SIGINT, no traceback
        print("npumagic: interrupted", file=sys.stderr)
        return 130
    finally:
        SHELL.reset(shell)
        warnings.formatwarning = python_format
        sys.stdout = stdout


if __name__ == "__main__":
    sys.exit(main())
