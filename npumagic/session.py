"""Session: one per kernel. Names runs, drives a capture, analyses the run directory, keeps the
history store consistent (also when the cell fails), and remembers the baseline."""

from __future__ import annotations

import dataclasses

import logging
import os
import re
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np
import pandas as pd

from . import analysis, parallel
from .analysis.advice import Advice, advise_run
from .analysis.alerts import Alert, Band, learn_band
from .analysis.checklist import Verdict, checklist
from .analysis.compare import Comparison, Noise, between_run_noise, compare
from .analysis.metrics import Summary
from .capture import CaptureOptions, CaptureResult, capture, choose_backend, ensure_idle
from .capture.backends import BackendChoice, environment_snapshot
from .commands import say
from .errors import NpumagicError
from .history import DB_NAME, HistoryStore, UnknownRun
from .interrupts import held_interrupts
from .records import Run
from .safeio import linked
from .names import check_name, file_stem

if TYPE_CHECKING:
    from .capture.launch import Ended
    from .render.views import RenderedFigure

log = logging.getLogger(__name__)


@dataclass
class RunOutcome:
    """What one capture or import produced: the stored run and its analysis."""

    run: Run
    summary: Summary | None
    verdict: Verdict | None
    capture: CaptureResult | None = None
    notes: list[str] = field(default_factory=list)
    trace: "analysis.Trace | None" = None
    unfinished: list[int] = field(default_factory=list)  # steps the cell ended or failed inside: left out

    @property
    def error(self) -> BaseException | None:
        return self.capture.error if self.capture else None


class Session:
    """One per kernel: the history store of ``output_dir``, the backend choice (made once), the
    baseline, and a cache of summaries (traces can be large: only the latest one is kept)."""

    def __init__(self, output_dir: str | Path = "npumagic_runs", backend: str | None = None) -> None:
        self.output_dir = Path(output_dir).resolve()
        self.store = HistoryStore(self.output_dir)
        self.prefer_backend = backend or None
        self._choice: BackendChoice | None = None
        self._import_changes: dict[str, tuple[str | None, str | None]] = {}  # what importing the backend set
        self._summaries: dict[str, Summary] = {}
        self._trace: tuple[str, analysis.Trace] | None = None  # the latest one only: traces can be large
        self.baseline: str | None = None
        self._unclosed: dict[str, tuple[str, str]] = {}  # runs whose end is not written yet: (status, message)
        self._busy = False  # recording a run (its row is 'running' on purpose)
        self.scheduler = ""  # where many-rank imports run (see npumagic.parallel)

    # -- backend ------------------------------------------------------------------------------
    def backend_choice(self) -> BackendChoice:
        if self._choice is None:
            before = environment_snapshot()
            self._choice = choose_backend(self.prefer_backend)
            after = environment_snapshot()
            # import torch_npu sets TASK_QUEUE_ENABLE=0 itself in IPython/Jupyter (optional_features.py)
            self._import_changes = {k: (before.get(k), after.get(k)) for k in set(before) | set(after)
                                    if before.get(k) != after.get(k)}
        return self._choice

    def environment(self) -> dict[str, str]:
        """The relevant environment as the user set it: a variable the backend's import changed
        (and nobody set since) is recorded with the user's value, the imported value beside it
        under "NAME (after import BACKEND)"."""
        env = environment_snapshot()
        module = "torch_npu" if self._choice is not None and self._choice.backend.name == "npu" else "torch"
        for key, (was, became) in self._import_changes.items():
            if env.get(key) != became:
                continue  # set again since the import: that is what the user wants
            if was is None:
                env.pop(key, None)
            else:
                env[key] = was
            env[f"{key} (after import {module})"] = became if became is not None else "(unset)"
        return env

    # -- running ------------------------------------------------------------------------------
    def profile(self, body: Callable[[], object], options: CaptureOptions, name: str | None = None,
                source: str = "", arguments: dict | None = None, out: str | Path | None = None,
                replace: bool = False) -> RunOutcome:
        """Capture ``body`` as a new run; the body's exception is in ``outcome.error`` (not raised).

        A taken ``name`` (re-running a named cell) makes the run ``name-2`` (then ``-3``, ...)
        with a note; with ``replace`` the new run takes the name once its capture succeeded,
        and only then is the old run removed (with its files, when they are in the default
        place). A nested capture raises before anything is recorded or run."""
        ensure_idle()
        if out and _holds_output(Path(out).resolve()):
            raise NpumagicError(f"--out {out}: the folder already holds profiler output, which this run's traces "
                                "would be read with; choose a new or empty folder")
        choice = self.backend_choice()
        backend = choice.backend
        fields = dict(backend=backend.name, device=backend.device_name, source=source,
                      arguments=arguments or options.as_dict(), environment=self.environment(),
                      versions=backend.versions())
        reserved, self._busy = None, True
        try:  # from the reservation on the run is recorded whatever happens: never left 'running'
            reserved = self._reserve(name, next_free=True, **fields)
            run_dir = Path(out).resolve() if out else self.output_dir / reserved
            if linked(run_dir, self.output_dir):  # planted in a shared output directory: would write elsewhere
                raise NpumagicError(f"{run_dir}: a symbolic link inside the output directory {self.output_dir}; "
                                    "npumagic writes no run through one: remove it or choose another --out")
            owned = _make_run_dir(run_dir)
            self.store.update(reserved, run_dir=str(run_dir), run_dir_owned=owned)
            notes = [str(choice)] + backend.notes(options)
            result = capture(body, options, backend, run_dir, source=source)
            notes += result.messages
            if reserved != name and name is not None:
                if replace and result.status == "ok":
                    run_dir = self._take_over(name, reserved, run_dir, moved=out is None)
                    result.run_dir = run_dir
                    notes.append(f"replaced the earlier run {name}")
                    self._unclosed[name] = self._unclosed.pop(reserved)
                    reserved = name
                elif replace:
                    notes.append(f"{name} kept: this run {result.status}; it is recorded as {reserved}")
                else:
                    notes.append(f"{name} is taken: this run is {reserved} (--replace to overwrite {name})")
            return self._record(reserved, result.status, run_dir, result, notes)
        except BaseException as exc:
            if reserved is not None:
                self._close(reserved, exc)
            raise
        finally:
            self._busy = False

    def _reserve(self, name: str | None, **fields) -> str:
        """``store.reserve`` with Ctrl-C held (one right after the row is committed lands in the
        caller's try that closes the run), the run remembered as open: should even its closing be
        cut short (a burst of Ctrl-C), :meth:`settle` records it as interrupted."""
        with held_interrupts():
            reserved = self.store.reserve(name, **fields)
            self._unclosed[reserved] = ("interrupted", "KeyboardInterrupt: the run's end was never recorded")
        return reserved

    def run_command(self, argv: list[str], options: CaptureOptions, name: str | None = None,
                    output=None, forward_interrupt: bool = False) -> tuple[RunOutcome, "Ended"]:
        """Run the command ``argv`` unmodified under the capture (:mod:`npumagic.capture.launch`)
        as a new run in ``output_dir/NAME``, recorded with the command line, the working
        directory, the environment and the ranks; return it and how the command ended.
        ``output`` and ``forward_interrupt``: see :func:`npumagic.capture.launch.run`."""
        from .capture import launch
        from .capture.inject import Config

        launch.check_command(argv)
        if name is not None:
            check_name(name)
        arguments = dict(options.as_dict(), name=name, command=list(argv), cwd=os.getcwd())
        reserved = self.store.reserve(name, next_free=True, source=shlex.join(argv), arguments=arguments,
                                      environment=environment_snapshot())
        try:
            run_dir = self.output_dir / file_stem(reserved)
            self.store.update(reserved, run_dir=str(run_dir), run_dir_owned=_make_run_dir(run_dir))
            config = Config(str(run_dir), options.as_dict(), backend=self.prefer_backend)
            ended = launch.run(argv, launch.environment(config), output=output, forward_interrupt=forward_interrupt)
            found = launch.records(run_dir)
            result = launch.collect(run_dir, options, ended, found)
            return self.record_processes(reserved, result, found), ended
        except BaseException as exc:
            self._close(reserved, exc)
            raise

    def record_processes(self, name: str, result: CaptureResult, found: list[dict]) -> RunOutcome:
        """Record run ``name`` from a command's capture and its processes' records (backend,
        device, versions, ranks, pids) and analyse it."""
        run = self.store.get(name)
        lead = found[0] if found else {}
        if lead:
            self.store.update(name, backend=lead.get("backend"), device=lead.get("device"),
                              versions=lead.get("versions", {}),
                              arguments={**run.arguments, "ranks": sorted({r.get("rank", 0) for r in found}),
                                         "pids": [r.get("pid") for r in found]})
        notes = (lead.get("notes") or [f"npumagic: ran {run.source}"]) + result.messages
        return self._record(name, result.status, result.run_dir, result, notes)

    def _close(self, name: str, exc: BaseException) -> None:
        """Record a run whose capture or recording was cut short (an unwritable output, a second
        Ctrl-C during the profiler's export, a failure anywhere) as interrupted or failed."""
        status = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
        message = f"{type(exc).__name__}: {exc}"[:2000]
        with held_interrupts():  # another Ctrl-C (a burst of them) waits until the status is written
            try:
                if self.store.get(name).status == "running":
                    self.store.finish(name, status, message=message)
                self._unclosed.pop(name, None)
            except Exception:  # noqa: BLE001 - the original exception is the one to raise
                self._unclosed[name] = (status, message)  # written by settle() once the history can be
                log.debug("could not record %s as %s", name, status, exc_info=True)

    def settle(self) -> None:
        """Write the statuses that could not be written when their run ended (a full disk, a
        locked history): a run of this live kernel is never left 'running' once the history
        can be written again. Called before each magic (not while one records a run)."""
        if self._busy:
            return
        for name, (status, message) in list(self._unclosed.items()):
            try:
                if self.store.get(name).status == "running":
                    self.store.finish(name, status, message=message)
            except UnknownRun:
                pass  # removed meanwhile
            except Exception:  # noqa: BLE001 - still not writable: the next magic tries again
                log.debug("could not record %s as %s yet", name, status, exc_info=True)
                return
            del self._unclosed[name]

    def _take_over(self, name: str, new: str, run_dir: Path, moved: bool) -> Path:
        """Remove run ``name`` and give ``new`` its name (and its default directory, whose old
        files go only when npumagic created them there; files the old run wrote elsewhere with
        --out are left alone)."""
        was_baseline = self.baseline == name
        old = self.store.get(name)
        default = self.output_dir / file_stem(name)
        try:  # the old files go only when npumagic created them in their default place
            self.remove(name, files=old.kind == "profile" and old.run_dir is not None and Path(old.run_dir) == default)
        except NpumagicError:
            self.remove(name)  # kept on disk; the new run keeps its own directory
        if moved and not default.exists() and run_dir.is_dir():
            run_dir = Path(shutil.move(str(run_dir), str(default)))
        self.store.rename(new, name, run_dir=str(run_dir))
        if was_baseline:
            self.baseline = name
        return run_dir

    def load(self, path: str | Path, name: str | None = None, every_rank: bool = False,
             rank: int | None = None) -> RunOutcome:
        """Import a profiler output directory collected elsewhere as a run, named ``name`` or
        after the directory (``level1``; ``level1-2`` when that is taken), describing ``rank``
        (default the lowest); ``every_rank``: read every rank of a many-rank job in full (see
        :func:`npumagic.parallel.analyze`)."""
        if name is not None:
            check_name(name)
        path = Path(path).expanduser().resolve()
        try:
            str(path).encode("utf-8")  # the history keeps paths as UTF-8 text
        except UnicodeEncodeError:
            shown = os.fsencode(path).decode("utf-8", "backslashreplace")
            raise NpumagicError(f"{shown}: the path is not UTF-8 text (bytes from another encoding), so the history "
                                "cannot keep it; rename the folder or link it under a UTF-8 name") from None
        # raises TraceError before anything is stored; many ranks (an outline, or Dask): only a Summary
        try:
            trace, summary = parallel.read(path, rank=rank, scheduler=self.scheduler, progress=True,
                                           every_rank=every_rank)
        except ValueError as exc:  # a rank the job does not hold
            raise NpumagicError(str(exc)) from None
        meta = summary.meta if summary is not None else trace.meta
        wanted = name or _name_for(path)
        name, self._busy = None, True
        try:  # as in profile(): the committed row is closed whatever follows
            name = self._reserve(wanted, next_free=True, kind="load", backend=meta.get("backend"),
                                 device=meta.get("device_name"), source=f"%npuload {path}",
                                 arguments={"path": str(path)}, environment=meta.get("environment", {}))
            self.store.update(name, run_dir=str(path))
            notes = [f"{wanted} is taken: this run is {name}"] if name != wanted else []
            return self._record(name, "ok", path, None, notes, trace=trace, summary=summary, rank=rank)
        except BaseException as exc:
            if name is not None:
                self._close(name, exc)
            raise
        finally:
            self._busy = False

    def _record(self, name: str, status: str, run_dir: Path, result: CaptureResult | None, notes: list[str],
                trace: "analysis.Trace | None" = None, summary: Summary | None = None,
                rank: int | None = None) -> RunOutcome:
        verdict, unfinished = None, []
        message = "; ".join(notes[1:]) if result else None
        if result is not None and result.dataloaders:  # before the verdict: Verify's "what changed" reads them
            self.store.update(name, dataloaders=result.dataloaders)
        try:
            if trace is None and summary is None and result is not None and result.trace_files:
                trace = analysis.load(run_dir)
                if 0 < result.recorded < len(trace.steps):  # the profiler stopped inside a step
                    trace, seen = trace.first_steps(result.recorded), trace.steps["step"].tolist()
                    unfinished = sorted(set(seen) - set(trace.steps["step"]))
                    ended = "failed" if result.error is not None else "ended"
                    if unfinished:  # several ranks: each has its steps, none is left out
                        notes.append(f"step {', '.join(map(str, unfinished))} left out: the cell {ended} inside it")
            if trace is not None:
                summary = analysis.summarize(trace, rank=rank)
            if summary is not None and result is not None and (result.step_times or result.device_neighbours):
                # the steps the profiler did not record, beside those it did (what profiling costs),
                # and other processes on the device: what the step times can be trusted for
                summary = dataclasses.replace(summary, meta={**summary.meta, "step_times": result.step_times,
                                                             "device_neighbours": result.device_neighbours})
            if summary is not None:
                self._summaries[name] = summary
                verdict = checklist(summary, run_name=name, stored_at=str(self.store.path),
                                    comparison=self._against_baseline(name, summary))
        except NpumagicError as exc:
            notes.append(f"could not analyse {run_dir}: {exc}")
            message = str(exc)
        except Exception as exc:  # noqa: BLE001 - the run must be recorded whatever the analysis does
            notes.append(f"analysis failed ({type(exc).__name__}: {exc}); the raw output is kept in {run_dir}")
            message = f"{type(exc).__name__}: {exc}"
            log.debug("analysis failed", exc_info=True)
        alert = self._alert(name, summary) if status == "ok" and result is not None else None
        if alert is not None:
            notes.append(("alert: " if alert.outside else "") + f"median step {alert.sentence()}")
            message = "; ".join(m for m in (message, notes[-1]) if m)
        self.store.finish(
            name, status, dataloaders=result.dataloaders if result else [],
            kernels=summary.kernels if summary is not None else None,
            steps=summary.steps if summary is not None else None, summary=summary,
            steps_seen=result.steps if result else (len(summary.steps) if summary is not None else None),
            message=message, headline=summary.headline if summary is not None else {},
            verdict=dict(verdict.as_dict(), alert=alert.to_dict() if alert else None) if verdict is not None else {},
        )
        self._unclosed.pop(name, None)
        if self.baseline is None and summary is not None and status == "ok" and result is not None:
            self.baseline = name  # a capture of this session, never an imported job
        if trace is not None:
            self._trace = (name, trace)
        return RunOutcome(self.store.get(name), summary, verdict, result, notes, trace, unfinished)

    def _alert(self, name: str, summary: Summary | None) -> Alert | None:
        """This run's median step against the band of the earlier runs of its configuration."""
        if summary is None or not len(summary.steps):
            return None
        try:
            band = history_band(self.store, name, include=False)
        except NpumagicError:
            return None
        return band.check(float(summary.steps["wall_us"].median())) if band is not None else None

    # -- reading ------------------------------------------------------------------------------
    def resolve(self, name: str | None) -> str:
        """A run name from ``name``: a name, -1/-2 (latest, second latest), or None (latest). The
        latest are counted among the runs of this kernel and of kernels that have ended: another
        running kernel's runs on this host (a second notebook on the same output directory) are
        taken by name."""
        relative = name is None or (name.lstrip("-").isdigit() and name.startswith("-"))
        if not relative:
            self.store.get(name)  # raises UnknownRun with the known names
            return name
        names, every = self.store.names(other_live_kernels=False), self.store.names()
        others = len(every) - len(names)
        elsewhere = (f" ({others} more {'is' if others == 1 else 'are'} another running kernel's, a second notebook on "
                     f"this output directory: name those; {say('list_runs')})") if others else ""
        if not names:
            if every:
                raise NpumagicError(f"no run of this kernel or of an ended one{elsewhere}")
            raise NpumagicError(f"no runs recorded yet; {say('first_run')}")
        if name is None:
            return names[-1]
        k = int(name)
        if k == 0:
            raise NpumagicError("-0 is no run: -1 is the latest, -2 the one before")
        if -k > len(names):
            raise NpumagicError(f"only {len(names)} run{'s' if len(names) != 1 else ''} to count back from; "
                                f"{name} is out of range{elsewhere}")
        return names[k]

    def trace(self, name: str) -> "analysis.Trace":
        """The run's parsed trace (re-read from its output directory; only the timeline and
        per-rank redraws need it)."""
        if self._trace is None or self._trace[0] != name:
            run = self.store.get(name)
            if not run.run_dir or not Path(run.run_dir).exists():
                raise NpumagicError(f"run {name!r} has no output directory left ({run.run_dir}): the timeline needs "
                                    f"the trace files; its summary, steps, kernels, advice and comparisons are in "
                                    f"the history")
            self._trace = (name, analysis.load(run.run_dir))
        return self._trace[1]

    def summary(self, name: str) -> Summary:
        """The run's Summary: from this session, else the history, else re-parsed from its
        output directory (runs recorded before summaries were stored; then stored)."""
        if name not in self._summaries:
            stored = self.store.summary(name)
            if stored is None:
                run = self.store.get(name)
                if run.status in ("no-steps", "no-trace"):
                    raise NpumagicError(f"run {name!r} recorded nothing ({run.status}): there is nothing to analyse; "
                                        "profile it again so that at least one step completes in the active window")
                if not run.run_dir or not Path(run.run_dir).exists():
                    raise NpumagicError(f"run {name!r}: no summary of it could be read from the history and its "
                                        f"output directory is gone ({run.run_dir}): nothing is left to analyse")
                stored = analysis.summarize(self.trace(name))
                self.store.put_summary(name, stored)
            self._summaries[name] = stored
        return self._summaries[name]

    def _against_baseline(self, name: str, summary: Summary) -> Comparison | None:
        """Verify against the baseline when it is comparable: a run of the same kind (a capture,
        or an imported job) on the same backend; else against nothing."""
        if self.baseline is None or self.baseline == name:
            return None
        base, run = self.store.get(self.baseline), self.store.get(name)
        if base.kind != run.kind or base.backend != run.backend:
            return None
        try:
            return self.compare(self.baseline, name, summary_b=summary)
        except NpumagicError:
            return None

    def noise(self, *names: str) -> Noise:
        """Between-run noise from the history's replicates: finished runs with the same
        configuration (cell source, options, environment, versions, backend, device, DataLoader
        settings), on the backend and device of ``names``."""
        return history_noise(self.store, names)

    def context(self, name: str) -> dict:
        """A run's record as the comparison's "what changed" section reads it."""
        return run_context(self.store.get(name))

    # -- the checklist's later steps ------------------------------------------------------------
    def compare_pair(self, a: str | None, b: str | None) -> tuple[str, str]:
        """The two runs ``%npucompare A B`` means: both named; with one, that run (default the
        latest) against the baseline, or against the run before it when there is no other; the
        baseline named alone, against the latest run. A run that recorded nothing (no steps, no
        trace) is never the reference taken by default."""
        if b is not None:
            a, b = self.resolve(a), self.resolve(b)
        else:
            named, b = a is not None, self.resolve(a)
            a = self.baseline
            if a is None or a == b:
                names = self.store.names(other_live_kernels=False)
                names = names if b in names else self.store.names()  # b named: another kernel's run
                i = names.index(b)
                recorded = [n for n in names if n != b and self._recorded(n)]
                if named and b == a:  # `%npucompare baseline`: the baseline against the latest run
                    if not recorded:
                        raise NpumagicError(f"a comparison needs two runs; {b} is the only one that recorded steps: "
                                            "profile another one first")
                    return b, recorded[-1]
                earlier = [n for n in recorded if names.index(n) < i]
                if not earlier:
                    raise NpumagicError("a comparison needs two runs that recorded steps; profile another one first")
                a = earlier[-1]
        if a == b:
            raise NpumagicError(f"both sides are {a!r}; name two different runs")
        return a, b

    def _recorded(self, name: str) -> bool:
        """Whether run ``name`` recorded at least one step (else it is no reference)."""
        run = self.store.get(name)
        steps = run.headline.get("steps") if run.headline else run.steps_seen
        return run.status not in ("no-steps", "no-trace", "running") and bool(steps)

    def compare_figure(self, comparison: Comparison, fmt: str = "png") -> "RenderedFigure":
        """The comparison chart, saved as ``output_dir/compare_A_vs_B.FMT`` (shown even when the
        output directory cannot be written)."""
        from .render.charts import comparison_figure
        from .render.views import RenderedFigure

        path = self.output_dir / f"compare_{file_stem(comparison.a)}_vs_{file_stem(comparison.b)}.{fmt}"
        return RenderedFigure.of("compare", comparison_figure(comparison), fmt, path)

    def figures(self, name: str, views: list[str], rank: int | None = None, svg: bool = False,
                **options) -> list["RenderedFigure"]:
        """Draw ``views`` of run ``name`` (of one ``rank`` when given) and save them beside the run
        (:meth:`figure_dir`; unsaved, still returned, where that cannot be written)."""
        from .render.views import TRACE_VIEWS, render_views

        needs_trace = rank is not None or bool(TRACE_VIEWS.intersection(views))
        trace = self.trace(name) if needs_trace else None  # the rest is in the history
        summary = self.summary(name) if rank is None else analysis.summarize(trace, rank=rank)
        return render_views(views, trace, summary, self.writable_figure_dir(self.store.get(name)), name, "svg" if svg else "png", rank=rank,
                            **{k: v for k, v in options.items() if v is not None})

    def compare(self, a: str, b: str, summary_b: Summary | None = None) -> Comparison:
        """B against A, with what changed and the between-run noise of the history."""
        return compare(self.summary(a), summary_b if summary_b is not None else self.summary(b), a, b,
                       self.context(a), self.context(b), noise=self.noise(a, b))

    def _environment(self, name: str) -> dict[str, str]:
        """The run record's environment snapshot (what the user set), for the environment rule."""
        return {k: str(v) for k, v in (self.store.get(name).environment or {}).items()}

    def advise(self, name: str, every_rank: bool = False, low: bool = True) -> Advice:
        """Findings of a run, most important first (see :func:`~npumagic.analysis.advice.advise_run`)."""
        return advise_run(self.summary(name), name, every_rank=every_rank, low=low,
                          environment=self._environment(name))

    def kernel_history(self, kernel: str) -> tuple[str, pd.DataFrame]:
        """One kernel across the history: (its name, a table run / count / total_us / mean_us).
        ``kernel`` is an exact name, else a part of one (the matching kernel with most time)."""
        rows = self.store.kernels()
        exact = rows[rows["name"] == kernel]
        rows = exact if len(exact) else rows[rows["name"].str.contains(kernel, regex=False)]
        if rows.empty:
            raise NpumagicError(f"no kernel matching {kernel!r} in the history")
        name = kernel if len(exact) else rows.groupby("name")["total_us"].sum().idxmax()
        table = rows[rows["name"] == name].groupby("run", sort=False).agg(
            count=("count", "sum"), total_us=("total_us", "sum")).reset_index()
        table["mean_us"] = table["total_us"] / table["count"]
        return name, table

    def set_baseline(self, name: str) -> None:
        self.summary(name)  # must be analysable
        self.baseline = name

    def note(self, name: str, text: str) -> str | None:
        """Set run ``name``'s note; return the note it replaces, if any."""
        earlier = self.store.get(name).note
        self.store.update(name, note=text)
        return earlier or None

    def remove(self, name: str, files: bool = False) -> Run:
        """Remove a run from the history; with ``files``, first delete its output directory.

        Only a directory npumagic created for the run, inside ``output_dir``, is ever deleted
        (not one given with ``--out`` that existed, not an imported one, not the output
        directory itself or another run's); otherwise NpumagicError says why and the run stays.
        The history row goes only once the files are gone."""
        run = self.store.get(name)
        if files:
            self._delete_files(run)
        run = self.store.remove(name)
        self._summaries.pop(name, None)
        if self._trace is not None and self._trace[0] == name:
            self._trace = None
        if self.baseline == name:
            self.baseline = None
        return run

    def figure_dir(self, run: Run) -> Path:
        """Where a run's figures go: beside a capture's output; for an imported run under
        ``output_dir/figures/NAME``, never into the user's input folder."""
        if run.kind == "profile" and run.run_dir:
            path = Path(run.run_dir)
            return path if path.is_dir() else path.parent
        return self.output_dir / "figures" / file_stem(run.name)

    def writable_figure_dir(self, run: Run) -> Path | None:
        """:meth:`figure_dir`, created; None where it cannot be written (figures are then shown,
        not saved)."""
        path = self.figure_dir(run)
        if linked(path, self.output_dir):  # a link planted in the output directory: figures are shown only
            return None
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError:
            return None
        return path

    def _delete_files(self, run: Run) -> None:
        refuse = lambda why: NpumagicError(  # noqa: E731
            f"not deleting {run.run_dir} for run {run.name!r}: {why}; the run is kept (remove it without --files)")
        if not run.run_dir:
            raise refuse("it has no output directory")
        path = Path(run.run_dir)
        if not path.exists():
            return  # already gone: nothing to delete
        if run.kind != "profile" or not run.run_dir_owned:
            raise refuse("npumagic did not create it (an imported run, or --out named an existing directory)")
        if path.is_symlink() or not path.is_dir():
            raise refuse("it is not a plain directory")
        real, root = Path(os.path.realpath(path)), Path(os.path.realpath(self.output_dir))
        if root not in real.parents:
            raise refuse(f"it is not inside the output directory {root}")
        if (real / DB_NAME).exists() or any(p == real or real in p.parents for p in self._kept_folders(run)):
            raise refuse("it holds the history, npumagic's figures folder or another run's files")
        try:
            shutil.rmtree(real)
        except OSError as exc:
            raise NpumagicError(f"could not delete {real} ({exc.strerror or exc}); the run is kept") from None


    def _kept_folders(self, removed: Run) -> list[Path]:
        """What deleting a run's folder must leave: the figures folder of imported runs, and every
        other run's output and figures (real paths)."""
        kept = [self.output_dir / "figures"]
        for r in self.store.runs():
            if r.name != removed.name:
                kept += [Path(r.run_dir)] if r.run_dir else []
                kept.append(self.figure_dir(r))
        return [Path(os.path.realpath(p)) for p in kept]


def _holds_output(folder: Path) -> bool:
    """Whether ``folder`` holds Kineto traces or torch_npu ranks (a capture there would mix with them)."""
    if not folder.is_dir():
        return False
    from .analysis.sources import KINETO_FILES
    from .analysis.sources.ascend.discover import rank_dirs

    return (any(p.name.endswith(KINETO_FILES) for p in folder.iterdir())
            or bool(rank_dirs(folder)))


def _make_run_dir(run_dir: Path) -> bool:
    """Create a run's output directory; return whether npumagic created it (and so owns it)."""
    if run_dir.is_dir():
        return False
    try:
        run_dir.mkdir(parents=True)
    except OSError as exc:
        raise NpumagicError(f"{run_dir}: cannot write the run's profiler output here ({exc.strerror or exc}); "
                            "choose another --out or NpuMagics.output_dir") from None
    return True

def history_noise(store: HistoryStore, names) -> Noise:
    """:meth:`Session.noise` of any history (the CLI reads one it does not own)."""
    runs = [r for r in store.runs() if r.status == "ok" and r.kind == "profile"]
    wanted = {(r.backend, r.device) for r in runs if r.name in names}
    walls = store.step_walls()
    groups: dict[str, list] = {}
    for r in runs:
        if (r.backend, r.device) in wanted and len(walls.get(r.name, ())):
            groups.setdefault(_configuration(r), []).append(walls[r.name])
    return between_run_noise(list(groups.values()))


def history_band(store: HistoryStore, like: str, include: bool) -> Band | None:
    """The band learned from the finished runs with run ``like``'s configuration recorded before
    it (and ``like`` itself with ``include``); None with too few."""
    runs = store.runs()
    i = next((k for k, r in enumerate(runs) if r.name == like), None)
    if i is None:
        store.get(like)  # raises UnknownRun with the known names
    config, walls = _configuration(runs[i]), store.step_walls()
    medians = [float(np.median(walls[r.name])) for r in runs[: i + 1 if include else i]
               if r.status == "ok" and r.kind == "profile" and len(walls.get(r.name, ())) and _configuration(r) == config]
    return learn_band(medians)


def run_context(run: Run) -> dict:
    """A run's record as the comparison's "what changed" section reads it."""
    return {"source": run.source, "arguments": run.arguments, "environment": run.environment,
            "versions": run.versions, "backend": run.backend, "device": run.device, "dataloaders": run.dataloaders}


def _configuration(run: Run) -> str:
    """What makes two runs replicates: everything recorded about how they ran but the name."""
    import json

    arguments = {k: v for k, v in run.arguments.items() if k not in ("name", "out", "line")}
    return json.dumps([(run.source or "").strip(), arguments, run.environment, run.versions, run.backend, run.device,
                       run.dataloaders], sort_keys=True, default=str)


_TRACE_SUFFIX = re.compile(r"(\.pt\.trace)?\.json(\.gz)?$")


def _name_for(path: Path) -> str:
    """A run name from a directory or trace file name: ``level1``, ``rank0_ascend_pt``."""
    stem = _TRACE_SUFFIX.sub("", path.name) if path.is_file() else path.name
    # ASCII only (a run name becomes part of paths), and no ".." (日本語 and a..b gave invalid names)
    name = re.sub(r"\.{2,}", ".", re.sub(r"[^A-Za-z0-9_.-]+", "_", stem)).strip("._-")[:60]
    name = name if name and (name[0].isalpha() or name[0] == "_") else f"run_{name}" if name else "loaded"
    try:
        return check_name(name)
    except NpumagicError:
        return "loaded"
