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
import dataclasses
import os
import sys
import warnings
from pathlib import Path
from typing import Any, NoReturn, Sequence

from .analysis import read_ahead
from .cli_ab import ab_arguments, ab_command
from .cli_check import CANNOT_TELL, check_command
from .cli_run import print_json, run_arguments, run_command, send_trigger, track
from .commands import COMMANDS, ERRORS, Places, find
from .commands.base import TARGET
from .errors import NpumagicError
from .names import DEMO_DIR, OUTPUT_DIR
from .process_end import exit_now
from .terminal import SafeStream, safe_text, terminal_width
from .wording import SHELL

# render.views.VIEWS, spelled out so parsing the command line does not import matplotlib
VIEWS = ("timeline", "steps", "kernels", "memory", "comm", "matrix", "regions", "modules")


def _load(args, path) -> Any:
    _exists(path)
    read_ahead.start(path)  # a small trace decoded by a worker while pandas is imported here
    from . import analysis

    # a progress bar on a terminal, never in --json mode (stdout must stay machine-readable)
    return analysis.load(path, progress=not getattr(args, "json", False) and sys.stderr.isatty())


def _summary(args, path, rank=None):
    _exists(path)
    read_ahead.start(path)
    from .analysis import job

    if getattr(args, "parse_raw", False):
        from .raw_parse import parse_raw

        for rank_dir in parse_raw(path):
            print(f"npumagic: parsed {rank_dir} with torch_npu's offline analysis", file=sys.stderr)

    # many ranks: an outline of each rank with one rank in full, or every rank as a parallel task
    # (Dask); one rank in this process
    return job.analyze(path, rank=rank, scheduler=getattr(args, "scheduler", None),
                       progress=not getattr(args, "json", False) and sys.stderr.isatty(),
                       every_rank=getattr(args, "read_every_rank", False) or getattr(args, "every_rank", False))


def _exists(path) -> None:
    """A missing path is refused before pandas is imported (the reader says the same, later)."""
    if not Path(path).exists():
        from .errors import TraceError

        raise TraceError(path, "no such file or directory")


class CliPlaces(Places):
    """The CLI's places: a path is read with a progress bar on a terminal, ``--scheduler`` and
    ``--parse-raw``; the runs are those of ``--history`` (read only), and a word that is neither
    one of them nor a path is told so."""

    def __init__(self, args, runs=None, out=None) -> None:
        super().__init__(runs, out)
        self.args = args

    def read(self, path, rank):
        return _summary(self.args, path, rank)

    def unknown(self, ref: str) -> Exception | None:
        if self.runs is None:
            return None
        known = ", ".join(r.name for r in self.runs.records()) or "none yet"
        return NpumagicError(f"{ref}: neither a run of {self.args.history} (known: {known}) nor a path")


def _places(args) -> CliPlaces:
    if hasattr(args, "dir"):  # runs, export: an output directory's history
        out = _output_dir(args)
        return CliPlaces(args, _history(out), out)
    if getattr(args, "history", None) is not None:
        return CliPlaces(args, _named_runs(args.history), args.history)
    return CliPlaces(args)


def _answer(args, result) -> None:
    if args.json:
        print_json(result.to_dict())
    else:
        print(result.text(terminal_width()))


def _run_command(args):
    """The result of the command ``args.command`` of :data:`~npumagic.commands.COMMANDS`."""
    command = find(args.command)
    return command.run(_places(args), **{arg.name: getattr(args, arg.name) for arg in command.args})


def _command(args) -> int:
    _answer(args, _run_command(args))
    return 0


def _compare(args) -> int:
    if args.log:
        from .trackers import available

        available(args.log)
    result = _run_command(args)
    cmp = result.comparison
    failed = args.fail_if_slower is not None and _slower_beyond(cmp, args.fail_if_slower)
    # the gate cannot tell (exit 3) where the comparison cannot judge a slowdown beyond the allowance
    unsure = "" if args.fail_if_slower is None or failed else cmp.undecided(args.fail_if_slower / 100)
    operators = _by_operator(args, result) if args.by_operator else None
    if args.json:
        print_json(_gate_doc(args, result, failed, unsure, operators))
    else:
        print(result.text(terminal_width()))
        if operators is not None:
            from .render.text import operator_match_text

            print()
            print(operator_match_text(operators, cmp.a, cmp.b))
        _say_gate(args, cmp, failed, unsure)
    if args.log:
        track([cmp], args.log)
    return 1 if failed else (CANNOT_TELL if unsure else 0)


def _gate_doc(args, result, failed: bool, unsure: str, operators) -> dict:
    doc = result.to_dict()
    if args.fail_if_slower is not None:  # the gate's own question decides
        doc["decided"], doc["undecided"] = not unsure, unsure or None
    doc["gate"] = None if args.fail_if_slower is None else {"fail_if_slower_pct": args.fail_if_slower,
                                                            "failed": failed, "decided": not unsure,
                                                            "undecided": unsure or None}
    if operators is not None:
        from .jsonout import records

        doc["operators"] = records(operators)
    return doc


def _say_gate(args, cmp, failed: bool, unsure: str) -> None:
    if unsure:
        print(f"\ncannot tell: --fail-if-slower {args.fail_if_slower:g}%: whether {cmp.b} is slower than "
              f"{cmp.a} by more than that: {unsure}")
    elif args.fail_if_slower is not None:
        print(f"\n{'FAIL' if failed else 'pass'}: --fail-if-slower {args.fail_if_slower:g}%: {cmp.b} is "
              + (f"significantly slower than {cmp.a}, by {1 / cmp.speedup - 1:.1%}" if failed else
                 f"not significantly slower than {cmp.a} by more than that"))




def _by_operator(args, result):
    """Both sides' device time matched by framework operator (the traces are re-read)."""
    from .analysis.crossbackend import match_operators, operator_device_time

    runs = _named_runs(args.history) if args.history is not None else None

    def side(ref: str, rank):
        path = runs.run_dir(ref) if runs is not None and runs.has(ref) else ref
        if not path or not Path(path).exists():
            raise NpumagicError(f"{ref}: --by-operator needs its trace files, and {path} is gone")
        return operator_device_time(_load(args, path).events, rank)

    return match_operators(side(result.label_a, args.rank_a), side(result.label_b, args.rank_b))


def _slower_beyond(cmp, pct: float) -> bool:
    """The CI gate: B significantly slower than A (the comparison's own verdict, run-to-run noise
    included) and its median step longer by more than ``pct`` percent."""
    return bool(cmp.significant and cmp.speedup < 1 and 1 / cmp.speedup - 1 > pct / 100)


def percent(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 1000:
        raise argparse.ArgumentTypeError(f"{text} is not a percentage from 0 to 1000")
    return value


def _show(args) -> int:
    from .ranges import view_range

    view = next((v for v in VIEWS if getattr(args, v)), "timeline")
    options = {}
    if view == "timeline":
        if args.step_range:
            options["steps"] = view_range(args.step_range, int, "--step-range")
        if args.zoom:
            options["window"] = view_range(args.zoom, float, "--zoom")
    out = _image_path(args, view)  # before the trace is read: a folder that is not there is said at once
    trace = _load(args, args.path)
    from . import analysis
    from .render.views import build_view

    summary = analysis.summarize(trace, rank=args.rank)
    title, placed, note = f"{Path(args.path).name}: {view}", None, ""
    memory = _memory_read(args.path, trace, summary) if view == "memory" else None
    if view in ("regions", "modules"):  # the icicle, and the table it draws
        from .render.icicle import place_view

        fig, placed, note = place_view(view, trace, summary, title)
    else:
        fig = build_view(view, trace, summary, title=title, memory=memory, **options)
    from .render.views import figure_bytes
    from .safeio import write_atomic

    write_atomic(out, figure_bytes(fig, out.suffix[1:].lower(), dpi=args.dpi))  # a link planted there: replaced
    if args.json:
        from .jsonout import show_doc

        print_json(show_doc(args.path, view, out, summary, options, placed, note))
    else:
        from .render.views import allocators_table

        table = allocators_table(memory) if memory is not None else None
        print(f"wrote {out}" + (f"\n{note}" if note else "")
              + (f"\n{table.to_text(terminal_width())}" if table is not None else ""))
    return 0


def _image_path(args, view: str) -> Path:
    """The image ``show`` writes: -o, else PATH's name and the view's in this folder (or in the
    folder -o names); with .png where it names no format (what savefig writes, said as written);
    its folder must exist."""
    from .named_runs import name_for

    given = args.output
    if given is not None and not given.strip():
        raise NpumagicError("-o/--output is empty: give the image file to write (e.g. -o timeline.png)")
    default = f"{name_for(Path(args.path))}_{view}.png"
    out = Path(given).expanduser() if given is not None else Path(default)
    out = out / default if out.is_dir() else out if out.suffix else out.with_name(out.name + ".png")
    if not out.parent.is_dir():
        raise NpumagicError(f"{given}: no folder {out.parent} to write it in")
    return out


def _memory_read(path: str, trace, summary):
    """The memory records of the rank drawn, for the memory figure's components and allocators
    (None where nothing was recorded: the figure says so)."""
    from .analysis.memory_view import memory_view
    from .analysis.sources.memory import read_memory
    from .render.charts import MemoryRead

    ranks, rank = sorted(trace.ranks), summary.meta.get("rank")
    records = read_memory(path, ranks.index(rank) if rank in ranks else None)
    view = memory_view(records)
    return MemoryRead(records, view) if view.recorded else None


def _export(args) -> int:
    log = _run_command(args)
    if args.md or args.csv:
        from .render.export import write_log

        write_log(log.runs, md=args.md, csv=args.csv)
    files = [p for p in (args.md, args.csv) if p and p != "-"]  # "-" is standard output
    if args.json:
        print_json(dataclasses.replace(log, written=tuple(files)).to_dict())
    elif not (args.md or args.csv):
        print(log.text())
    elif files:  # as `show` says what it wrote (beside a log printed to stdout: on stderr)
        print(f"exported {len(log.runs)} run{'' if len(log.runs) == 1 else 's'} to {', '.join(files)}",
              file=sys.stderr if "-" in (args.md, args.csv) else sys.stdout)
    return 0


def _check(args) -> int:
    return check_command(args, _history, _summary)


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


def _reading_arguments(p: argparse.ArgumentParser, parse_raw: bool = True) -> None:
    """How the CLI reads a profiler output: where its ranks are summarised, and (``parse_raw``)
    whether raw torch_npu data is parsed first."""
    p.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="where the ranks of a many-rank job are read and summarised in parallel: a dask.distributed "
                        "scheduler (tcp://HOST:8786, its workers must see the same paths), 'local' (a local Dask "
                        "cluster) or 'serial' (this process); default: a local cluster from "
                        "8 ranks on, this process below; naming one implies --every-rank")
    p.add_argument("--every-rank", dest="read_every_rank", action="store_true",
                   help="read and summarise every rank of a torch_npu job in full; by default, from 8 ranks on, each "
                        "rank's step_trace_time.csv and communication files are read (as msprof-analyze's cluster "
                        "analysis reads them) and only the described rank in full")
    if parse_raw:
        p.add_argument("--parse-raw", action="store_true",
                       help="first parse the torch_npu ranks that hold only raw PROF_* data (the export failed or was "
                            "skipped) with torch_npu's offline analysis; needs torch_npu")


def dpi(text: str) -> int:
    value = int(text)
    if not 20 <= value <= 600:  # 100000 dpi asks matplotlib for terabytes
        raise argparse.ArgumentTypeError(f"{value} is not from 20 to 600")
    return value


def _compare_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--history", default=None, metavar="DIR",
                   help="an output directory of the magics: A and B may name its runs (replicates there measure "
                        "the run-to-run noise)")
    p.add_argument("--by-operator", action="store_true",
                   help="also match device time by framework operator (aten op), e.g. a CUDA run against a torch_npu run")
    p.add_argument("--fail-if-slower", type=percent, default=None, metavar="PCT",
                   help="CI gate: exit 1 when B is significantly slower than A by more than PCT percent, 3 when "
                        "the comparison cannot tell (a contended run, one step a side, steps too few or too noisy), "
                        "0 otherwise")
    p.add_argument("--log", choices=("mlflow", "wandb"), default=None,
                   help="log the result on the later run's tracker run (found by its npumagic.run tag, else the "
                        "active or a new one); needs npumagic[mlflow] or npumagic[wandb]")
    _reading_arguments(p, parse_raw=False)


def _memory_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--history", default=None, metavar="DIR",
                   help="an output directory of the magics: PATH may name its runs (read from their output folders)")


def _output_dir_arguments(p: argparse.ArgumentParser) -> None:
    """The output directory of the runs, as ``DIR`` or ``--out DIR`` (as the other commands take
    their path); :func:`_output_dir` reads it."""
    where = f"output directory the magics (or the demo) wrote the runs to (default ./{OUTPUT_DIR})"
    p.add_argument("dir", nargs="?", default=None, metavar="DIR", help=where)
    p.add_argument("--out", default=None, help="the same, as an option")


def _trace_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--history", default=None, metavar="DIR",
                   help="an output directory of the magics: the path may name one of its runs")
    _reading_arguments(p)


def _export_arguments(p: argparse.ArgumentParser) -> None:
    _output_dir_arguments(p)
    p.add_argument("--md", default=None, help="write Markdown here (- or no --md at all: print it)")
    p.add_argument("--csv", default=None, help="write CSV here (-: print it)")


# each command of COMMANDS is a subcommand: its own arguments, these options of the CLI's, and a
# handler that presents more than the result (default: its text, or --json)
def _history_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--history", default=None, metavar="DIR",
                   help="an output directory of the magics: PATH may name one of its runs (its profiler output is read "
                        "again)")


CLI_OPTIONS = {"analyze": _reading_arguments, "advise": _reading_arguments, "steps": _reading_arguments,
               "compare": _compare_arguments, "runs": _output_dir_arguments, "export": _export_arguments,
               "rules": _output_dir_arguments, "regions": _history_argument, "modules": _history_argument,
               "memory": _memory_arguments, "memcompare": _memory_arguments, "memfit": _memory_arguments,
               "trace": _trace_arguments}
CLI_HANDLERS = {"compare": _compare, "export": _export}
JSON_DETAIL = {"export": ": the log, and the files written"}  # said after "machine-readable output"


def _show_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", help=TARGET.help)
    views = p.add_mutually_exclusive_group()
    for view in VIEWS:
        views.add_argument(f"--{view}", action="store_true", help=f"the {view} view")
    p.add_argument("-o", "--output", default=None,
                   help="image file to write (.png, .svg, .pdf; default NAME_VIEW.png here or in the folder given, NAME "
                        "the trace's)")
    p.add_argument("--rank", type=int, default=None, help="rank to draw (default the lowest)")
    p.add_argument("--step-range", default=None, help="timeline: steps FIRST:LAST")
    p.add_argument("--zoom", default=None, help="timeline: START_MS:END_MS from the first step")
    p.add_argument("--dpi", type=dpi, default=110, help="image resolution, 20 to 600 (default 110)")


def _check_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", metavar="RUN_OR_DIR", help="a run name of --history, or a profiler output path")
    p.add_argument("--history", default=OUTPUT_DIR, metavar="DIR",
                   help=f"the magics' output directory holding the earlier runs (default ./{OUTPUT_DIR})")
    p.add_argument("--like", default=None, metavar="RUN",
                   help="for a path: the run whose configuration's runs give the band (default the latest finished)")


def _mcp_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default=OUTPUT_DIR, help=f"output directory whose runs the tools may name (default "
                                                     f"./{OUTPUT_DIR}); the server writes nowhere else")
    p.add_argument("--root", action="append", default=None, metavar="DIR",
                   help="a folder below which the tools may read profiler outputs (repeatable; default the "
                        "working directory and --out). The roots an MCP client declares are added, and take the "
                        "working directory's place as a default")


def _trigger_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", metavar="JOB_DIR", help="the folder `npumagic run --on-demand` printed")
    p.add_argument("--steps", type=int, default=None, help="active steps to record (default the job's --steps)")


def _subcommands() -> list[tuple]:
    """(name, handler, help, declare its arguments, what --json adds or None for no --json) of
    every subcommand: those of :data:`~npumagic.commands.COMMANDS`, then the CLI's own."""
    return [(command.name, CLI_HANDLERS.get(command.name, _command), command.help, _arguments_of(command),
             JSON_DETAIL.get(command.name, "")) for command in COMMANDS] + [
        ("check", _check, "check a run against the band learned from the earlier runs of its configuration (exit 1 "
                          "outside it, 0 inside or before 2 earlier runs give a band, 3 when the run cannot be judged: "
                          "contended, or a single step)", _check_arguments, ""),
        ("show", _show, "draw one view of an output to an image file (default the timeline)", _show_arguments,
         ": the file written and the view's data"),
        ("mcp", _mcp, "serve these analyses to coding assistants: a Model Context Protocol server over stdio",
         _mcp_arguments, None),
        ("run", run_command, "run a command unmodified (python train.py, torchrun ...) under the scheduled capture: "
                             "the trace of each rank, the step table, the checklist, and a run in the history; exits "
                             "with the command's own status", run_arguments,
         " on stdout (the command's own output goes to stderr)"),
        ("ab", ab_command, "decide whether script B steps faster than script A on a shared machine: short captures "
                           "of each alternated (A B B A ...), decided on their paired median steps", ab_arguments,
         ": the decision and the figures"),
        ("trigger", send_trigger, "make a job started with `npumagic run --on-demand` capture its next steps",
         _trigger_arguments, ": the trigger sent"),
        ("demo", _demo, "profile a small CPU training loop through the magics in a real IPython shell",
         lambda p: p.add_argument("--out", default=DEMO_DIR, help=f"output directory (default ./{DEMO_DIR})"), None),
    ]


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The argparse parser of every subcommand (:func:`_subcommands`); with ``only``, of that
    subcommand alone: what parsing its command line needs (declaring the others cost 5-12 ms of
    every command's start), its usage and errors worded as the whole parser words them."""
    subcommands = _subcommands()
    parser = argparse.ArgumentParser(prog="npumagic", description="Profile analysis for PyTorch on Ascend NPU, CUDA and "
                                                                  "CPU: the notebook magics' analyses, offline.")
    # with only one declared, the usage line still names them all, as argparse spells its choices
    sub = parser.add_subparsers(dest="command", required=True, metavar=None if only is None else
                                "{" + ",".join(name for name, *_ in subcommands) + "}")
    for name, func, help_text, options, json in subcommands:
        if only is not None and name != only:
            continue
        p = sub.add_parser(name, help=help_text, description=help_text.replace("%%", "%"))  # help is %-formatted
        p.set_defaults(func=func)
        options(p)
        if json is not None:  # the one declaration of --json
            p.add_argument("--json", action="store_true", help=f"machine-readable output{json}")
    return parser


def _arguments_of(command):
    """What declares ``command``'s subcommand: its own arguments, then the CLI's options for it."""
    def declare(p: argparse.ArgumentParser) -> None:
        for arg in command.args:
            arg.add_to(p)
        CLI_OPTIONS.get(command.name, lambda p: None)(p)
    return declare


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
    argv = sys.argv[1:] if argv is None else list(argv)
    named = argv[0] if argv and argv[0] in {name for name, *_ in _subcommands()} else None
    args = build_parser(only=named).parse_args(argv)
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
    except ERRORS as exc:
        print(f"npumagic: error: {safe_text(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: one line, the shell's status for SIGINT, no traceback
        print("npumagic: interrupted", file=sys.stderr)
        return 130
    finally:
        SHELL.reset(shell)
        warnings.formatwarning = python_format
        sys.stdout = stdout


def entry() -> NoReturn:
    """The ``npumagic`` command: :func:`main`, then the process ends without the interpreter's
    teardown (:func:`~npumagic.process_end.exit_now`)."""
    exit_now(main())


if __name__ == "__main__":
    entry()
