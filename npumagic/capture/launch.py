"""Run a command unmodified under npumagic's capture (``npumagic run``, ``%npurun``): the
parent side of :mod:`npumagic.capture.inject`.

The command starts with the bootstrap folder first on its ``PYTHONPATH`` (torchrun hands it on
to every rank) and the capture's settings in ``NPUMAGIC_RUN``; every SIGINT meant for it reaches
it once (on a terminal it stays in npumagic's process group, so a Ctrl-C reaches it as it would
without npumagic; elsewhere npumagic passes the signals it gets on to it, see :class:`_Signals`),
while npumagic waits for it to finish writing its traces. Afterwards the run directory's per-process records
say what each process saw; :func:`collect` turns them into a :class:`CaptureResult`."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Callable

from ..errors import NpumagicError
from .inject import CONTROL, ENV, PROCESSES, TRIGGER_DIR, Config, write_json
from .jobfiles import COUNT_MAX, ID_MAX, JOB_FIELDS, PROCESS_FIELDS, TRIGGER_FIELDS, BadFile, read_record, said_once
from .options import CaptureOptions
from .runner import CaptureResult

BOOTSTRAP = Path(__file__).resolve().with_name("bootstrap")  # holds the sitecustomize.py
PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the folder that holds this npumagic
JOB_FILE = "npumagic_job.json"  # an on-demand job's pid and command, for `npumagic trigger`
JOB_START_WAIT = 20.0  # s `npumagic trigger` waits for a job not written yet (`npumagic run --on-demand ... &`: its start-up imports take seconds on a busy machine)


class CommandEnded(NpumagicError):
    """The command exited with a non-zero status or was interrupted (the run's error)."""


def check_command(argv: list[str]) -> None:
    """NpumagicError unless ``argv`` names a program that can be started: refused before a run
    is recorded, since a command that never ran is no failed run."""
    if not argv:
        raise NpumagicError("no command given: npumagic run [options] -- CMD ARGS...")
    program = argv[0]
    if os.sep not in program and not (os.altsep and os.altsep in program):
        if shutil.which(program) is None:
            raise NpumagicError(f"command not found: {program!r}")
        return
    if not os.path.exists(program):
        raise NpumagicError(f"{program}: no such file")
    if os.path.isdir(program):
        raise NpumagicError(f"{program}: a directory, not a program")
    if not os.access(program, os.X_OK):
        raise NpumagicError(f"{program}: not executable (no execute permission): chmod +x it, or name its "
                            f"interpreter before it (python {program})")


def environment(config: Config, base: dict[str, str] | None = None) -> dict[str, str]:
    """The command's environment: ``base`` (default this process's) with the bootstrap first on
    PYTHONPATH, the capture's settings, and where this npumagic lives."""
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = os.pathsep.join([str(BOOTSTRAP)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env[ENV] = config.to_env()
    env["NPUMAGIC_PATH"] = str(PACKAGE_ROOT)
    return env


@dataclass(frozen=True)
class Ended:
    """How the command ended."""

    returncode: int
    interrupted: bool  # a Ctrl-C reached it (or npumagic) while it ran
    seconds: float

    @property
    def status(self) -> str:
        if self.interrupted or self.returncode in (-signal.SIGINT, 128 + signal.SIGINT):
            return "interrupted"
        return "ok" if self.returncode == 0 else "failed"

    @property
    def exit_status(self) -> int:
        """npumagic's own exit status: the command's, a signal as a shell reports it (128 + N)."""
        return self.returncode if self.returncode >= 0 else 128 - self.returncode

    def describe(self) -> str:
        if self.returncode < 0:
            return f"was stopped by {signal.Signals(-self.returncode).name}"
        return f"exited with status {self.returncode}"


def run(argv: list[str], env: dict[str, str], output: IO[str] | None = None,
        tick: Callable[[], None] | None = None, forward_interrupt: bool = False) -> Ended:
    """Run ``argv`` to its end and say how it ended.

    ``output``: copy the command's stdout and stderr there line by line (default: they are this
    process's). ``tick``: called about every 0.2 s while it runs. Every SIGINT npumagic gets
    reaches the command once (:class:`_Signals`): from a terminal, whose Ctrl-C the command
    gets with npumagic's process group, npumagic only notes it and keeps waiting while the
    command stops; one sent to npumagic alone (``kill -INT PID``) is passed on. With
    ``forward_interrupt`` (a notebook kernel) the command runs in a process group of its own and
    npumagic sends it the SIGINT it gets, once: Jupyter interrupts the kernel's whole group,
    which would otherwise give the command a second one in the middle of its clean-up.
    Raises :class:`CannotStart` when the command cannot be started at all.
    """
    started = time.perf_counter()
    pipe = subprocess.PIPE if output is not None else None
    main = threading.current_thread() is threading.main_thread()
    signals = _Signals.choose() if main and not forward_interrupt else None
    if signals is not None:
        signals.install()  # before the command starts: a Ctrl-C at its start is not lost
    try:
        proc = subprocess.Popen(argv, env=env, stdout=pipe, stderr=subprocess.STDOUT if pipe else None,
                                text=True, errors="replace", bufsize=1, start_new_session=forward_interrupt,
                                **(signals.popen_options() if signals is not None else {}))
    except OSError as exc:  # no exec bit, a directory, no interpreter for its #! line
        if signals is not None:
            signals.restore()
        raise CannotStart(f"{argv[0]}: cannot be started ({exc.strerror or exc})") from None
    except BaseException:
        if signals is not None:
            signals.restore()
        raise
    interrupted, pump = [], None
    try:
        if signals is not None:
            signals.watch(proc)  # from here the command, not npumagic, answers a signal
        if output is not None:
            pump = threading.Thread(target=_copy, args=(proc.stdout, output), daemon=True)
            pump.start()
        while proc.poll() is None:
            try:
                if signals is not None:
                    signals.wait(0.2)
                else:
                    proc.wait(timeout=0.2)
            except subprocess.TimeoutExpired:
                pass
            except KeyboardInterrupt:  # a kernel's interrupt (forward_interrupt), or outside the main thread
                interrupted.append(signal.SIGINT)
                if proc.poll() is None:
                    proc.send_signal(signal.SIGINT)
                continue
            if tick is not None and proc.poll() is None:
                tick()
    finally:
        if signals is not None:
            signals.restore()
            interrupted += signals.interrupts
        if proc.poll() is None:  # npumagic itself is failing (or a kernel shutting down): no orphan left
            proc.kill()
            proc.wait()
        if pump is not None:
            pump.join(timeout=5)
    return Ended(proc.returncode, bool(interrupted), time.perf_counter() - started)


class CannotStart(NpumagicError):
    """The command could not be started (no exec bit, a directory, a missing interpreter): no
    run happened, so none is recorded."""


# what a supervisor passes on to the command it runs in a process group of its own
FORWARDED = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")
                  if hasattr(signal, name))
SI_KERNEL = 0x80  # siginfo's si_code of a signal the kernel sent: a terminal's Ctrl-C (Linux)


@dataclass
class _Signals:
    """How a command run from the CLI gets the signals meant for it, each once.

    On a terminal (npumagic in its foreground process group) the command stays in npumagic's
    group, so a Ctrl-C, Ctrl-Z or Ctrl-\\ reaches it as without npumagic and job control works;
    npumagic passes on only a SIGINT sent to it by a process (``kill -INT PID``: siginfo tells
    it from the terminal's, where ``signal.sigtimedwait`` exists). Elsewhere (CI, a container,
    a job scheduler, a harness: no terminal sends to a whole group) the command gets a process
    group of its own and npumagic passes on every SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and
    SIGUSR2 it gets to that group, so ``kill -INT PID`` and ``kill -INT -PGID`` (``timeout -s
    INT``) both reach the command once, and a ``kill -TERM -PGID`` still stops it."""

    terminal: bool
    interrupts: list = field(default_factory=list)  # SIGINTs that reached the command
    proc: subprocess.Popen | None = None
    previous: dict = field(default_factory=dict)
    early: list = field(default_factory=list)  # received before the command started: passed on when it has
    blocked: bool = False

    @classmethod
    def choose(cls) -> "_Signals":
        return cls(terminal=_in_terminal_foreground())

    def popen_options(self) -> dict:
        if self.terminal:
            return {}
        return {"process_group": 0} if sys.version_info >= (3, 11) else {"preexec_fn": os.setpgrp}

    def install(self) -> None:
        for signum in (signal.SIGINT,) if self.terminal else FORWARDED:
            handler = signal.getsignal(signum)
            if handler not in (None, signal.SIG_IGN):  # one set outside Python, or ignored, is left so
                self.previous[signum] = handler
                signal.signal(signum, self._received)

    def watch(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        if self.terminal and signal.SIGINT in self.previous and hasattr(signal, "sigtimedwait"):
            # blocked once the command has started (it would inherit the mask), so that wait()
            # reads each SIGINT's siginfo; the pump thread started after this inherits the mask
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
            self.blocked = True
        for signum in self.early:  # it was not there to get them
            self._interrupt(signum, from_terminal=False)
        self.early.clear()

    def wait(self, seconds: float) -> None:
        """Wait up to ``seconds`` for the command to end, passing on the signals meant for it."""
        if not self.blocked:
            try:
                self.proc.wait(timeout=seconds)
            except subprocess.TimeoutExpired:
                pass
            return
        info = signal.sigtimedwait({signal.SIGINT}, seconds)
        if info is not None:
            self._interrupt(signal.SIGINT, from_terminal=info.si_code == SI_KERNEL)

    def _received(self, signum, frame) -> None:
        if self.proc is None:
            self.early.append(signum)
        else:  # on a terminal without siginfo: taken as the terminal's, which the command has had
            self._interrupt(signum, from_terminal=self.terminal)

    def _interrupt(self, signum: int, from_terminal: bool) -> None:
        proc = self.proc
        if proc.poll() is not None:
            return  # it has ended (a signal still pending when the watch ends)
        if signum == signal.SIGINT:
            self.interrupts.append(signum)
        if from_terminal:
            return
        try:
            if self.terminal:
                proc.send_signal(signum)
            else:
                os.killpg(proc.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass  # it has just ended

    def restore(self) -> None:
        if self.blocked:
            # one still pending came as the command ended: taken now, not raised once the handler is restored
            while signal.sigtimedwait({signal.SIGINT}, 0) is not None:
                pass
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
            self.blocked = False
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)
        self.previous.clear()


def _in_terminal_foreground() -> bool:
    """Whether npumagic runs in the foreground process group of its controlling terminal (where
    a Ctrl-C goes to the whole group)."""
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY)
    except OSError:
        return False
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        return False
    finally:
        os.close(fd)


def _copy(source: IO[str], sink: IO[str]) -> None:
    for line in source:
        try:
            sink.write(line)
            sink.flush()
        except (OSError, ValueError):  # the sink's reader has gone: drain on, or the command blocks on a full pipe
            pass


def records(run_dir: Path) -> list[dict]:
    """What each process of the command wrote about its capture, lowest rank first. A file
    that is not such a record (planted, edited, another user's) is skipped and said once."""
    out = []
    folder = run_dir / PROCESSES
    if folder.is_symlink():
        said_once(BadFile(folder, "a symbolic link: its records are not this run's"))
        return out
    for path in sorted(folder.glob("*.json")):
        try:
            out.append(read_record(path, PROCESS_FIELDS, "a process record"))
        except FileNotFoundError:
            continue
        except BadFile as exc:  # an empty one is a process killed while writing: its trace says what it recorded
            said_once(exc)
    return sorted(out, key=lambda r: (r.get("rank", 0), r["pid"]))


def collect(run_dir: Path, options: CaptureOptions, ended: Ended | None, found: list[dict]) -> CaptureResult:
    """The capture the command's processes made in ``run_dir`` (``found``: their :func:`records`),
    judged as a cell's capture is: no step seen, none in the window, no trace, fewer steps
    than the schedule wanted. ``ended`` None: an on-demand window of a job still running."""
    lead = found[0] if found else {}
    steps, got, wanted = lead.get("steps", 0), lead.get("recorded", 0), lead.get("wanted", options.recorded_steps)
    status, error = "ok", None
    if ended is not None and ended.status != "ok":
        status, error = ended.status, CommandEnded(f"the command {ended.describe()}")
    loaders = [d for r in found for d in r.get("dataloaders", [])]
    result = CaptureResult(status, steps, got, ended.seconds if ended else 0.0, run_dir, error,
                           dataloaders=[d for i, d in enumerate(loaders) if d not in loaders[:i]])
    if ended is not None and status != "ok":
        result.messages.append(f"the command {ended.describe()}" + (f" ({lead['error']})" if lead.get("error") else ""))
    stopped = [r["stopped"] for r in found if r.get("stopped")]
    if stopped:
        result.messages.append(f"the capture stopped in {len(stopped)} process{'es' if len(stopped) > 1 else ''} "
                               f"and the command ran on unprofiled: {stopped[0]}")
    if status == "ok" and stopped and not result.trace_files:
        result.status = "no-trace"
    elif status == "ok" and not found:
        result.status = "no-steps"
        result.messages.append("no step boundary seen: no Python process of the command called optimizer.step() or "
                               "npumagic.step() (npumagic arms Python interpreters started with its PYTHONPATH)")
    elif status == "ok" and got == 0:
        result.status = "no-steps"
        result.messages.append(f"the command ended after {steps} steps, before the first active step (skip-first "
                               f"{options.skip_first} + wait {options.wait} + warmup {options.warmup}): nothing was "
                               "recorded; lower them or run more steps")
    elif status == "ok" and not result.trace_files:
        result.status = "no-trace"
        result.messages.append(f"no trace was written to {run_dir}: the profiler's trace handler failed (see the "
                               "command's output), or the disk is full")
    elif got < wanted:
        result.messages.append(f"{got} of {wanted} active steps recorded: the command ended after {steps} steps")
    return result


def job_info(run_dir: Path, wait: float = 0) -> dict:
    """An on-demand job's record (its pid, start time, command, --steps, output directory),
    checked; NpumagicError naming ``run_dir`` if there is none or it is not one npumagic wrote.
    ``wait``: seconds to wait for a job starting now (its folder not made yet, or made and still
    empty: the job file follows it a moment later)."""
    path = Path(run_dir) / JOB_FILE
    deadline = time.monotonic() + wait
    while _starting(Path(run_dir)) and time.monotonic() < deadline:
        time.sleep(0.1)
    try:
        return read_record(path, JOB_FIELDS, "an on-demand job file")
    except FileNotFoundError:
        pass
    except BadFile as exc:
        raise NpumagicError(f"{run_dir}: not a job npumagic started: {exc}") from None
    raise NpumagicError(f"{run_dir}: no on-demand job here (expected the run directory `npumagic run --on-demand` "
                        f"printed, holding {JOB_FILE})")


def _starting(run_dir: Path) -> bool:
    """Whether ``run_dir`` looks like a job folder about to be written: absent, empty, or
    holding only the job file's temporary name (:func:`npumagic.safeio.write_atomic` writes
    it there, then renames it into place)."""
    try:
        with os.scandir(run_dir) as entries:
            return all(_JOB_FILE_BEING_WRITTEN.fullmatch(entry.name) for entry in entries)
    except FileNotFoundError:
        return True
    except OSError:
        return False


_JOB_FILE_BEING_WRITTEN = re.compile(re.escape(f".{JOB_FILE}.") + r"[0-9a-f]+\.tmp")


def process_alive(pid: int, started: float | None) -> bool:
    """Whether process ``pid`` runs and is the one that started at ``started`` (seconds since
    the epoch, as psutil gives it; None: any process of that pid): a pid the system has given
    to a later process is not it."""
    import psutil

    try:
        now = psutil.Process(pid).create_time()
    except (psutil.Error, ValueError, OverflowError):
        return False
    return started is None or abs(now - started) < START_SLACK


START_SLACK = 1.0  # s: psutil derives start times from the boot time, which a clock step can move by a second


def job_alive(job: dict) -> bool:
    """Whether the npumagic process of an on-demand job (:func:`job_info`) still runs."""
    return process_alive(job["pid"], job["started"])


def windows(run_dir: Path) -> list[tuple[int, Path]]:
    """The trigger windows of an on-demand job's folder, by id: ``trigger-ID`` folders (real
    ones, not links, ID as npumagic writes it); anything else there is not one."""
    out = []
    for folder in Path(run_dir).glob(TRIGGER_DIR.format("*")):
        ident = folder.name.split("-", 1)[1]
        if re.fullmatch(r"[1-9][0-9]{0,8}", ident) and folder.is_dir() and not folder.is_symlink():
            out.append((int(ident), folder))
    return sorted(out)


def window_state(folder: Path) -> str:
    """Where trigger window ``folder`` stands: "waiting" (no process has taken it up yet),
    "recording" (a process that still runs has it open) or "closed"."""
    found = records(folder)
    if not found:
        return "waiting"
    if any(r["state"] != "done" and process_alive(r["pid"], r.get("created")) for r in found):
        return "recording"
    return "closed"


def sent_trigger(run_dir: Path) -> int:
    """The id of the last trigger sent to the job of ``run_dir`` (0: none yet)."""
    try:
        last = read_record(Path(run_dir) / CONTROL, TRIGGER_FIELDS, "a trigger")["id"]
    except FileNotFoundError:
        last = 0
    except BadFile as exc:
        said_once(exc, "ignored")
        last = 0
    return max([last] + [ident for ident, _ in windows(run_dir)])


def trigger(run_dir: Path, steps: int) -> int:
    """Ask the on-demand job of ``run_dir`` to capture its next ``steps`` steps; return the
    trigger's id (its window is ``RUN_DIR/trigger-ID``). One trigger at a time: NpumagicError
    while the last one's window is still to be taken up or recorded, and for the second of two
    sent at the same moment (each claims its window's folder first; one of them gets it)."""
    if not 1 <= steps <= COUNT_MAX:
        raise NpumagicError(f"--steps must be from 1 to {COUNT_MAX}, got {steps}")
    job = job_info(run_dir)
    if not job_alive(job):
        raise NpumagicError(f"{run_dir}: its job ({shlex.join(job['command'])}) has ended")
    last = sent_trigger(run_dir)
    if last:
        state = window_state(Path(run_dir) / TRIGGER_DIR.format(last))
        if state == "waiting":
            raise NpumagicError(f"{run_dir}: trigger {last} is still waiting for the job's next step (its processes "
                                "have not reached a step boundary since it was sent); send another once its window "
                                "is recorded")
        if state == "recording":
            raise NpumagicError(f"{run_dir}: trigger {last} is still recording its window; send another once it is "
                                "recorded")
    ident = last + 1
    if ident > ID_MAX:
        raise NpumagicError(f"{run_dir}: {ID_MAX} triggers sent; start the job again for more")
    try:
        (Path(run_dir) / TRIGGER_DIR.format(ident)).mkdir()
    except FileExistsError:
        raise NpumagicError(f"{run_dir}: another trigger ({ident}) was sent at the same moment; this one is not "
                            "sent") from None
    write_json(Path(run_dir) / CONTROL, {"id": ident, "steps": steps, "written": time.time()})
    return ident
