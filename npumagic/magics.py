"""The IPython shell layer only: parse and validate arguments, call Session or a command of the core,
display results.

Every option is declared with ``magic_arguments`` (or, for ``%npu NAME``, by the command) so
``%%npuprofile?`` documents itself and bad input raises ``UsageError`` before any user code runs;
:func:`~npumagic.magic_input.usage_errors` turns npumagic's errors into it."""

from __future__ import annotations

import sys
from pathlib import Path

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class, no_var_expand
from IPython.core.magic_arguments import argument, magic_arguments
from traitlets import Bool, Enum, List, TraitError, Unicode, validate

from .analysis.ab import MAX_STEPS as AB_MAX_STEPS
from .analysis.ab import THRESHOLD as AB_THRESHOLD
from .calibration import VerifiedCompareReport, guess_runs, verify_runs
from .capture import CaptureOptions, NestedCaptureError
from .commands import COMMANDS, ERRORS, Places, find
from .commands.compare import part_comparisons
from .commands.rules import advice_calibration
from .errors import NpumagicError
from .magic_input import (MAX_NOTE_CHARS, assigned_cell_magic, capture_options, cell_usage, check_ab_arguments,
                          check_run_name, command_parser, compile_cell, parse, schedule_arguments, split_statement,
                          split_words, step_callable, step_window, usage_errors, valid_name)
from .raw_parse import parse_raw
from .analysis.job import check_scheduler
from .ranges import view_range
from .recorder import RunOutcome
from .render import VIEWS, CompareReport, FigureReport, KernelHistory, RunReport
from .render.live.frontend import advice_with_timeline, widget_frontend, with_live_timeline
from .render.tables import format_runs
from .session import Session

__all__ = ["NpuMagics", "assigned_cell_magic"]

ATTACH_TIMEOUT_MAX = 7 * 24 * 3600  # s: %npuattach waits for a window at most a week


@magics_class
class NpuMagics(Magics):
    """npumagic's magics: %npu COMMAND, %%npuprofile, %npusteps, %npurun, %npuattach, %npuruns, %npuload, %npushow,
    %npuadvise, %npucompare, %npuab, %npubaseline, %npunote, %npurm, %npuhistory, %npuexport."""

    output_dir = Unicode("npumagic_runs", help="Where runs and their history (history.sqlite) are kept.").tag(config=True)
    backend = Enum(["", "npu", "cuda", "cpu"], default_value="",
                   help="Force a backend: 'npu', 'cuda' or 'cpu' (default '': the best available).").tag(config=True)
    plot = Bool(True, help="Draw figures after each run.").tag(config=True)
    views = List(Enum(list(VIEWS)), default_value=["timeline", "steps"],
                 help=f"Figures drawn after each run, from: {', '.join(VIEWS)}.").tag(config=True)
    figure_format = Enum(["png", "svg"], default_value="png", help="Format of the figures shown and saved.").tag(config=True)
    live = Bool(True, help="Where a widget front end is present, the timeline as a live widget served by this kernel, "
                           "%npuadvise's findings each opening there; False: the static figure (as --static).").tag(config=True)
    scheduler = Unicode("", help="Where %npuload reads and summarises the ranks of a many-rank job in parallel: a "
                                 "dask.distributed scheduler address (tcp://HOST:8786; its workers must see the same "
                                 "paths), 'local' (a local Dask cluster), 'serial' (this kernel), or '' (a local "
                                 "cluster from 8 ranks on). Naming one reads every rank in full, as "
                                 "%npuload --every-rank does.").tag(config=True)
    log_to = Enum(["", "mlflow", "wandb"], default_value="",
                  help="Log every run, once recorded, to this experiment tracker: 'mlflow' or 'wandb' (the active "
                       "tracker run, else a new one; %npucompare logs on the later run); '' logs nowhere. "
                       "Needs npumagic[mlflow] or npumagic[wandb].").tag(config=True)

    @validate("log_to")
    def _check_log_to(self, proposal):
        from .trackers import available

        if proposal["value"]:
            try:
                available(proposal["value"])  # refused now, not after the next capture
            except NpumagicError as exc:
                raise TraitError(str(exc)) from None
        return proposal["value"]

    @validate("scheduler")
    def _check_scheduler(self, proposal):
        try:
            return check_scheduler(proposal["value"])
        except NpumagicError as exc:
            raise TraitError(str(exc)) from None

    def __init__(self, shell=None, **kwargs) -> None:
        super().__init__(shell=shell, **kwargs)
        self._session: Session | None = None
        self._home = Path.cwd()  # a relative output_dir stays the notebook's folder's after %cd

    @property
    def session(self) -> Session:
        wanted = (self._home / Path(self.output_dir).expanduser()).resolve()
        held = self._session
        if held is None or held.output_dir != wanted or (held.recorder.prefer_backend or "") != self.backend:
            with usage_errors():  # a history that is not a database, an output_dir that is a file, ...
                self._session = Session(wanted, backend=self.backend or None)
        self._session.recorder.scheduler = self.scheduler
        self._session.recorder.settle()  # a run whose end could not be written (a full disk) is written now
        return self._session

    # -- capture ------------------------------------------------------------------------------
    @cell_magic
    @cell_usage
    @magic_arguments()
    @schedule_arguments
    @argument("--repeat-cell", action="store_true", help="run the cell body once per step (for cells without a loop)")
    @argument("--static", action="store_true", help="the timeline as a static figure, even where a live widget shows")
    def npuprofile(self, line: str, cell: str):
        """Profile a training cell under a torch.profiler / torch_npu schedule.

        Steps end at each ``npumagic.step()`` in the cell, else at each ``optimizer.step()``,
        else (``--repeat-cell``) the cell runs once per step. Prints the step table, the
        five-step checklist verdict and the timeline; returns a RunReport (``r.summary``,
        ``r.verdict``, ``r.advice``). Keep it with ``r = %%npuprofile ...`` (or ``_``).

        Examples::

            %%npuprofile --steps 3 --name baseline
            for x, y in loader:
                loss = loss_fn(model(x), y); loss.backward(); opt.step(); opt.zero_grad()

            %%npuprofile --repeat-cell --wait 0 --warmup 1 --steps 5
            train_one_step()
        """
        __tracebackhide__ = True  # noqa: F841 - IPython leaves frames that set it out of tracebacks
        args = parse(self.npuprofile, line)
        return self._profile(args, cell, repeat_cell=args.repeat_cell, source=cell, line=line)

    @magic_arguments()
    @schedule_arguments
    @argument("--run", default=None, help="with no statement: show this run's step table (default the latest)")
    @argument("statement", nargs="*", help="the statement to run once per step")
    @line_magic
    def npusteps(self, line: str):
        """Run STATEMENT once per step under the profiler schedule (the line form of %%npuprofile).

        With no statement, print the step table of the latest run, or of ``--run NAME``.

        Examples::

            %npusteps --steps 5 train_step(batch)
            %npusteps --run baseline
        """
        __tracebackhide__ = True  # noqa: F841
        option_text, statement = split_statement(line, self.npusteps)
        args = parse(self.npusteps, option_text)
        if not statement.strip():
            return self._step_table(args.run)
        if args.run:
            raise UsageError("--run shows a recorded run; it cannot be combined with a statement")
        return self._profile(args, statement, repeat_cell=True, source=statement, line=line)

    @magic_arguments()
    @schedule_arguments
    @argument("script", nargs="*", help="the script and its arguments")
    @line_magic
    def npurun(self, line: str):
        """Run a Python script unmodified in a child process under the profiler schedule, as
        ``npumagic run`` does: its output streams into the cell, then the run shows as after
        ``%%npuprofile``. Steps end at each ``optimizer.step()`` (or ``npumagic.step()`` in the
        script) and count from the first one. Interrupting the cell stops the script (it gets
        the Ctrl-C) and records the run as interrupted.

        Examples::

            %npurun --steps 3 --name script_base train.py --lr 0.1
            %npucompare cell_base script_base
        """
        import shlex

        __tracebackhide__ = True  # noqa: F841
        option_text, rest = split_statement(line, self.npurun)
        args = parse(self.npurun, option_text)
        if args.out is not None or args.replace:
            raise UsageError("--out/--replace: %npurun records the script's run in NpuMagics.output_dir/NAME")
        try:
            argv = shlex.split(rest)
        except ValueError as exc:
            raise UsageError(f"{exc} in: {rest.strip()}") from None
        if not argv:
            raise UsageError("give the script: %npurun [options] script.py [args]")
        if not Path(argv[0]).is_file():
            raise UsageError(f"no such script: {argv[0]!r} (from {Path.cwd()})")
        if args.name is not None:
            check_run_name(args.name)
        options = capture_options(args, repeat_cell=False)
        with usage_errors():
            outcome, ended = self.session.recorder.run_command([sys.executable, *argv], options, name=args.name,
                                                      output=sys.stdout, forward_interrupt=True)
        report = self._report(outcome, quiet=args.quiet, plot=self.plot and not args.no_plot)
        if outcome.error is None:
            return report
        from IPython.display import display

        display(report)  # what the script did before it stopped
        print(f"npumagic: {outcome.run.name} recorded as {outcome.run.status}: {outcome.error}", file=sys.stderr)
        raise KeyboardInterrupt if ended.status == "interrupted" else outcome.error

    @magic_arguments()
    @argument("job_dir", help="the folder `npumagic run --on-demand` printed")
    @argument("--steps", type=int, default=None, help="active steps to record (default the job's --steps)")
    @argument("--timeout", type=float, default=600, help="seconds to wait for the window (default 600)")
    @line_magic
    def npuattach(self, line: str):
        """Make a job started with ``npumagic run --on-demand`` (on this machine) capture its
        next steps, wait until that window is a run in the job's history, and show its step
        table (the job's output directory is this kernel's, else its path is printed).

        Example: ``%npuattach npumagic_runs/job --steps 5``
        """
        from .on_demand import attach

        args = parse(self.npuattach, line)
        if not 0 < args.timeout <= ATTACH_TIMEOUT_MAX:  # NaN too
            raise UsageError(f"--timeout must be seconds from 0 to {ATTACH_TIMEOUT_MAX:g}, not {args.timeout:g}")
        with usage_errors():
            out, name = attach(args.job_dir, args.steps, timeout=args.timeout)
        print(f"npumagic: {name} recorded in {out}")
        return self._step_table(name) if out == self.session.output_dir else None

    def _profile(self, args, code: str, repeat_cell: bool, source: str, line: str):
        __tracebackhide__ = True  # noqa: F841 - a failing cell's traceback starts at the user's code
        options = capture_options(args, repeat_cell)
        if args.replace and args.name is None:
            raise UsageError("--replace needs --name NAME: the run to replace")
        if args.name is not None:
            check_run_name(args.name)
        body = compile_cell(self.shell, code)
        arguments = dict(options.as_dict(), name=args.name, out=args.out, line=line)
        with usage_errors(NestedCaptureError):
            outcome = self.session.recorder.profile(body, options, name=args.name, source=source, arguments=arguments, out=args.out,
                                           replace=args.replace)
        report = self._report(outcome, quiet=args.quiet, plot=self.plot and not args.no_plot,
                              static=getattr(args, "static", False))
        if outcome.error is not None:
            left_out = (f"; step {', '.join(map(str, outcome.unfinished))}, cut short by the error, is left out"
                        if outcome.unfinished else "")
            print(f"npumagic: {outcome.run.name} recorded as {outcome.run.status} after {outcome.capture.steps} steps "
                  f"({outcome.capture.recorded} active steps captured{left_out}); output in {outcome.run.run_dir}",
                  file=sys.stderr)
            raise outcome.error
        return report

    def _report(self, outcome: RunOutcome, quiet: bool, plot: bool, static: bool = False) -> RunReport:
        figures = []
        if plot and outcome.summary is not None and outcome.trace is not None:
            figures = self.session.outcome_figures(outcome, list(self.views), self.figure_format)
        notes = [] if quiet else outcome.notes
        report = RunReport(outcome.run, outcome.summary, outcome.verdict, notes, figures)
        self._track(report)
        if report.figure("timeline") is not None and self._live(static):
            report = with_live_timeline(report, outcome.trace, f"{outcome.run.name}: timeline")
        return report

    def _track(self, result) -> None:
        """Log a recorded run or a comparison to ``log_to``'s tracker. The run is in the history
        whatever the tracker does: a tracker that fails (a server down) is said, not raised."""
        if not self.log_to:
            return
        from .trackers import log

        try:
            log(result, self.log_to)
        except Exception as exc:  # noqa: BLE001 - any tracker error: the cell's own result stands
            print(f"npumagic: not logged to {self.log_to}: {type(exc).__name__}: {exc}", file=sys.stderr)

    def _live(self, static: bool) -> bool:
        """Whether the timeline shows as the live widget (else the PNG it always has too)."""
        return self.live and not static and widget_frontend()

    @magic_arguments()
    @argument("run", nargs="?", default=None, help="run name, or -1/-2 for the latest runs (default the latest)")
    @argument("--timeline", action="store_true", help="host and device lanes over time, idle gaps marked")
    @argument("--steps", action="store_true", help="per-step breakdown with the step time line")
    @argument("--kernels", action="store_true", help="top kernels by total time (count x mean)")
    @argument("--memory", action="store_true", help="memory per component over time, the peak marked; the top allocators")
    @argument("--comm", action="store_true", help="compute vs collectives per rank")
    @argument("--matrix", action="store_true", help="communication matrix: source x destination rank bandwidth")
    @argument("--regions", action="store_true", help="record_function / mstx regions: icicle of their time, and table")
    @argument("--modules", action="store_true", help="nn.Module forward and backward: icicle of their time, and table")
    @argument("--step-range", default=None, help="timeline: steps FIRST:LAST")
    @argument("--zoom", default=None, help="timeline: window START_MS:END_MS from the first step")
    @argument("--lanes", default=None, help="timeline: comma list of lane name parts to show")
    @argument("--rank", type=int, default=None, help="rank to draw (multi-rank runs)")
    @argument("--svg", action="store_true", help="SVG instead of PNG")
    @argument("--static", action="store_true", help="the timeline as a static figure, even where a live widget shows")
    @line_magic
    def npushow(self, line: str):
        """Redraw any view of any run in the history (default: --timeline --steps).

        Examples: ``%npushow baseline --kernels``, ``%npushow -1 --timeline --step-range 3:4 --lanes Stream,HCCL``,
        ``%npushow cluster --matrix``, ``%npushow -1 --modules``
        """
        args = parse(self.npushow, line)
        views = [v for v in VIEWS if getattr(args, v)] or ["timeline", "steps"]
        with usage_errors(ValueError):
            options = {"steps": view_range(args.step_range, int, "--step-range"),
                       "window": view_range(args.zoom, float, "--zoom"),
                       "lanes": [x for x in args.lanes.split(",") if x] if args.lanes else None}
            name = self.session.runs.resolve(args.run)
            figures = self.session.figures(name, views, rank=args.rank, svg=args.svg, **options)
            report = FigureReport(name, figures)
            if "timeline" in views and self._live(args.static):
                report = with_live_timeline(report, self.session.runs.trace(name), f"{name}: timeline")
                if options["window"] is not None:
                    report.live.zoom(*options["window"])
                elif options["steps"] is not None:
                    report.live.zoom(*step_window(report.live.frame["steps"], options["steps"]))
        return report

    @line_magic
    def npu(self, line: str):
        """Run a command of npumagic's core, as ``npumagic COMMAND`` runs it in a terminal, on a
        run of the history (a name, or -1/-2) or a profiler output path; returns its result
        (text, HTML, ``.to_dict()``). ``%npu`` alone lists the commands, ``%npu COMMAND --help``
        its arguments.

        Examples: ``%npu analyze -1``, ``%npu steps baseline --first 3 --last 4``, ``%npu compare base -1``
        """
        name, _, rest = line.strip().partition(" ")
        if not name:
            return "\n".join(f"{c.name:<10} {c.help.replace('%%', '%')}" for c in COMMANDS)
        command = find(name)
        if command is None:
            raise UsageError(f"unknown command {name!r}; commands: {', '.join(c.name for c in COMMANDS)}")
        parser = command_parser(command)
        if rest.strip() in ("-h", "--help"):
            return parser.format_help()
        args = parser.parse_args(split_words(rest))
        with usage_errors(*ERRORS):
            return command.run(Places(session=self.session), **{a.name: getattr(args, a.name) for a in command.args})

    # -- history ------------------------------------------------------------------------------
    def _step_table(self, name: str | None):
        with usage_errors(*ERRORS):  # the core's steps command, on a run of the history (never a path)
            return find("steps").run(Places(session=self.session), target=self.session.runs.resolve(name)).table()

    @line_magic
    def npumem(self, line: str):
        """The notebook's memory ledger: what the namespace's variables keep alive, by variable and
        device, with bytes and the cell that assigned each (``.data``). Usage: ``%npumem``"""
        if line.strip():
            raise UsageError("%npumem takes no arguments")
        from .ledger_magic import notebook_ledger
        return notebook_ledger(self)

    @line_magic
    def npuruns(self, line: str):
        """List the run history as a table (its ``.data`` is the DataFrame).

        Usage: ``%npuruns``
        """
        if line.strip():
            raise UsageError("%npuruns takes no arguments")
        with usage_errors():
            return format_runs(self.session.runs.table())

    @magic_arguments()
    @argument("path", help="a torch.profiler or torch_npu output directory (or trace file)")
    @argument("--name", default=None, help="run name (default: the directory's name; NAME-2, ... when taken)")
    @argument("--no-plot", action="store_true", help="draw no figures")
    @argument("--static", action="store_true", help="the timeline as a static figure, even where a live widget shows")
    @argument("--rank", type=int, default=None, help="the rank described (read in full; default the lowest)")
    @argument("--every-rank", action="store_true",
              help="read every rank of a torch_npu job in full (by default, from 8 ranks on, each rank's "
                   "step_trace_time.csv and communication files, and the lowest rank in full)")
    @argument("--parse-raw", action="store_true",
              help="first parse the torch_npu ranks that hold only raw PROF_* data (the export failed or was "
                   "skipped) with torch_npu's offline analysis; needs torch_npu")
    @line_magic
    def npuload(self, line: str):
        """Import a profiler output collected elsewhere (e.g. a remote torch_npu job) as a run,
        named after its directory unless ``--name`` is given.

        Example: ``%npuload /data/job42/rank0_ascend_pt --name cluster_baseline``
        """
        args = parse(self.npuload, line)
        if args.name is not None:
            check_run_name(args.name)
        with usage_errors():
            if args.parse_raw:
                parse_raw(args.path)
            outcome = self.session.recorder.load(args.path, name=args.name, every_rank=args.every_rank, rank=args.rank)
        return self._report(outcome, quiet=False, plot=self.plot and not args.no_plot, static=args.static)


    # -- the checklist: advise, compare, baseline, record --------------------------------------
    def _run(self, name: str | None) -> str:
        with usage_errors():
            return self.session.runs.resolve(name)

    @magic_arguments()
    @argument("run", nargs="?", default=None, help="run name or -1/-2 (default the latest)")
    @argument("--all", action="store_true", help="every rank of a multi-rank run, and low-severity findings")
    @argument("--calibration", action="store_true",
              help="each finding's predicted saving beside its rule's calibration over the verified fixes")
    @line_magic
    def npuadvise(self, line: str):
        """Rank the bottlenecks of a run, each with its evidence, a concrete fix and where.

        Examples: ``%npuadvise``, ``%npuadvise baseline --all``, ``%npuadvise --calibration``
        """
        args = parse(self.npuadvise, line)
        name = self._run(args.run)
        with usage_errors():
            advice = self.session.advise(name, every_rank=args.all, low=args.all)
            if args.calibration:
                return advice_calibration(Places(session=self.session), advice, name)
            return advice_with_timeline(advice, self.session.runs, name) if self._live(False) else advice

    @magic_arguments()
    @argument("a", nargs="?", default=None, help="reference run (name or -1/-2; default the baseline)")
    @argument("b", nargs="?", default=None, help="the run to check (default the latest)")
    @argument("--no-plot", action="store_true", help="no comparison figure")
    @argument("--fix", default=None, metavar="RULE", help="A's finding whose fix B applied: predicted against achieved")
    @argument("--by-region", action="store_true", help="also compare each record_function region, step by step")
    @argument("--by-module", action="store_true", help="also compare each nn.Module, forward and backward")
    @line_magic
    def npucompare(self, line: str):
        """Compare two runs: is B faster than A beyond noise (Welch's t on log step times with a
        95% interval, run-to-run noise from replicate runs in the history), the breakdown
        component that explains it, kernels added/removed/changed, and what changed between them.

        Returns the comparison: ``c = %npucompare a b`` then ``c.significant``, ``c.speedup``,
        ``c.ci``, ``c.kernels``, ``c.breakdown``, ``c.explained_by``, ``c.changed``.

        Examples: ``%npucompare`` (baseline vs latest), ``%npucompare baseline run3``, ``%npucompare -2 -1``,
        ``%npucompare slow fast --fix dataloader`` (kept in the history: ``%npu rules``); without
        ``--fix``, a change that names one of A's fixes (the DataLoader's num_workers, a variable
        a fix names, A's syncs halved) shows that fix's prediction against the achieved saving,
        not kept
        """
        args = parse(self.npucompare, line)
        with usage_errors():
            a, b = self.session.runs.compare_pair(args.a, args.b)
            comparison = self.session.runs.compare(a, b)
            if args.fix:
                verified = verify_runs(self.session, a, b, args.fix)
            else:  # read from what changed: shown, never kept (--fix keeps it)
                guessed = guess_runs(self.session, a, b)
                verified = (guessed[0], False, guessed[1]) if guessed else None
            parts = part_comparisons(Places(session=self.session), a, b, a, b, comparison.noise, args.by_region,
                                     args.by_module)
            figure = self.session.compare_figure(comparison, self.figure_format) if self.plot and not args.no_plot \
                else None
        self._track(comparison)
        return VerifiedCompareReport(comparison, figure, parts, *verified) if verified else \
            CompareReport(comparison, figure, parts)

    @magic_arguments()
    @argument("a", help="the reference: a zero-argument callable in the namespace (one training step)")
    @argument("b", help="the variant: a zero-argument callable in the namespace")
    @argument("--threshold", type=float, default=100 * AB_THRESHOLD, metavar="PCT",
              help=f"smallest step-time change that counts, in percent (default {100 * AB_THRESHOLD:g})")
    @argument("--max-steps", type=int, default=AB_MAX_STEPS, metavar="N",
              help=f"budget of timed steps, both sides together (default {AB_MAX_STEPS})")
    @argument("--warmup", type=int, default=2, help="untimed calls of each before timing (default 2)")
    @argument("--seed", type=int, default=None, help="seed of the random block orders")
    @argument("--profile", action="store_true", help="then profile 3 steps of each as two runs of the history and "
                                                     "show where the difference goes (their comparison)")
    @line_magic
    def npuab(self, line: str):
        """Decide between two variants in this warm kernel: alternate A and B in randomised ABBA
        blocks (drift and neighbours hit both alike) and stop as soon as the 95% interval of the
        step-time ratio lies beyond --threshold either way, or within it; or after --max-steps.

        Returns the result: ``r = %npuab a b`` then ``r.significant``, ``r.speedup`` (A/B),
        ``r.ci``, ``r.steps``, ``r.decided``, ``r.to_dict()``.

        Examples: ``%npuab step_fp32 step_bf16``, ``%npuab old_step new_step --threshold 2 --max-steps 400``,
        ``%npuab old_step new_step --profile``
        """
        from .ab_run import interleave
        from .capture.alternate import StepError

        args = parse(self.npuab, line)
        variants = [step_callable(self.shell.user_ns, args.a), step_callable(self.shell.user_ns, args.b)]
        check_ab_arguments(args)
        try:  # only a variant that is no step: an error the user's steps raise is theirs, and propagates
            result = interleave(*variants, (args.a, args.b), args.threshold / 100, args.max_steps, args.warmup,
                                args.seed)
        except StepError as exc:
            raise UsageError(str(exc)) from None
        return self._ab_profiles(result, variants) if args.profile else result

    def _ab_profiles(self, result, variants):
        """The interleaved result with the comparison of 3 profiled steps of each variant."""
        import dataclasses

        __tracebackhide__ = True  # noqa: F841
        options = CaptureOptions(wait=0, warmup=1, steps=3, repeat_cell=True)
        runs = []
        with usage_errors():
            for fn, name in zip(variants, (result.a, result.b)):
                outcome = self.session.recorder.profile(fn, options, name=name if valid_name(name) else None,
                                               source=f"{name}()", arguments=dict(options.as_dict(), name=name))
                if outcome.error is not None:
                    raise outcome.error
                runs.append(outcome.run.name)
            comparison = self.session.runs.compare(*runs)
        return dataclasses.replace(result, comparison=comparison)

    @line_magic
    def npubaseline(self, line: str):
        """Show or set the baseline later runs are verified against.

        Usage: ``%npubaseline`` (show), ``%npubaseline RUN`` (set)
        """
        if not line.strip():
            if self.session.runs.baseline is None:
                print("npumagic: no baseline in this kernel yet: its first finished %%npuprofile run becomes it, or "
                      "set one with %npubaseline RUN (%npuruns lists the runs)")
            return self.session.runs.baseline
        name = self._run(line.strip())
        with usage_errors():
            self.session.runs.set_baseline(name)
        print(f"npumagic: baseline is now {name}")
        return None

    @line_magic
    @no_var_expand  # IPython's $var/{var} expansion is quadratic in the line: a 1 MB note never returned
    def npunote(self, line: str):
        """Attach your conclusion to a run (shown by %npuruns and in %npuexport), as written
        (``$`` and ``{}`` are kept, not expanded), at most 20000 characters.

        Usage: ``%npunote RUN "num_workers=4 fixed the input stall"``
        """
        import shlex

        if len(line) > MAX_NOTE_CHARS:
            raise UsageError(f"a note holds at most {MAX_NOTE_CHARS} characters (this one has {len(line)}); "
                             "keep the conclusion and put the rest in a file beside the run")
        try:
            parts = shlex.split(line)
        except ValueError as exc:
            raise UsageError(f'usage: %npunote RUN "text" ({exc})') from None
        if len(parts) < 2:
            raise UsageError('usage: %npunote RUN "text"')
        name = self._run(parts[0])
        with usage_errors():
            earlier = self.session.runs.note(name, " ".join(parts[1:]))
        if earlier:
            print(f"npumagic: {name}'s note replaces the earlier one: {earlier!r}")
        return None

    @magic_arguments()
    @argument("run", help="run name")
    @argument("--files", action="store_true", help="also delete the run's profiler output directory")
    @line_magic
    def npurm(self, line: str):
        """Remove a run from the history (asks nothing; keeps its files unless --files)."""
        args = parse(self.npurm, line)
        name = self._run(args.run)
        with usage_errors():
            run = self.session.runs.remove(name, files=args.files)
        kept = "" if args.files else f"; files kept in {run.run_dir}"
        print(f"npumagic: removed {name}{kept}")
        return None

    @magic_arguments()
    @argument("kernel", help="kernel (or operator) name, or a part of it")
    @argument("--no-plot", action="store_true")
    @line_magic
    def npuhistory(self, line: str):
        """One kernel's total and mean time across every run in the history.

        Example: ``%npuhistory aten::addmm``
        """
        args = parse(self.npuhistory, line)
        with usage_errors():
            kernel, table = self.session.runs.kernel_history(args.kernel)
        figure = None
        if self.plot and not args.no_plot:
            from .render.charts import kernel_history_figure
            from .render.views import RenderedFigure

            figure = RenderedFigure.of("history", kernel_history_figure(table, kernel), self.figure_format)
        return KernelHistory(kernel, table, figure)

    @magic_arguments()
    @argument("--md", default=None, help="write the log as Markdown to this file")
    @argument("--csv", default=None, help="write the log as CSV to this file")
    @line_magic
    def npuexport(self, line: str):
        """Export the troubleshooting log (each run's verdict, findings and note).

        Usage: ``%npuexport --md log.md`` or ``%npuexport --csv log.csv``
        """
        args = parse(self.npuexport, line)
        if not args.md and not args.csv:
            raise UsageError("give --md FILE and/or --csv FILE")
        from .render.export import write_log

        with usage_errors():
            runs = self.session.runs.records()
            write_log(runs, md=args.md, csv=args.csv)
        print(f"npumagic: exported {len(runs)} run{'' if len(runs) == 1 else 's'} to {', '.join(p for p in (args.md, args.csv) if p)}")
        return None
