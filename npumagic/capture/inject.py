"""The capture inside a command that ``npumagic run`` starts, armed at interpreter start-up by
the bootstrap's sitecustomize (see :mod:`npumagic.capture.launch`).

The bootstrap arms it at the first ``optimizer.step()``, or when the script imports npumagic
(to call ``npumagic.step()``): an interpreter that never does (torchrun's launcher, a DataLoader
worker) never imports npumagic. The first step boundary (``optimizer.step()`` or ``npumagic.step()``) starts the
clock, as the start of a ``%%npuprofile`` cell does: the script's set-up before it (imports,
model building) is not a step. From there the schedule runs as in a cell. Each process writes
what it saw as JSON into ``RUN_DIR/npumagic_processes/PID.json`` when its window closes and
again at exit; the parent reads those beside the traces.

On demand, no clock runs until ``npumagic trigger`` writes the control file; each process
looks at it (one ``os.stat``) at every step boundary, never from a signal handler, and
captures its next steps into ``RUN_DIR/trigger-ID``."""

from __future__ import annotations

import atexit
import importlib.abc
import importlib.util
import json
import os
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from . import host as _host
from . import steps as _steps
from .options import CaptureOptions

ENV = "NPUMAGIC_RUN"
PROCESSES = "npumagic_processes"  # one JSON per process that stepped
CONTROL = "npumagic_trigger.json"  # written by `npumagic trigger`: {"id": K, "steps": N}
TRIGGER_DIR = "trigger-{}"


@dataclass(frozen=True)
class Config:
    """What the parent tells the command's interpreters (as JSON in :data:`ENV`)."""

    run_dir: str
    options: dict
    on_demand: bool = False
    backend: str | None = None
    timing: dict | None = None  # npumagic ab: {"skip": N, "steps": M}, steps timed with no profiler (capture.timed)

    def to_env(self) -> str:
        return json.dumps(self.__dict__)

    @classmethod
    def from_env(cls, text: str) -> "Config":
        return cls(**json.loads(text))


def rank() -> int:
    """This process's rank as torchrun (or mpirun / SLURM through torch) sets it; 0 alone."""
    for key in ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        value = os.environ.get(key, "")
        if value.isascii() and value.isdigit() and len(value) < 10:  # "²".isdigit() is True too
            return int(value)
    return 0


def write_json(path: Path, payload: dict) -> None:
    """Write ``payload`` so a reader never sees half of it and no link planted beside it (at
    the temporary name of this or the next pid) is followed: see :func:`npumagic.safeio.write_atomic`."""
    from ..safeio import write_atomic

    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(payload, default=str))


def created(pid: int | None = None) -> float | None:
    """When process ``pid`` (default this one) started, as psutil says: with its pid, what
    tells it from a later process given the same pid. None where psutil cannot say."""
    try:
        import psutil

        return psutil.Process(pid).create_time()
    except Exception:  # noqa: BLE001 - psutil missing where the command runs, or the process gone
        return None


class _AfterImport(importlib.abc.MetaPathFinder):
    """Calls ``then(module)`` right after module ``name`` has been executed (once)."""

    def __init__(self, name: str, then: Callable[[Any], None]) -> None:
        self.name, self.then = name, then

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)  # by every finder (an editable install has its own)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run, then = spec.loader.exec_module, self.then

        def exec_module(module):
            run(module)
            try:
                then(module)
            except Exception as exc:  # noqa: BLE001 - the training runs on unprofiled
                print(f"npumagic: the capture could not be armed ({type(exc).__name__}: {exc})", file=sys.stderr)

        spec.loader.exec_module = exec_module
        return spec


class Injected:
    """The capture of one process: step boundaries in, the scheduled profiler driven by a
    :class:`~npumagic.capture.steps.StepClock` per window, each window's record out."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.options = CaptureOptions(**{**config.options, "activities": _tuple(config.options.get("activities")),
                                         "host_sys": _tuple(config.options.get("host_sys")),
                                         "export": _tuple(config.options.get("export")) or ("text",)})
        self.run_dir = Path(config.run_dir)
        self.control = self.run_dir / CONTROL
        self.clock: _steps.StepClock | None = None
        self.window_dir: Path | None = None
        self.started = 0.0
        self.finished = False  # the one window of a plain run is done
        self.seen_control: tuple | None = None
        self.handled: int | None = None  # the last trigger id this process captured
        self.sampler = None
        self.backend = None
        self.notes: list[str] = []
        self.loaders: list[dict] = []
        self.error: str | None = None
        self.boundaries = 0
        self.broken = False  # a failure in the capture: this process records nothing more
        self.stopped: str | None = None  # why
        self.trigger: int | None = None
        self.window_options = self.options
        self.created = created()  # with the pid in each record: the parent tells this process from a later one

    # -- arming -----------------------------------------------------------------------------
    def install(self, hook: bool = True, seen_loaders: list = ()) -> None:
        """Hook the optimizers (unless the caller's own hook calls :meth:`optimizer_step`, as
        the bootstrap's does), npumagic.step(), and the DataLoader; ``seen_loaders``: the
        DataLoaders iterated before (the bootstrap notes them)."""
        if hook:
            _steps.optimizer_hook(self)
        loaders = sys.modules.get("torch.utils.data.dataloader")
        if loaders is not None and hasattr(loaders, "DataLoader"):
            self._watch_loaders(loaders)
        else:
            sys.meta_path.insert(0, _AfterImport("torch.utils.data.dataloader", self._watch_loaders))
        from .dataloaders import describe

        for loader in seen_loaders:
            if describe(loader) not in self.loaders:
                self.loaders.append(describe(loader))
        _steps.activate(self)  # npumagic.step() in the script reaches explicit_step()
        hook = sys.excepthook

        def excepthook(kind, value, tb):
            self.error = f"{kind.__name__}: {value}"[:2000]
            hook(kind, value, tb)

        sys.excepthook = excepthook
        atexit.register(self.close)
        if self.config.on_demand:
            # a trigger sent before this process's first step is taken at that step, unless the
            # job's other processes have closed its window already (this one started after it)
            order = _read_order(self.control)
            if order is not None and _window_closed(self.run_dir / TRIGGER_DIR.format(order[0])):
                self.seen_control, self.handled = _stamp(self.control), order[0]

    def _watch_loaders(self, module) -> None:
        from .dataloaders import recording

        self._recording = recording(module.DataLoader)
        self.loaders = self._recording.__enter__()

    # -- step boundaries (the StepClock's interface, as npumagic.step() and the hook call it) --
    def explicit_step(self) -> None:
        self._boundary(explicit=True)

    def optimizer_step(self) -> None:
        self._boundary(explicit=False)

    def _boundary(self, explicit: bool) -> None:
        self.boundaries += 1
        if self.broken:
            return
        try:
            self._step(explicit)
        except Exception as exc:  # noqa: BLE001 - the training goes on; the run says why it has no trace
            self._give_up(f"{type(exc).__name__}: {exc}")

    def _give_up(self, why: str) -> None:
        """Stop capturing in this process for good, saying why once, and keep the training going."""
        self.broken, self.stopped = True, why
        print(f"npumagic: capture stopped in this process ({why}); the training goes on unprofiled", file=sys.stderr)
        clock, self.clock = self.clock, None
        if clock is not None:
            try:
                clock.stop()
            except Exception:  # noqa: BLE001
                pass
        self.window_dir = self.window_dir or self.run_dir
        try:
            self._write("done", clock)
        except Exception:  # noqa: BLE001 - the window's folder cannot be written: said above, training goes on
            pass

    def _step(self, explicit: bool) -> None:
        clock = self.clock
        if clock is None:
            if self.config.on_demand:
                self._poll()
            elif not self.finished:
                self._start(self.run_dir, self.options, explicit)
            return
        clock.explicit_step() if explicit else clock.optimizer_step()
        if clock.done:
            self._end_window()

    def _poll(self) -> None:
        stamp = _stamp(self.control)
        if stamp is None or stamp == self.seen_control:
            return
        self.seen_control = stamp
        order = _read_order(self.control)
        if order is None:
            return  # not a trigger npumagic wrote (said once); a new one replaces it
        trigger, count = order
        if trigger == self.handled:
            return
        self.handled = trigger
        options = CaptureOptions(**{**self.options.as_dict(), "steps": count, "repeat": 1, "skip_first": 0,
                                    "activities": self.options.activities, "host_sys": self.options.host_sys,
                                    "export": self.options.export})
        self._start(self.run_dir / TRIGGER_DIR.format(trigger), options, explicit=False, trigger=trigger)

    def _start(self, run_dir: Path, options: CaptureOptions, explicit: bool, trigger: int | None = None) -> None:
        if _profiler_running():
            raise RuntimeError("the script runs its own torch.profiler session; starting npumagic's would end it")
        if self.backend is None:
            from .backends import choose_backend

            choice = choose_backend(self.config.backend)
            self.backend = choice.backend
            self.notes = [str(choice)] + self.backend.notes(options)
        run_dir.mkdir(parents=True, exist_ok=True)
        self.window_dir, self.trigger, self.window_options = run_dir, trigger, options
        self.started = time.time()
        clock = _steps.StepClock(self.backend.profiler(options, run_dir), options, explicit=explicit)
        if options.host and rank() == 0 and _host.available():  # one sampler per host's run: the lowest rank's
            self.sampler = _host.HostSampler()
            clock.on_action = self.sampler.follow
        self.clock = clock
        clock.begin()
        self._write("running")

    def _end_window(self) -> None:
        clock, self.clock = self.clock, None
        clock.stop()
        if self.sampler is not None:
            self.sampler.stop()
            try:
                self.sampler.write(self.window_dir)
            except OSError:
                pass
            self.sampler = None
        self._write("done", clock)
        self.finished = True

    def close(self) -> None:
        """At exit: close a window still open (its profiler writes its trace now) and write the
        last record."""
        if self.clock is not None:
            clock = self.clock
            try:
                self._end_window()
            except BaseException as exc:  # noqa: BLE001 - the record must still be written
                self.error = self.error or (f"the profiler did not finish writing its trace "
                                            f"({type(exc).__name__}: {exc})")
                self._write_at_exit(clock)
        elif self.window_dir is not None and not self.config.on_demand:
            self._write_at_exit(None)  # the steps seen after the window

    def _write_at_exit(self, clock: "_steps.StepClock | None") -> None:
        try:
            self._write("done", clock)
        except Exception as exc:  # noqa: BLE001 - the command's own exit comes first
            print(f"npumagic: the capture's record could not be written ({type(exc).__name__}: {exc})",
                  file=sys.stderr)

    def _write(self, state: str, clock: "_steps.StepClock | None" = None) -> None:
        from .runner import recorded

        steps = clock.steps if clock is not None else None
        path = self.window_dir / PROCESSES / f"{os.getpid()}.json"
        payload = None
        if clock is None and state == "done":
            payload = _own_record(path)
        if payload is None:
            backend = self.backend
            payload = {"pid": os.getpid(), "created": self.created, "host": socket.gethostname(), "rank": rank(),
                       "trigger": self.trigger,
                       "backend": getattr(backend, "name", None), "device": getattr(backend, "device_name", None),
                       "versions": backend.versions() if backend else {}, "notes": self.notes, "started": self.started,
                       "steps": steps or 0, "recorded": recorded(self.window_options, steps or 0),
                       "wanted": self.window_options.recorded_steps}
        payload.update(state=state, error=self.error, stopped=self.stopped, dataloaders=list(self.loaders),
                       boundaries=self.boundaries,
                       finished=time.time())
        write_json(path, payload)


def _profiler_running() -> bool:
    import torch

    try:
        return bool(torch._C._autograd._profiler_enabled())
    except (AttributeError, RuntimeError):
        return False


def _tuple(value) -> tuple | None:
    return tuple(value) if value else None


def _stamp(path: Path) -> tuple | None:
    """What changes when the control file is replaced (the trigger writes a new file each time)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def _read_order(path: Path) -> tuple[int, int] | None:
    """The trigger's (id, steps) in the control file; None when there is none, or it is not one
    npumagic wrote (said once on stderr: a planted file never stops the training)."""
    from .jobfiles import TRIGGER_FIELDS, BadFile, read_record, said_once

    try:
        order = read_record(path, TRIGGER_FIELDS, "a trigger")
    except FileNotFoundError:
        return None
    except BadFile as exc:
        said_once(exc, "ignored", stderr=True)
        return None
    return order["id"], order["steps"]


def _window_closed(window: Path) -> bool:
    """Whether some process of the job has closed trigger window ``window`` (a done record)."""
    from .jobfiles import PROCESS_FIELDS, BadFile, read_record

    for path in sorted((window / PROCESSES).glob("*.json")):
        try:
            if read_record(path, PROCESS_FIELDS, "a process record")["state"] == "done":
                return True
        except (OSError, BadFile):
            continue
    return False


def _own_record(path: Path) -> dict | None:
    """This process's record as it last wrote it; None when it is gone or not one (replaced)."""
    from .jobfiles import PROCESS_FIELDS, BadFile, read_record

    try:
        return read_record(path, PROCESS_FIELDS, "a process record")
    except (OSError, BadFile):
        return None


def arm_from_environment(hook: bool = True, seen_loaders: list = ()):
    """Arm this interpreter from :data:`ENV` (set by ``npumagic run``, or ``npumagic ab``: a
    :class:`~npumagic.capture.timed.TimedSteps`); None where it is unset.
    ``hook`` and ``seen_loaders``: see :meth:`Injected.install`."""
    text = os.environ.get(ENV)
    if not text:
        return None
    config = Config.from_env(text)
    if config.timing is not None:
        from .timed import TimedSteps

        injected = TimedSteps(config.run_dir, int(config.timing["skip"]), int(config.timing["steps"]), rank())
    else:
        injected = Injected(config)
    injected.install(hook=hook, seen_loaders=seen_loaders)
    return injected
