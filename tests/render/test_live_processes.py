"""The live timeline shows the host's other processes and cores beside the training thread: a
real capture with two DataLoader workers (the host sampler's run) gives a CPU line per worker and
for the main thread, and a heat strip per core, each answered per column from the samples."""

from __future__ import annotations

import numpy as np
import pytest

from npumagic.render.live.lod import CORE_LANES, TimelineIndex

from ..capture.test_host import LOADER, LOOP


def test_a_run_with_two_workers_shows_both_workers_the_main_thread_and_each_core(shell):
    import multiprocessing.resource_tracker

    import psutil

    multiprocessing.resource_tracker.ensure_running()  # a helper process, never taken for a worker
    # GIVEN a real CPU capture of a loop fed by two DataLoader workers
    assert shell.run_cell(LOADER).success
    result = shell.run_cell("%%npuprofile --wait 1 --warmup 1 --steps 4 --name w2 --no-plot\n" + LOOP)
    assert result.success, result.error_in_exec
    trace = shell.magics_manager.registry["NpuMagics"].session.runs.trace("w2")
    # WHEN its timeline index is built
    index = TimelineIndex.build(trace)
    labels = [s["label"] for s in index.layout()["series"]]
    # THEN a lane each for the main thread, both workers and the cores, after the process's own
    host = trace.counters[(trace.counters["group"].astype(str) == "Host").to_numpy()]
    pids = sorted({int(n.split()[1].split("/")[0]) for n in host["name"].astype(str) if n.startswith("Worker ")})
    cores = min(psutil.cpu_count(), CORE_LANES)
    # (the sampler's own count is test_host's to check: a child left by an earlier test in this
    # process, a Dask worker say, is sampled too and gets its lane like any other)
    assert len(pids) >= 2
    assert labels[labels.index("Host"):] == (["Host", "main thread CPU"] + [f"DataLoader worker {p} CPU" for p in pids]
                                             + [f"core {i} CPU" for i in range(cores)])
    # and each column of a worker's lane is the most of that worker's samples within it
    cpu = host.dropna(subset=["value"]).groupby(host["name"].astype(str))["value"].max()
    busiest = max(pids, key=lambda p: cpu.get(f"Worker {p}/CPU", 0.0))  # a DataLoader worker, not a bystander
    worker = next(s for s in index.series if s["label"] == f"DataLoader worker {busiest} CPU")
    samples = host[host["name"].astype(str) == f"Worker {busiest}/CPU"].dropna(subset=["value"])
    t = samples["ts_ns"].to_numpy() - index.origin
    values = samples["value"].to_numpy()
    assert values.max() > 0  # the worker was seen computing
    inside, before = values[(t >= index.lo) & (t < index.hi)], values[t < index.lo]
    # (a sampler 50 ms apart may take none inside a short run: then the column holds the last before)
    expected = inside.max() if inside.size else before[-1] if before.size else None
    answer = index.query(index.lo / 1e6, index.hi / 1e6, 1)
    assert answer["series"][index.series.index(worker)] == [expected if expected is None else pytest.approx(expected, abs=1e-3)]
