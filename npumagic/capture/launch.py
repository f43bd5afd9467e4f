"""Run a command unmodified under npumagic's capture (``npumagic run``, ``%npurun``): the
parent side of :mod:`npumagic.capture.inject`.

The command starts with the bootstrap folder first on its ``PYTHONPATH`` (torchrun hands it on
to every rank) and the capture's settings in ``NPUMAGIC_RUN``; it stays in npumagic's process
group, so a Ctrl-C at the terminal reaches it as it would without npumagic, while npumagic
waits for it to finish writing its traces. Afterwards the run directory's per-process records
say what each process saw; :func:`collect` turns them into a :class:`CaptureResult`."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
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
JOB_START_WAIT = 10.0  # s `npumagic trigger` waits for a job folder not made yet (`npumagic run --on-demand ... &`)


class CommandEnded(NpumagicError):
    """The command exited with a non-zero status or was interrupted (the run's error)."""


def check_command(argv: list[str]) -> None:
    """NpumagicError unless ``argv`` names a program that can be started."""
    if not argv:
        raise NpumagicError("no command given: npumagic run [options] -- CMD ARGS...")
    if os.sep not in argv[0] and shutil.which(argv[0]) is None:
        raise NpumagicError(f"command not found: {argv[0]!r}")


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
    process's). ``tick``: called about every 0.2 s while it runs. A Ctrl-C is the command's: a
    terminal sends it to the whole process group, so npumagic only notes it and keeps waiting
    while the command stops. With ``forward_interrupt`` (a notebook kernel) the command runs in a
    process group of its own and npumagic sends it the SIGINT it gets, once: Jupyter interrupts
    the kernel's whole group, which would otherwise give the command a second one in the middle
    of its clean-up.
    """
    started = time.perf_counter()
    pipe = subprocess.PIPE if output is not None else None
    proc = subprocess.Popen(argv, env=env, stdout=pipe, stderr=subprocess.STDOUT if pipe else None,
                            text=True, errors="replace", bufsize=1, start_new_session=forward_interrupt)
    pump = None
    if output is not None:
        pump = threading.Thread(target=_copy, args=(proc.stdout, output), daemon=True)
        pump.start()
    interrupted = []
    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGINT) if main and not forward_interrupt else None
    if previous is not None:
        signal.signal(signal.SIGINT, lambda signum, frame: interrupted.append(signum))
    try:
        while True:
            try:
                proc.wait(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                if tick is not None:
                    tick()
            except KeyboardInterrupt:
                interrupted.append(signal.SIGINT)
                if proc.poll() is None:
                    proc.send_signal(signal.SIGINT)
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        if proc.poll() is None:  # npumagic itself is failing (or a kernel shutting down): no orphan left
            proc.kill()
            proc.wait()
        if pump is not None:
            pump.join(timeout=5)
    return Ended(proc.returncode, bool(interrupted), time.perf_counter() - started)


def _copy(source: IO[str], sink: IO[str]) -> None:
    for line in source:
        sink.write(line)
        sink.flush()


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
    ``wait``: seconds to wait for a job starting now (its folder not made yet)."""
    path = Path(run_dir) / JOB_FILE
    deadline = time.monotonic() + wait
    while not Path(run_dir).exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    try:
        return read_record(path, JOB_FIELDS, "an on-demand job file")
    except FileNotFoundError:
        pass
    except BadFile as exc:
        raise NpumagicError(f"{run_dir}: not a job npumagic started: {exc}") from None
    raise NpumagicError(f"{run_dir}: no on-demand job here (expected the run directory `npumagic run --on-demand` "
                        f"printed, holding {JOB_FILE})")


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
