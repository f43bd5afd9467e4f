"""The psutil host sampler: what it records during a real CPU capture, when it runs, and that it
always stops; its samples in the Summary, the timeline and the advice."""

from __future__ import annotations

import dataclasses
import os
import threading
import time

import numpy as np
import pandas as pd
import pytest

from npumagic.analysis.advice import advise
from npumagic.capture.host import FILE_NAME, HostSampler

LOADER = """
import time
class SlowDataset(torch.utils.data.Dataset):
    def __len__(self): return 100000
    def __getitem__(self, i):
        t = time.perf_counter()
        while time.perf_counter() - t < 0.02: pass  # decoding: CPU work in the worker, slower than the step
        return torch.randn(32), torch.randn(1)
loader = torch.utils.data.DataLoader(SlowDataset(), batch_size=4, num_workers=2)
model = torch.nn.Linear(32, 1); opt = torch.optim.SGD(model.parameters(), lr=0.01)
"""
LOOP = """
for i, (x, y) in enumerate(loader):
    torch.nn.functional.mse_loss(model(x), y).backward(); opt.step(); opt.zero_grad()
    if i == 8: break
"""


def _sampler_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "npumagic-host-sampler"]


@pytest.fixture
def workers_run(shell):
    # multiprocessing's resource tracker, a child of the kernel once anything spawned a process
    # (a Dask cluster, a spawn-context DataLoader): a helper, never counted as a worker
    import multiprocessing.resource_tracker

    multiprocessing.resource_tracker.ensure_running()
    assert shell.run_cell(LOADER).success
    result = shell.run_cell("%%npuprofile --wait 1 --warmup 1 --steps 4 --name w2 --no-plot\n" + LOOP)
    assert result.success, result.error_in_exec
    return shell, shell.magics_manager.registry["NpuMagics"].session


def test_a_capture_with_two_workers_records_worker_and_per_core_cpu(workers_run):
    shell, session = workers_run
    trace = session.runs.trace("w2")
    host = trace.counters[trace.counters["group"].astype(str) == "Host"]
    names = set(host["name"].astype(str))
    workers = {n for n in names if n.startswith("Worker ")}
    cores = {n for n in names if n.startswith("Core ")}
    assert len(workers) == 2
    import psutil

    assert len(cores) == psutil.cpu_count()
    assert {"Process/CPU", "Main thread/CPU", "Process/RSS"} <= names
    worker_cpu = host[host["name"].astype(str).isin(workers)]["value"]
    assert worker_cpu.max() > 0  # the workers were seen computing
    # the run's record carries the per-step host figures
    counters = session.store.get("w2").headline.counters
    assert counters["host_workers"] == 2
    assert counters["host_worker_cpu_pct_mean"] > 0
    assert 0 <= counters["host_cores_busy_pct"] <= 100
    assert not _sampler_threads()


def test_samples_are_taken_only_while_the_profiler_records(workers_run):
    _, session = workers_run
    trace = session.runs.trace("w2")
    host = trace.counters[trace.counters["group"].astype(str) == "Host"]
    steps = trace.steps
    slack = 5_000_000  # ns: the sampler resumes and pauses at the step boundary, just around ProfilerStep#
    assert host["ts_ns"].min() >= steps["start_ns"].min() - slack
    assert host["ts_ns"].max() <= steps["end_ns"].max() + slack
    summary = session.runs.summary("w2")
    assert summary.host["step"].tolist() == summary.steps["step"].tolist()
    assert (summary.host["workers"] == 2).all()


def test_the_timeline_shows_a_host_cpu_lane_with_the_workers(workers_run):
    shell, session = workers_run
    report = shell.run_line_magic("npushow", "w2 --timeline")
    assert report.figures and report.figures[0].view == "timeline"
    from npumagic.render.timeline import timeline_figure

    fig = timeline_figure(session.runs.trace("w2"))
    lane = next(ax for ax in fig.axes if ax.get_ylabel() == "host CPU %")
    labels = [line.get_label() for line in lane.get_lines()]
    assert "process" in labels and "main thread" in labels
    assert sum(label.startswith("worker ") for label in labels) == 2
    assert any(label.startswith("all ") and label.endswith("cores (mean)") for label in labels)


def test_the_sampler_stops_after_a_raising_cell(shell):
    assert shell.run_cell("import torch\nmodel = torch.nn.Linear(4, 1); opt = torch.optim.SGD(model.parameters(), lr=0.1)"
                          ).success
    cell = ("%%npuprofile --wait 0 --warmup 0 --steps 5 --name boom --no-plot\n"
            "for i in range(10):\n"
            "    model(torch.randn(2, 4)).sum().backward(); opt.step()\n"
            "    time.sleep(0.02)\n"
            "    if i == 2: raise ValueError('boom')\n")
    shell.run_cell("import time")
    result = shell.run_cell(cell)
    assert isinstance(result.error_in_exec, ValueError)
    assert not _sampler_threads()
    session = shell.magics_manager.registry["NpuMagics"].session
    run = session.store.get("boom")
    assert run.status == "failed"
    samples = pd.read_csv(f"{run.run_dir}/{FILE_NAME}")
    assert len(samples) >= 3  # what was sampled before the error is kept


def test_no_samples_with_host_sampling_off(shell):
    shell.run_cell("import torch\nmodel = torch.nn.Linear(4, 1); opt = torch.optim.SGD(model.parameters(), lr=0.1)")
    result = shell.run_cell("%%npuprofile --wait 0 --warmup 0 --steps 2 --name quiet --no-host --no-plot\n"
                            "for i in range(3):\n    model(torch.randn(2, 4)).sum().backward(); opt.step()\n")
    assert result.success, result.error_in_exec
    run = shell.magics_manager.registry["NpuMagics"].session.store.get("quiet")
    from pathlib import Path

    assert not (Path(run.run_dir) / FILE_NAME).exists()


def test_cpu_percent_integrates_to_the_cpu_time_the_thread_used():
    # GIVEN a sampler following a thread that computes for 1 s (hashing large buffers releases the
    # GIL, so this thread's own reads of the clock are not delayed by it)
    import hashlib

    done = threading.Event()
    spinning = threading.Event()
    block = b"x" * 2**20

    def spin():
        spinning.set()
        while not done.is_set():
            hashlib.sha256(block).digest()

    worker = threading.Thread(target=spin)
    worker.start()
    spinning.wait()
    clock = time.pthread_getcpuclockid(worker.ident)
    sampler = HostSampler(interval=0.02, thread_id=worker.ident)
    try:
        before = time.clock_gettime_ns(clock)
        sampler.resume()
        time.sleep(1.0)
        sampler.pause()
        after = time.clock_gettime_ns(clock)
    finally:
        sampler.stop()
        done.set()
        worker.join()
    table = sampler.table()
    thread = table[table["name"] == "Main thread/CPU"]
    # THEN percent x interval, summed, is the CPU time the thread used between the first and the
    # last sample; the first sample only opens the intervals
    assert np.isnan(thread["value"].iat[0])
    seconds = np.diff(thread["ts_ns"].to_numpy()) / 1e9
    used = float((thread["value"].to_numpy()[1:] / 100 * seconds).sum())
    # (a loaded machine may deschedule this thread for a few ms between its clock reads and the samples)
    assert used == pytest.approx((after - before) / 1e9, rel=0.05)
    assert used > 0
    assert "npumagic-host-sampler" not in {t.name for t in threading.enumerate()}  # stop() ended it


def test_a_short_busy_capture_reads_the_process_at_least_as_busy_as_its_thread():
    # GIVEN a thread that spins through a capture of a few short sampling intervals
    done, spinning = threading.Event(), threading.Event()

    def spin():
        spinning.set()
        while not done.is_set():
            pass

    worker = threading.Thread(target=spin, daemon=True)
    worker.start()
    spinning.wait()
    sampler = HostSampler(interval=0.005, thread_id=worker.ident)
    try:
        sampler.resume()
        time.sleep(0.06)
        sampler.pause()
    finally:
        sampler.stop()
        done.set()
        worker.join()
    table = sampler.table().pivot_table(index="ts_ns", columns="name", values="value").dropna(
        subset=["Process/CPU", "Main thread/CPU"])
    # THEN no interval reads the process, which holds the busy thread, as idle (10 ms clock ticks
    # read a 5 ms interval of a busy process as 0% or 200%)
    assert len(table) and (table["Main thread/CPU"] > 20).any()
    assert not ((table["Process/CPU"] < 1) & (table["Main thread/CPU"] > 20)).any(), table


def _with_host(summary, **columns):
    base = {"step": summary.steps["step"], "process_cpu_pct": 100.0, "main_thread_cpu_pct": 30.0, "rss_bytes": 1e9,
            "workers": 0, "worker_cpu_pct_mean": np.nan, "worker_cpu_pct_max": np.nan, "cores": 8,
            "cores_busy_pct": 30.0, "cores_idle": 4}
    base.update(columns)
    return dataclasses.replace(summary, host=pd.DataFrame(base))


@pytest.fixture(scope="module")
def waiting_on_data():
    """A real Ascend summary whose steps are made to wait on the DataLoader / the host."""
    from ..conftest import ASCEND, shared_summary

    summary = shared_summary(ASCEND / "level1" / "rank0_ascend_pt")
    steps = summary.steps.copy()
    steps["dataloader_us"] = steps["wall_us"] * 0.5
    steps["free_us"] = steps["idle_us"] = steps["wall_us"] * 0.9
    steps["comm_not_overlapped_us"] = 0.0
    return dataclasses.replace(summary, steps=steps)


@pytest.mark.parametrize("workers, busy, idle, expected", [
    (4, 97.0, 2, "loading is CPU-bound"),
    (4, 20.0, 3, "wait on I/O"),
    (4, 70.0, 3, None),
])
def test_dataloader_finding_reads_the_workers_cpu(waiting_on_data, workers, busy, idle, expected):
    summary = _with_host(waiting_on_data, workers=workers, worker_cpu_pct_mean=busy, cores_idle=idle)
    finding = next(f for f in advise(summary) if f.category == "dataloader")
    assert finding.evidence["workers"] == workers
    if expected:
        assert expected in finding.title
        assert ("num_workers=4 -> 6" in finding.fix) if expected.startswith("loading") else ("storage" in finding.fix)
    else:
        assert "CPU-bound" not in finding.title and "I/O" not in finding.title


def test_a_loader_in_the_training_process_is_said_to_load_not_to_decode(waiting_on_data):
    # the demo's fixed run: num_workers=0 and a Dataset that only indexes tensors, the thread busy
    summary = _with_host(waiting_on_data, workers=0, main_thread_cpu_pct=90.0)
    finding = next(f for f in advise(summary) if f.category == "dataloader")
    assert "the training thread loads every batch itself (90% of a core)" in finding.title
    assert "decod" not in finding.title


def test_host_bound_with_the_main_thread_pinned_is_dispatch_bound(waiting_on_data):
    steps = waiting_on_data.steps.assign(dataloader_us=0.0)
    pinned = _with_host(dataclasses.replace(waiting_on_data, steps=steps), main_thread_cpu_pct=98.0)
    finding = next(f for f in advise(pinned) if f.category == "host_bound")
    assert "98% busy: dispatch-bound" in finding.title
    assert "TASK_QUEUE_ENABLE=2" in finding.fix and "batch size" in finding.fix and "torch.compile" in finding.fix
    idle = _with_host(dataclasses.replace(waiting_on_data, steps=steps), main_thread_cpu_pct=10.0, cores_idle=6)
    finding = next(f for f in advise(idle) if f.category == "host_bound")
    assert "the host waits" in finding.title and "6 cores idle" in finding.title


@pytest.mark.parametrize("source", ["proc", "psutil"])
def test_only_children_running_our_python_work_are_workers(source, monkeypatch):
    """A forked, a spawned and a forkserver's child run the kernel's work (DataLoader workers);
    a program the kernel started with exec (a TensorBoard, a shell command) is no worker."""
    import multiprocessing
    import subprocess
    import sys
    import types

    from npumagic.capture.host import _Proc, _Psutil

    # spawn reads the main module's spec: an earlier test's InteractiveShell left one without any
    monkeypatch.setitem(sys.modules, "__main__", types.ModuleType("__main__"))
    reader = _Proc() if source == "proc" else _Psutil()
    program = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    started = [multiprocessing.get_context(method).Process(target=time.sleep, args=(30,), daemon=True)
               for method in ("fork", "spawn", "forkserver")]
    try:
        for process in started:
            process.start()
        expected = {p.pid for p in started}
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:  # the forkserver's child is found once the server is
            reader.list_children()
            if expected <= set(reader.children):
                break
            time.sleep(0.1)
        assert expected <= set(reader.children)  # an earlier test's DataLoader workers may live on
        assert all(p.is_alive() for p in started)
        assert program.pid not in reader.children
    finally:
        program.kill()
        for process in started:
            if process.pid is not None:
                process.kill()
        reader.close()


def _burn_on_signal(conn):
    conn.send("ready")  # the child's own start-up (multiprocessing's bootstrap) is done before it is read
    conn.recv()
    start = time.thread_time()
    while time.thread_time() - start < 0.003:
        pass
    conn.send(time.thread_time() - start)
    time.sleep(30)


@pytest.mark.skipif(not os.path.exists("/proc/self/schedstat"), reason="need Linux's /proc/PID/schedstat")
def test_a_workers_cpu_is_read_to_well_under_a_clock_tick():
    """A worker that loads a batch in 3 ms of CPU is read as 3 ms, not as 0 or 10 ms of clock ticks
    (the worker fit costs each batch from it: "0.00 ms of CPU" was a tick not yet counted)."""
    import multiprocessing

    from npumagic.capture.host import _Proc

    reader = _Proc()
    ours, theirs = multiprocessing.Pipe()
    worker = multiprocessing.get_context("fork").Process(target=_burn_on_signal, args=(theirs,), daemon=True)
    worker.start()
    try:
        reader.list_children()
        assert worker.pid in reader.children
        assert ours.recv() == "ready"
        before = reader.child_times()[worker.pid]
        ours.send("go")
        burnt = ours.recv()
        after = reader.child_times()[worker.pid]
        # the burn, and the worker's own time answering the pipe: well under a tick either way
        assert burnt <= after - before < burnt + 0.003
    finally:
        worker.kill()
        reader.close()


def _wait_on_pipe(conn, how):
    """A child that waits as a DataLoader worker does: for its next index (poll on a pipe with
    a 5 s timeout), or in its Dataset (a sleep), or computes."""
    import select

    reader, _ = os.pipe()
    conn.send("ready")
    if how == "waiting":
        poller = select.poll()
        poller.register(reader, select.POLLIN)
        while True:
            poller.poll(5000)
    elif how == "blocked":
        time.sleep(30)
    else:
        while True:
            pass


@pytest.mark.skipif(not os.path.exists("/proc/self/syscall"), reason="need Linux's /proc/PID/syscall")
def test_a_workers_state_says_whether_it_waits_for_work_or_in_its_own_system_call():
    import multiprocessing
    import platform

    from npumagic.capture.host import WAITS_ON_FDS, _Proc

    if platform.machine() not in WAITS_ON_FDS:
        pytest.skip(f"no table of system calls for {platform.machine()}")
    reader = _Proc()
    context = multiprocessing.get_context("fork")
    children = {}
    try:
        for how in ("waiting", "blocked", "running"):
            ours, theirs = multiprocessing.Pipe()
            child = context.Process(target=_wait_on_pipe, args=(theirs, how), daemon=True)
            child.start()
            assert ours.recv() == "ready"
            children[child.pid] = (how, child)
        reader.list_children()
        deadline = time.monotonic() + 10  # each child reaches its wait after its reply
        while time.monotonic() < deadline:
            states = reader.child_states()
            if all(states.get(pid) == how for pid, (how, _) in children.items()):
                break
            time.sleep(0.05)
        assert {pid: states.get(pid) for pid in children} == {pid: how for pid, (how, _) in children.items()}
    finally:
        for _, child in children.values():
            child.kill()
        reader.close()


AHEAD_OR_BEHIND = """
class Tiny(torch.utils.data.Dataset):
    def __len__(self): return 100000
    def __getitem__(self, i): return torch.full((8,), float(i))
class Sleepy(Tiny):
    def __getitem__(self, i):
        time.sleep(0.05)  # reading from slow storage
        return torch.full((8,), float(i))
ahead = torch.utils.data.DataLoader(Tiny(), batch_size=4, num_workers=2, persistent_workers=True)
behind = torch.utils.data.DataLoader(Sleepy(), batch_size=1, num_workers=2, persistent_workers=True)
model = torch.nn.Linear(8, 1); opt = torch.optim.SGD(model.parameters(), lr=0.01)
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/syscall"), reason="need Linux's /proc/PID/syscall")
@pytest.mark.parametrize("loader, step, waiting", [("ahead", "time.sleep(0.02)", True), ("behind", "pass", False)])
def test_workers_ahead_of_the_step_are_read_as_waiting_for_work(shell, loader, step, waiting):
    # GIVEN two workers whose tiny batches are ready long before a 20 ms step asks for them, or two
    # whose samples each take a 50 ms read while the step takes none
    assert shell.run_cell("import time\n" + AHEAD_OR_BEHIND).success
    loop = (f"for i, x in enumerate({loader}):\n    {step}\n    model(x).sum().backward(); opt.step(); opt.zero_grad()\n"
            "    if i == 8: break\n")
    result = shell.run_cell(f"%%npuprofile --wait 1 --warmup 1 --steps 4 --name {loader} --no-plot --quiet\n" + loop)
    assert result.success, result.error_in_exec
    host = shell.magics_manager.registry["NpuMagics"].session.runs.summary(loader).host
    # THEN the samples find the first waiting for their next index, the second blocked in their sleep,
    # and only the first is taken to keep up (more workers would not help it)
    from npumagic.analysis import whatif

    column = "workers_waiting_pct" if waiting else "workers_blocked_pct"
    assert host[column].mean() >= 50, host
    summary = shell.magics_manager.registry["NpuMagics"].session.runs.summary(loader)
    assert whatif.worker_fit(summary).ahead is waiting


@pytest.mark.parametrize("cores, workers, said", [
    (1, 1, "1 DataLoader worker and the training thread share 1 core, none idle"),
    (2, 0, "no core is idle during the steps (2 cores, 0 DataLoader workers)")])
def test_no_idle_core_is_said_with_its_counts_in_words(waiting_on_data, cores, workers, said):
    summary = _with_host(waiting_on_data, cores=cores, cores_idle=0, cores_busy_pct=100.0, workers=workers,
                         worker_cpu_pct_mean=5.0 if workers else np.nan, main_thread_cpu_pct=95.0)
    finding = next(f for f in advise(summary) if f.category == "dataloader")
    assert said in finding.fix


def test_one_idle_core_and_one_worker_are_said_in_the_singular(waiting_on_data):
    # GIVEN one worker, 5% busy, with one core idle: the batches wait on I/O
    summary = _with_host(waiting_on_data, workers=1, worker_cpu_pct_mean=5.0, cores_idle=1)
    finding = next(f for f in advise(summary) if f.category == "dataloader")
    assert "its 1 worker is only 5% busy with 1 core idle: the batches wait on I/O" in finding.title
