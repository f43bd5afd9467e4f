"""The host's own CPU while the profiler records: a background thread samples (every 50 ms)
this process's CPU % and RSS, the CPU % of the thread running the cell, of each child process
running our Python work (DataLoader workers, see :func:`is_worker`) and of every core, and writes
them beside the trace as ``npumagic_host.csv``, which the readers turn into counters (group "Host").

The profiler's traces say where the host spent its time, not whether it was saturated: a step
that waits while the main thread sits at 100% of a core is dispatch-bound, one whose DataLoader
workers each sit near 100% is decode-bound, one waiting with idle cores is waiting on I/O. Which
system call each worker's main thread blocks in (``/proc/PID/syscall``) tells idle workers apart: one
waiting for its next index (the queue of work empty: loading keeps up) from one whose sample waits
on a read or a sleep.

CPU times are read as cumulative counters (ns for the cell's thread, clock ticks elsewhere) and
turned into percent of one core over each interval, so a step's mean is exact however coarse
one sample is. Sampling runs only while the schedule records (``follow``), never outside.

Cost: the sampler shares the GIL with the cell. What a sample reads is cheap (on Linux ``/proc``
through file descriptors kept open, a few us, where psutil's calls cost 100-150 us each and
listing child processes scans every process; elsewhere psutil at the same pace); what costs is
the wake-up itself: the thread takes the GIL from a cell that dispatches operators, which then
waits to get it back. ``bench/overhead.py`` measured, within one recording profiler, +2.5% to
+3.6% per iteration of a small training loop at 10 ms, +1.8% at 20 ms and +0.9% at 50 ms
(an external process waking every 10 ms: +0.3%), hence :data:`INTERVAL_S`. Step means do not
depend on the period (the counters are cumulative); the lanes' resolution does.
"""

from __future__ import annotations

import logging
import os
import platform
import threading
import time
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

FILE_NAME = "npumagic_host.csv"
INTERVAL_S = 0.05  # within the 2% budget of the recording window (see above)
SLOW_S = 0.05  # per-core, per-worker (the kernel's 10 ms tick) and RSS reads at most this often
CHILDREN_EVERY_S = 0.5  # new DataLoader workers are found within this
RECORDING = frozenset({"RECORD", "RECORD_AND_SAVE"})  # torch's and torch_npu's ProfilerAction names
# The system calls that wait on file descriptors (poll, select, epoll and their p- forms), by machine: an
# idle DataLoader worker waits in one for its next index, on its index queue's pipe (x86_64's poll(fds, 1,
# 5000): torch's MP_STATUS_CHECK_INTERVAL). Any other system call it blocks in reads files, sleeps or waits
# on a lock: the batch's own waiting.
WAITS_ON_FDS = {"x86_64": frozenset({7, 23, 232, 270, 271, 281, 441}), "aarch64": frozenset({22, 72, 73, 441})}


# multiprocessing's own long-lived helpers: children of the kernel that run no user work (the
# resource tracker starts with the first spawned process, e.g. a Dask cluster, and stays)
HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver", "multiprocessing.semaphore_tracker")
FORKSERVER = "multiprocessing.forkserver"  # its children are the workers of the forkserver start method
SPAWNED = "multiprocessing.spawn"  # the command line of a child of the spawn start method


def is_helper(cmdline: str) -> bool:
    """Whether a child process with ``cmdline`` is one of multiprocessing's helpers, not a worker."""
    return any(helper in cmdline for helper in HELPERS)


def is_worker(cmdline: str, own: str) -> bool:
    """Whether a child process with ``cmdline`` runs this process's Python work (a DataLoader
    worker): forked (a fork keeps our command line) or started by multiprocessing's spawn. A
    program the kernel started with exec (a TensorBoard, ``!nvidia-smi``, a script of its own)
    runs none of it and gets no worker lane."""
    return not is_helper(cmdline) and (cmdline == own or SPAWNED in cmdline)


def worker_state(syscall: bytes, machine: str) -> str | None:
    """What a worker's main thread does, from its ``/proc/PID/syscall`` line: "running", "waiting" for
    work (blocked waiting on file descriptors, see :data:`WAITS_ON_FDS`) or "blocked" in another system
    call (reading, sleeping, a lock); None where the line or the machine does not say."""
    field = syscall.split(maxsplit=1)[0] if syscall else b""
    if field == b"running":
        return "running"
    polls = WAITS_ON_FDS.get(machine)
    try:
        number = int(field)
    except ValueError:
        return None
    if polls is None or number < 0:  # -1: blocked outside a system call (a zombie, a page fault)
        return None
    return "waiting" if number in polls else "blocked"


def _read_cmdline(pid: int | str) -> str:
    with open(f"/proc/{pid}/cmdline", "rb") as fh:
        return fh.read().replace(b"\0", b" ").decode(errors="replace")


def _cmdline(child) -> list[str]:
    try:
        return child.cmdline()
    except Exception:  # noqa: BLE001 - psutil.Error, or a process gone meanwhile
        return []


class _Proc:
    """Cheap reads of /proc (Linux): cumulative CPU seconds and RSS bytes."""

    def __init__(self) -> None:
        self.tick = float(os.sysconf("SC_CLK_TCK"))
        self.page = os.sysconf("SC_PAGE_SIZE")
        self.stat = os.open("/proc/stat", os.O_RDONLY)
        self.statm = os.open("/proc/self/statm", os.O_RDONLY)
        # pid -> fds of /proc/pid/stat, /proc/pid/schedstat and /proc/pid/syscall (-1 where the kernel has
        # none or does not let this process read it)
        self.children: dict[int, tuple[int, int, int]] = {}
        self.machine = platform.machine()
        self.others: set[int] = set()  # children that are no workers (see is_worker)
        self.forkservers: set[int] = set()
        self.own = _read_cmdline("self")

    @staticmethod
    def available() -> bool:
        return os.path.exists("/proc/self/task") and os.path.exists("/proc/stat")

    def rss(self) -> float:
        return float(int(os.pread(self.statm, 256, 0).split()[1]) * self.page)

    def cores(self) -> list[tuple[float, float]]:
        out = []
        for line in os.pread(self.stat, 1 << 20, 0).split(b"\n"):
            if line[:3] != b"cpu" or not line[3:4].isdigit():
                continue
            f = [int(x) for x in line.split()[1:9]]  # user nice system idle iowait irq softirq steal
            busy = f[0] + f[1] + f[2] + sum(f[5:8])  # guest time is already inside user
            out.append((float(busy), float(busy + f[3] + f[4])))
        return out

    @staticmethod
    def _children_of(pid: int | str) -> set[int]:
        pids: set[int] = set()
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/children", "rb") as fh:
                    pids.update(int(p) for p in fh.read().split())
            except OSError:
                continue
        return pids

    def list_children(self) -> None:
        pids = self._children_of("self")
        for server in self.forkservers & pids:  # the forkserver's children are our workers
            try:
                pids |= self._children_of(server)
            except OSError:
                continue
        for pid in set(self.children) - pids:
            _close(*self.children.pop(pid))
        for pid in pids - set(self.children) - self.others:
            try:
                cmdline = _read_cmdline(pid)
                if FORKSERVER in cmdline:
                    self.forkservers.add(pid)
                if not is_worker(cmdline, self.own) and not self._served(pid):
                    self.others.add(pid)
                    continue
                stat = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
            except OSError:
                continue
            self.children[pid] = (stat, _open_or_none(f"/proc/{pid}/schedstat"), _open_or_none(f"/proc/{pid}/syscall"))

    def _served(self, pid: int) -> bool:
        """Whether ``pid`` was forked by a forkserver of ours (it keeps the server's command line)."""
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                return int(fh.read().rsplit(b")", 1)[1].split()[1]) in self.forkservers
        except (OSError, IndexError, ValueError):
            return False

    def child_times(self) -> dict[int, float]:
        """Each worker's CPU seconds: its main thread's time on a core to the nanosecond (schedstat;
        a worker loads in its main thread), else the process's utime + stime in clock ticks (10 ms:
        a worker's CPU in a short step reads 0)."""
        out = {}
        for pid, (stat, sched, _) in list(self.children.items()):
            try:
                fields = os.pread(stat, 4096, 0).rsplit(b")", 1)[1].split()
                on_cpu = int(os.pread(sched, 256, 0).split()[0]) if sched >= 0 else None
            except (OSError, IndexError, ValueError):
                _close(*self.children.pop(pid))
                continue
            if not fields or fields[0] == b"Z":  # the process has exited (a zombie not yet reaped)
                _close(*self.children.pop(pid))
                continue
            out[pid] = on_cpu / 1e9 if on_cpu is not None else (int(fields[11]) + int(fields[12])) / self.tick
        return out

    def child_states(self) -> dict[int, str]:
        """What each worker's main thread does now (:func:`worker_state`), where the kernel says."""
        out = {}
        for pid, (_, _, syscall) in list(self.children.items()):
            try:
                state = worker_state(os.pread(syscall, 256, 0), self.machine) if syscall >= 0 else None
            except OSError:
                continue
            if state is not None:
                out[pid] = state
        return out

    def close(self) -> None:
        _close(self.stat, self.statm, *(fd for fds in self.children.values() for fd in fds))
        self.children.clear()


def _open_or_none(path: str) -> int:
    try:
        return os.open(path, os.O_RDONLY)
    except OSError:
        return -1


def _close(*fds: int) -> None:
    for fd in fds:
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass


class _Psutil:
    """The same reads through psutil, where /proc is not there."""

    def __init__(self) -> None:
        import psutil

        self.psutil = psutil
        self.process = psutil.Process()
        self.children: dict[int, Any] = {}

    def rss(self) -> float:
        return float(self.process.memory_info().rss)

    def cores(self) -> list[tuple[float, float]]:
        return [_core_times(c) for c in self.psutil.cpu_times(percpu=True)]

    def list_children(self) -> None:
        try:
            own = " ".join(_cmdline(self.process))
            workers = []
            for child in self.process.children(recursive=False):
                cmdline = " ".join(_cmdline(child))
                if FORKSERVER in cmdline:
                    workers += child.children(recursive=False)
                elif is_worker(cmdline, own):
                    workers.append(child)
            self.children = {c.pid: c for c in workers}
        except self.psutil.Error:
            self.children = {}

    def child_times(self) -> dict[int, float]:
        out = {}
        for pid, child in list(self.children.items()):
            try:
                t = child.cpu_times()
                out[pid] = t.user + t.system
            except self.psutil.Error:
                self.children.pop(pid, None)
        return out

    @staticmethod
    def child_states() -> dict[int, str]:
        return {}  # psutil does not say which system call a process waits in

    def close(self) -> None:
        self.children = {}


class HostSampler:
    """Samples host CPU and memory on a daemon thread while resumed.

    Parameters
    ----------
    interval : seconds between samples (default :data:`INTERVAL_S`).
    thread_id : ``threading.get_ident()`` of the thread running the cell (default: the caller's).
    """

    def __init__(self, interval: float | None = None, thread_id: int | None = None) -> None:
        self.interval = interval or INTERVAL_S
        self.slow_every = max(1, round(SLOW_S / self.interval))
        self.source = _Proc() if _Proc.available() else _Psutil()
        self.clock = _thread_clock(thread_id if thread_id is not None else threading.get_ident())
        self.waited = _run_delay(thread_id if thread_id is not None else threading.get_ident())
        self.rows: list[tuple] = []
        self._count = 0
        self._children_at = 0.0
        self._lock = threading.Lock()  # samples and breaks are appended in time order
        self._active = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.sample_seconds = 0.0  # time spent sampling, for the overhead benchmark

    # -- control ---------------------------------------------------------------------------
    def follow(self, action: Any, ahead: bool = False) -> None:
        """Sample while the profiler's ``current_action`` records; pause otherwise. ``ahead``: the
        action the next ``step()`` moves to, told before it runs: a pause then happens at the step
        boundary, before the profiler exports the cycle; a resume waits for the step to start."""
        recording = getattr(action, "name", str(action)) in RECORDING
        if recording and not ahead:
            self.resume()
        elif not recording:
            self.pause()

    def resume(self) -> None:
        if self._stopping.is_set():
            return
        if self._thread is None:
            thread = threading.Thread(target=self._run, name="npumagic-host-sampler", daemon=True)
            thread.start()
            self._thread = thread  # only once started: a Ctrl-C inside start() leaves nothing for stop() to join
        with self._lock:
            if not self._active.is_set():
                self._sample()  # opens the interval at once, not one period late
                self._active.set()

    def pause(self) -> None:
        with self._lock:
            if self._active.is_set():
                self._active.clear()
                self._sample()  # closes the last interval at the moment recording stopped
                self.rows.append(None)  # a break: no interval spans a pause

    def stop(self) -> None:
        """Stop sampling and end the thread (idempotent; called on every exit path)."""
        self.pause()
        self._stopping.set()
        self._active.set()  # wake the thread so it sees the stop
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        self.source.close()

    # -- sampling --------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stopping.is_set():
            self._active.wait()
            if self._stopping.is_set():
                break
            self._stopping.wait(self.interval)
            with self._lock:
                if self._active.is_set() and not self._stopping.is_set():
                    self._sample()

    def _sample(self) -> None:
        started = time.perf_counter()
        try:
            now = time.time_ns()
            # the process's CPU time to the nanosecond: os.times() counts 10 ms clock ticks, which
            # read a short capture's busy process as 0% beside its thread's 60%
            cpu = time.process_time()
            thread_ns = self.clock() if self.clock is not None else None
            wait_ns = self.waited() if self.waited is not None else None
            slow = None
            if self._count % self.slow_every == 0 or not self._active.is_set():  # and always at a start or a pause
                if started - self._children_at > CHILDREN_EVERY_S:
                    self._children_at = started
                    self.source.list_children()
                slow = (self.source.rss(), self.source.child_times(), self.source.cores(), self.source.child_states())
            self._count += 1
            self.rows.append((now, cpu, thread_ns, slow, wait_ns))
        except Exception:  # noqa: BLE001 - sampling must never break the user's cell
            log.debug("host sample failed", exc_info=True)
        self.sample_seconds += time.perf_counter() - started

    # -- output ----------------------------------------------------------------------------
    def table(self):
        """The readings in long form: ts_ns, name, value (one row per series read at a sample; see
        :mod:`npumagic.analysis.sources.host`). CPU series are percent of one core over the
        interval since that series' previous reading; NaN where a series opens or resumes."""
        import pandas as pd

        rows: list[tuple[int, str, float]] = []
        fast = slow = None  # the previous (ts, cpu, thread) and (ts, workers, cores) readings
        nan = float("nan")
        for row in self.rows:
            if row is None:
                fast = slow = None
                continue
            now, cpu, thread_ns, reading, wait_ns = row
            dt = (now - fast[0]) / 1e9 if fast is not None and now > fast[0] else None
            rows.append((now, "Process/CPU", 100.0 * (cpu - fast[1]) / dt if dt else nan))
            if thread_ns is not None:
                ok = dt and fast[2] is not None
                rows.append((now, "Main thread/CPU", 100.0 * (thread_ns - fast[2]) / 1e9 / dt if ok else nan))
            if wait_ns is not None:  # time the thread was runnable but waited for a core (contention)
                ok = dt and fast[3] is not None
                rows.append((now, "Main thread/wait", 100.0 * (wait_ns - fast[3]) / 1e9 / dt if ok else nan))
            fast = (now, cpu, thread_ns, wait_ns)
            if reading is None:
                continue
            rss, workers, cores, states = reading
            rows.append((now, "Process/RSS", rss))
            dt = (now - slow[0]) / 1e9 if slow is not None and now > slow[0] else None
            for pid, t in workers.items():
                ok = dt and pid in slow[1]
                rows.append((now, f"Worker {pid}/CPU", 100.0 * (t - slow[1][pid]) / dt if ok else nan))
            for i, (busy, total) in enumerate(cores):
                ok = dt and i < len(slow[2]) and total > slow[2][i][1]
                rows.append((now, f"Core {i}/CPU", 100.0 * (busy - slow[2][i][0]) / (total - slow[2][i][1]) if ok else nan))
            if states:
                rows += _state_rows(now, states, slow[3] if slow is not None and dt else None)
            slow = (now, workers, cores, states)
        return pd.DataFrame(rows, columns=["ts_ns", "name", "value"])

    def write(self, run_dir: Path) -> Path | None:
        """Write the samples to ``run_dir/npumagic_host.csv``; None when there are none."""
        frame = self.table()
        if frame["ts_ns"].nunique() < 2:
            return None
        path = Path(run_dir) / FILE_NAME
        from ..safeio import write_atomic

        write_atomic(path, frame.round(3).to_csv(index=False))  # a link planted at the name is not written through
        return path


def _state_rows(now: int, states: dict[int, str], before: dict[int, str] | None) -> list[tuple[int, str, float]]:
    """``Workers/waiting`` and ``Workers/blocked``: the percent of the workers' readings at the interval's
    two ends that found them waiting for work, or blocked in another system call (NaN where it opens)."""
    if before is None:
        return [(now, "Workers/waiting", float("nan")), (now, "Workers/blocked", float("nan"))]
    read = list(states.values()) + [before[pid] for pid in states if pid in before]
    return [(now, f"Workers/{state}", 100.0 * read.count(state) / len(read)) for state in ("waiting", "blocked")]


def _core_times(c) -> tuple[float, float]:
    """(busy, total) seconds of one core; Linux's guest time is already inside user time."""
    busy = c.user + c.system + sum(getattr(c, f, 0.0) for f in ("nice", "irq", "softirq", "steal"))
    return busy, busy + c.idle + getattr(c, "iowait", 0.0)


def _thread_clock(ident: int):
    """A function returning the CPU time (ns) of thread ``ident``, or None where unsupported."""
    try:
        clock_id = time.pthread_getcpuclockid(ident)
        time.clock_gettime_ns(clock_id)
    except (AttributeError, OSError, OverflowError):
        return None
    return lambda: time.clock_gettime_ns(clock_id)


def _run_delay(ident: int):
    """A function returning how long (ns) thread ``ident`` has waited on a run queue for a core
    (Linux's schedstat ``run_delay``), or None where the kernel does not say."""
    native = next((t.native_id for t in threading.enumerate() if t.ident == ident), None)
    path = Path(f"/proc/self/task/{native}/schedstat")

    def read() -> int:
        return int(path.read_text().split()[1])

    try:
        read()
    except (OSError, ValueError, IndexError):
        return None
    return read


def available() -> bool:
    """Whether this host can be sampled (Linux /proc, else psutil)."""
    if _Proc.available():
        return True
    try:
        import psutil

        psutil.Process(os.getpid()).cpu_times()
    except Exception:  # noqa: BLE001
        return False
    return True
