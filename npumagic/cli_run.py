"""``npumagic run`` and ``npumagic trigger``: capture an unmodified command (``python train.py``,
``torchrun ...``) under the scheduled profiler, each recorded window a run of the history, and
make an on-demand job capture its next steps. The CLI's shell (:mod:`npumagic.cli`) declares
them; the capture itself is :mod:`npumagic.capture.launch`'s and the session's."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .errors import NpumagicError
from .jsonout import dumps
from .names import OUTPUT_DIR
from .terminal import safe_text, terminal_width


def print_json(payload: dict) -> None:
    print(dumps(payload))


def run_command(args) -> int:
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
        outcome, ended = session.recorder.run_command(command, options, name=args.name, output=output)
        outcomes = [outcome]
        if shown is not None:
            shown(outcome)
    if args.log:
        track(outcomes, args.log)
    if args.json:
        from .jsonout import command_doc

        _unless_gone(print_json)(command_doc(command, outcomes, ended))
    return ended.exit_status


def track(results, tracker: str) -> None:
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
        session.runs.set_baseline(named)  # one that cannot be analysed is an error
        return
    done = [(r.name, (r.arguments or {}).get("command")) for r in session.runs.records() if r.status == "ok"]
    same = [name for name, line in done if line == list(command)]
    alike = [name for name, line in done if isinstance(line, list) and line and _entry(line) == _entry(command)]
    for found in (same, alike):
        if found:
            try:
                session.runs.set_baseline(found[-1])
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


def send_trigger(args) -> int:
    from .capture.launch import JOB_START_WAIT, job_info, trigger

    job = job_info(args.run_dir, wait=JOB_START_WAIT)  # started in the same breath (`... &`): its folder comes
    steps = args.steps if args.steps is not None else job["steps"]
    ident = trigger(Path(args.run_dir), steps)
    into = Path(args.run_dir) / f"trigger-{ident}"
    if args.json:
        from .jsonout import trigger_doc

        print_json(trigger_doc(args.run_dir, ident, steps, into))
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


def run_arguments(p: argparse.ArgumentParser) -> None:
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
    p.add_argument("--modules", action="store_true", help="record the nn.Module hierarchy (with_modules; on torch.profiler with_stack too), read by npumagic modules")
    p.add_argument("--level", type=int, default=0, help="torch_npu profiler level 0, 1 or 2 (default 0)")
    p.add_argument("--aic-metrics", default=None, help="torch_npu AI Core metrics (e.g. PipeUtilization)")
    p.add_argument("--export", default=None, help="torch_npu: comma list of text, db (default text)")
    p.add_argument("--no-host", action="store_true", help="do not sample the host's CPU and memory")
    p.add_argument("--on-demand", action="store_true",
                   help="arm the capture idle: nothing is recorded until `npumagic trigger JOB_DIR` asks for the next "
                        "steps (each trigger a run in the history)")
    p.add_argument("--baseline", default=None, metavar="RUN",
                   help="the run the checklist's Verify step compares with (default: the latest run of --out)")
    p.add_argument("--log", choices=("mlflow", "wandb"), default=None,
                   help="log each recorded run to this experiment tracker (its active run, else a new one; "
                        "MLFLOW_TRACKING_URI / WANDB_PROJECT say where); needs npumagic[mlflow] or npumagic[wandb]")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS...: the command to run, unmodified")
