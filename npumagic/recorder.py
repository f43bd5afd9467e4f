"""Capturing and importing runs: profile a cell, run a command, load a profiler's output, and
record each run with its analysis, checklist verdict and step-time alert. A run's row is closed
whatever happens (a failing cell, Ctrl-C, an unwritable history: written later by ``settle``)."""

from __future__ import annotations

import logging
import os
import shlex
import shutil
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

from . import analysis
from .analysis import job
from .analysis.alerts import Alert
from .analysis.checklist import Verdict, checklist
from .analysis.persist_verdict import verdict_record
from .analysis.summary import Summary
from .capture import CaptureOptions, CaptureResult, capture, choose_backend, ensure_idle
from .capture.backends import BackendChoice, environment_snapshot
from .wording import say
from .errors import NpumagicError
from .history import UnknownRun
from .interrupts import held_interrupts
from .named_runs import NamedRuns, history_band, name_for
from .names import check_name, file_stem
from .records import Run
from .run_files import default_run_dir, holds_output, make_run_dir
from .safeio import linked

if TYPE_CHECKING:
    from .capture.launch import Ended

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


@dataclass
class _Open:
    """A run being recorded: its name in the history (a ``--replace`` renames it)."""

    name: str


class Recorder:
    """Records new runs into ``runs``: the backend choice (made once, with what importing it
    changed in the environment), and the runs whose end is not written yet."""

    def __init__(self, runs: NamedRuns, backend: str | None = None) -> None:
        self.runs = runs
        self.store, self.output_dir = runs.store, runs.output_dir
        self.prefer_backend = backend or None
        self._choice: BackendChoice | None = None
        self._import_changes: dict[str, tuple[str | None, str | None]] = {}  # what importing the backend set
        self._unclosed: dict[str, tuple[str, str]] = {}  # runs whose end is not written yet: (status, message)
        self._busy = False  # recording a run (its row is 'running' on purpose)
        self.scheduler = ""  # where many-rank imports run (see npumagic.analysis.job)

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
        if out and holds_output(Path(out).resolve()):
            raise NpumagicError(f"--out {out}: the folder already holds profiler output, which this run's traces "
                                "would be read with; choose a new or empty folder")
        choice = self.backend_choice()
        backend = choice.backend
        fields = dict(backend=backend.name, device=backend.device_name, source=source,
                      arguments=arguments or options.as_dict(), environment=self.environment(),
                      versions=backend.versions())
        with self._recording(name, **fields) as run:
            reserved = run.name
            run_dir = Path(out).resolve() if out else default_run_dir(self.output_dir, reserved)
            if linked(run_dir, self.output_dir):  # planted in a shared output directory: would write elsewhere
                raise NpumagicError(f"{run_dir}: a symbolic link inside the output directory {self.output_dir}; "
                                    "npumagic writes no run through one: remove it or choose another --out")
            owned = make_run_dir(run_dir)
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
                    reserved = run.name = name
                elif replace:
                    notes.append(f"{name} kept: this run {result.status}; it is recorded as {reserved}")
                else:
                    notes.append(f"{name} is taken: this run is {reserved} (--replace to overwrite {name})")
            return self._record(reserved, result.status, run_dir, result, notes)

    @contextmanager
    def _recording(self, name: str | None, **fields) -> Iterator[_Open]:
        """A new run (``name``, or the next free one), recorded whatever happens from here on:
        the block's failure or Ctrl-C closes it as failed or interrupted, so it is never left
        'running'. The reservation holds Ctrl-C (one right after the row is committed lands in
        the block) and remembers the run as open: should even its closing be cut short (a burst
        of Ctrl-C), :meth:`settle` records it as interrupted. The block renames the run by
        setting ``.name``."""
        run, self._busy = None, True
        try:
            with held_interrupts():
                run = _Open(self.store.reserve(name, next_free=True, **fields))
                self._unclosed[run.name] = ("interrupted", "KeyboardInterrupt: the run's end was never recorded")
            yield run
        except BaseException as exc:
            if run is not None:
                self._close(run.name, exc)
            raise
        finally:
            self._busy = False

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
        with self._recording(name, source=shlex.join(argv), arguments=arguments,
                             environment=environment_snapshot()) as run:
            run_dir = default_run_dir(self.output_dir, run.name)
            self.store.update(run.name, run_dir=str(run_dir), run_dir_owned=make_run_dir(run_dir))
            config = Config(str(run_dir), options.as_dict(), backend=self.prefer_backend)
            try:
                ended = launch.run(argv, launch.environment(config), output=output,
                                   forward_interrupt=forward_interrupt)
            except launch.CannotStart:  # nothing ran (an exec format error, say): no run to record
                self._withdraw(run.name)
                raise
            found = launch.records(run_dir)
            result = launch.collect(run_dir, options, ended, found)
            return self.record_processes(run.name, result, found), ended

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

    def _withdraw(self, name: str) -> None:
        """Remove the reservation of a run that never happened, with the folder made for it."""
        with held_interrupts():
            try:
                self.runs.remove(name, files=True)
            except NpumagicError:  # a folder npumagic did not create stays
                self.runs.remove(name)
            self._unclosed.pop(name, None)

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
            except UnknownRun:  # withdrawn: it never ran
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
        was_baseline = self.runs.baseline == name
        old = self.store.get(name)
        default = self.output_dir / file_stem(name)
        try:  # the old files go only when npumagic created them in their default place
            self.runs.remove(name, files=old.kind == "profile" and old.run_dir is not None and Path(old.run_dir) == default)
        except NpumagicError:
            self.runs.remove(name)  # kept on disk; the new run keeps its own directory
        if moved and not default.exists() and run_dir.is_dir():
            run_dir = Path(shutil.move(str(run_dir), str(default)))
        self.store.rename(new, name, run_dir=str(run_dir))
        if was_baseline:
            self.runs.baseline = name
        return run_dir

    def load(self, path: str | Path, name: str | None = None, every_rank: bool = False,
             rank: int | None = None) -> RunOutcome:
        """Import a profiler output directory collected elsewhere as a run, named ``name`` or
        after the directory (``level1``; ``level1-2`` when that is taken), describing ``rank``
        (default the lowest); ``every_rank``: read every rank of a many-rank job in full (see
        :func:`npumagic.analysis.job.analyze`)."""
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
            trace, summary = job.read(path, rank=rank, scheduler=self.scheduler, progress=True,
                                           every_rank=every_rank)
        except ValueError as exc:  # a rank the job does not hold
            raise NpumagicError(str(exc)) from None
        meta = summary.meta if summary is not None else trace.meta.as_dict()
        wanted = name or name_for(path)
        with self._recording(wanted, kind="load", backend=meta.get("backend"), device=meta.get("device_name"),
                             source=f"%npuload {path}", arguments={"path": str(path)},
                             environment=meta.get("environment", {})) as run:
            self.store.update(run.name, run_dir=str(path))
            notes = [f"{wanted} is taken: this run is {run.name}"] if run.name != wanted else []
            return self._record(run.name, "ok", path, None, notes, trace=trace, summary=summary, rank=rank)

    def _record(self, name: str, status: str, run_dir: Path, result: CaptureResult | None, notes: list[str],
                trace: "analysis.Trace | None" = None, summary: Summary | None = None,
                rank: int | None = None) -> RunOutcome:
        verdict, unfinished = None, []
        message = "; ".join(notes[1:]) if result else None
        if result is not None and result.dataloaders:  # before the verdict: Verify's "what changed" reads them
            self.store.update(name, dataloaders=result.dataloaders)
        # before the verdict too: the steps the profiler did not record, beside those it did (what
        # profiling costs), and other processes on the device (what the step times can be trusted for)
        self.store.update(name, step_times=result.step_times if result is not None else {},
                          device_neighbours=result.device_neighbours if result is not None else [])
        try:
            if trace is None and summary is None and result is not None and result.trace_files:
                trace = analysis.load(run_dir)
                if 0 < result.recorded < len(trace.steps):  # the profiler stopped inside a step
                    trace, seen = trace.first_steps(result.recorded), trace.steps["step"].tolist()
                    unfinished = sorted(set(seen) - set(trace.steps["step"]))
                    ended = "failed" if result.error is not None else "ended"
                    if unfinished:  # several ranks: each has its steps, none is left out
                        notes.append(f"step {', '.join(map(str, unfinished))} left out: {say('profiled')} {ended} "
                                     "inside it")
            if trace is not None:
                summary = analysis.summarize(trace, rank=rank)
            if summary is not None:
                self.runs.keep(name, summary=summary)
                against = self.runs.against_baseline(name, summary)
                # with the baseline's Summary, Verify sets the prediction of the fix this run applied (read from what
                # changed, else the baseline's Next change) beside what this run achieved
                base = self.runs.baseline if against is not None else None
                verdict = checklist(summary, run_name=name, stored_at=str(self.store.path), comparison=against,
                                    baseline=self.runs.summary(base) if base else None, facts=self.runs.facts(name),
                                    applied=self.runs.applied(base, name, summary) if base else None)
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
            verdict=verdict_record(verdict, alert.to_dict() if alert else None) if verdict is not None else {},
        )
        self._unclosed.pop(name, None)
        if self.runs.baseline is None and summary is not None and status == "ok" and result is not None:
            self.runs.baseline = name  # a capture of this session, never an imported job
        if trace is not None:
            self.runs.keep(name, trace=trace)
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

