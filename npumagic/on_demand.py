"""An on-demand job (``npumagic run --on-demand``): the command runs with the capture armed but
idle; each ``npumagic trigger`` makes it capture its next N steps into ``JOB_DIR/trigger-ID``,
and each such window becomes a run in the history as soon as every process has closed it.

The job's folder is read while the training runs, and anyone who can write it may put anything
there: what is not a window or a record npumagic wrote is skipped and said once, and a window
that cannot be recorded is said once too; neither ever stops the command."""

from __future__ import annotations

import dataclasses
import os
import sys
import shlex
import time
from pathlib import Path
from typing import Callable

from .capture import CaptureOptions
from .capture import launch
from .capture.backends import environment_snapshot
from .capture.inject import TRIGGER_DIR, Config, created, write_json
from .names import check_name, file_stem
from .recorder import RunOutcome
from .session import Session


def run_on_demand(session: Session, argv: list[str], options: CaptureOptions, name: str | None = None,
                  output=None, forward_interrupt: bool = False,
                  shown: Callable[[RunOutcome], None] | None = None,
                  started: Callable[[Path], None] | None = None) -> tuple[list[RunOutcome], launch.Ended]:
    """Run ``argv`` as an on-demand job in a new folder of ``session.output_dir``; record each
    triggered window as a run (``NAME.ID``, or ``runN`` without a name), handing each to
    ``shown`` as it is recorded. ``started(job_dir)`` is called before the command starts."""
    launch.check_command(argv)
    if name is not None:
        check_name(name)
    job_dir = _new_folder(session.output_dir, file_stem(name or "on-demand"))
    # the pid with its start time: `npumagic trigger` never takes a later process given this pid for the job
    write_json(job_dir / launch.JOB_FILE, {"pid": os.getpid(), "started": created(), "command": list(argv),
                                           "steps": options.steps, "output_dir": str(session.output_dir),
                                           "created": time.time()})
    if started is not None:
        started(job_dir)
    recorded: dict[int, RunOutcome] = {}
    failed: set[int] = set()

    def record(ended: launch.Ended | None) -> None:
        for trigger, folder in launch.windows(job_dir):
            if trigger in recorded or trigger in failed:
                continue
            try:
                found = launch.records(folder)
                if not found or (ended is None and not _closed(found, job_dir)):
                    continue
                recorded[trigger] = _record(session, argv, options, name, trigger, folder, found, ended)
            except Exception as exc:  # noqa: BLE001 - the training must go on: the window is said lost, once
                failed.add(trigger)
                print(f"npumagic: trigger {trigger}'s window ({folder}) could not be recorded "
                      f"({type(exc).__name__}: {exc}); the job runs on", file=sys.stderr, flush=True)
                continue
            if shown is not None:
                try:
                    shown(recorded[trigger])
                except Exception as exc:  # noqa: BLE001 - it is recorded; showing it must not stop the job
                    print(f"npumagic: {recorded[trigger].run.name} is recorded but could not be shown "
                          f"({type(exc).__name__}: {exc})", file=sys.stderr, flush=True)

    config = Config(str(job_dir), options.as_dict(), on_demand=True, backend=session.recorder.prefer_backend)
    ended = launch.run(argv, launch.environment(config), output=output, tick=lambda: record(None),
                       forward_interrupt=forward_interrupt)
    record(ended)
    _untaken(job_dir, set(recorded) | failed)
    return [recorded[k] for k in sorted(recorded)], ended


def _new_folder(root: Path, stem: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for i in range(1, 10000):
        folder = root / (stem if i == 1 else f"{stem}-{i}")
        try:
            folder.mkdir()
            return folder
        except FileExistsError:
            continue
    raise FileExistsError(root / stem)


def _closed(found: list[dict], job_dir: Path) -> bool:
    """Whether every process of the job that is still running has closed this window (a rank
    that has not yet seen the trigger has not written its record)."""
    known = {(r["pid"], r.get("created")) for _, folder in launch.windows(job_dir) for r in launch.records(folder)}
    done = {r["pid"] for r in found if r["state"] == "done"}
    return all(pid in done or not launch.process_alive(pid, started) for pid, started in known)


def _untaken(job_dir: Path, recorded: set[int]) -> None:
    """Say which triggers the job ended without capturing (sent before a step it never reached)."""
    for ident in range(1, launch.sent_trigger(job_dir) + 1):
        if ident not in recorded:
            print(f"npumagic: trigger {ident} captured nothing: no process of the job reached a step boundary "
                  "(optimizer.step() or npumagic.step()) after it was sent", file=sys.stderr, flush=True)


def _record(session: Session, argv: list[str], options: CaptureOptions, name: str | None, trigger: int,
            folder: Path, found: list[dict], ended: launch.Ended | None) -> RunOutcome:
    wanted = max(1, int(found[0].get("wanted") or options.steps))
    window = dataclasses.replace(options, steps=wanted, repeat=1, skip_first=0)
    # the trigger's id is in run_dir, not here: two windows of one job differ in nothing they ran with
    arguments = dict(window.as_dict(), name=name, command=list(argv), cwd=os.getcwd(), on_demand=True)
    reserved = session.store.reserve(f"{name}.{trigger}" if name else None, next_free=True, source=shlex.join(argv),
                                     arguments=arguments, environment=environment_snapshot())
    session.store.update(reserved, run_dir=str(folder), run_dir_owned=True)
    # a window the job closed is complete whatever the job did later; one it left open is cut short
    complete = all(r.get("recorded", 0) >= r.get("wanted", wanted) for r in found)
    result = launch.collect(folder, window, None if complete else ended, found)
    return session.recorder.record_processes(reserved, result, found)


def attach(job_dir: str | Path, steps: int | None = None, timeout: float = 600) -> tuple[Path, str]:
    """Trigger the on-demand job of ``job_dir`` (its next ``steps`` steps, default the job's
    --steps) and wait until the window is recorded; return the job's output directory and the
    run's name. NpumagicError when there is no job, it has ended, or ``timeout`` s pass."""
    from .errors import NpumagicError
    from .named_runs import NamedRuns

    job_dir = Path(job_dir).resolve()
    job = launch.job_info(job_dir, wait=launch.JOB_START_WAIT)
    ident = launch.trigger(job_dir, steps if steps is not None else job["steps"])
    window, out = str(job_dir / TRIGGER_DIR.format(ident)), Path(job["output_dir"])
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (out / "history.sqlite").is_file():
            named = [r.name for r in NamedRuns(out, create=False).records() if r.run_dir == window]
            if named:
                return out, named[0]
        if not launch.job_alive(job):
            raise NpumagicError(f"{job_dir}: the job ended before trigger {ident} was recorded")
        time.sleep(0.2)
    raise NpumagicError(f"{job_dir}: trigger {ident} not recorded after {timeout:.0f} s (is the job still stepping?)")
