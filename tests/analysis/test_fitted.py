"""Fixes fitted to the run (analysis/whatif.py's worker fit, cluster.py's backend checks): the
DataLoader's num_workers=N comes from the cores left idle and the workers already running, and
Ascend settings are offered only on torch_npu runs."""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pandas as pd
import pytest
import torch

import npumagic
from npumagic.analysis import cluster, whatif

from ..conftest import profiled_loader_run


class _Slow(torch.utils.data.Dataset):
    def __len__(self):
        return 4096

    def __getitem__(self, i):
        time.sleep(0.002)
        return torch.randn(16)


@pytest.fixture(scope="module")
def loading():
    """A real CPU run whose step waits on a DataLoader in the training process (num_workers=0)."""
    return profiled_loader_run(_Slow(), 4)


def _with_host(summary, cores, idle, workers=0, main=95.0, busy=50.0, **more):
    """``summary`` with npumagic's host figures for a machine of ``cores`` cores, ``idle`` of them
    idle, ``busy`` % busy on average, the training thread ``main`` % of a core (``more``: other columns)."""
    host = pd.DataFrame({"step": summary.steps["step"], "process_cpu_pct": 100.0, "main_thread_cpu_pct": main,
                         "rss_bytes": 1e9, "workers": workers, "worker_cpu_pct_mean": np.nan,
                         "worker_cpu_pct_max": np.nan, "cores": cores, "cores_busy_pct": busy, "cores_idle": idle,
                         "main_thread_wait_pct": 0.0, **more})
    return dataclasses.replace(summary, host=host)


def _dataloader(summary):
    return next(f for f in npumagic.advise(summary) if f.rule == "dataloader")


def test_no_idle_core_gets_no_more_workers(loading):
    # GIVEN the run on a 2-core machine with no core idle during the steps
    f = _dataloader(_with_host(loading, cores=2, idle=0))
    # THEN no worker count is offered, and only cheaper samples can remove the wait
    assert "no core is idle" in f.fix and "num_workers=" not in f.fix.replace("num_workers=0", "")
    wait = f.evidence["dataloader_ms"]
    assert f.predicted_interval == pytest.approx((0.0, f.impact * whatif.per_step_ms(loading, "wall_us")), abs=1e-3)
    assert f.predicted_interval[1] == pytest.approx(wait, rel=0.05)


@pytest.mark.parametrize("cores, workers, expected", [(2, 8, 1), (2, 2, 1), (4, 6, 3)])
def test_workers_that_outnumber_the_busy_cores_are_told_to_be_fewer(loading, cores, workers, expected):
    # GIVEN the run's loader with `workers` workers on `cores` cores, none idle during the steps
    s = _with_host(loading, cores=cores, idle=0, workers=workers)
    # WHEN it is advised THEN the fix names fewer workers, one per core beside the training thread,
    # and its saving is bounded by the wait the turns cost (the wait itself at most)
    f = _dataloader(s)
    assert f"DataLoader(num_workers={workers} -> {expected}," in f.fix and "more workers" not in f.fix
    wait = f.impact * whatif.per_step_ms(s, "wall_us")
    assert f.predicted_interval == pytest.approx((0.5 * wait, wait), abs=1e-3)
    assert f.predicted_basis.startswith(f"{workers} workers and the training thread take turns on {cores} cores")


def test_workers_whose_batches_cost_less_than_the_wait_are_told_to_load_inline(loading):
    # GIVEN 8 workers on 2 busy cores, each using 5% of a core: a batch costs them less CPU than the
    # step waits for it (the wait is handing batches between processes)
    s = _with_host(loading, cores=2, idle=0, workers=8)
    s = dataclasses.replace(s, host=s.host.assign(worker_cpu_pct_mean=5.0))
    f = _dataloader(s)
    # THEN the fix loads in the training process, saving the wait less at most the batch's CPU (the
    # workers' CPU holds their side of each hand-over too: inline it may cost nothing)
    batch = 8 * 0.05 * whatif.per_step_ms(s, "wall_us")
    wait = f.impact * whatif.per_step_ms(s, "wall_us")
    assert batch < wait and "DataLoader(num_workers=8 -> 0)" in f.fix
    assert f.predicted_interval == pytest.approx((wait - batch, wait), abs=1e-3)
    # AND where the training thread waited a fifth of the step for a core beside them, the rest of the
    # step may lose that wait too
    s = dataclasses.replace(s, host=s.host.assign(main_thread_wait_pct=20.0))
    rest = whatif.per_step_ms(s, "wall_us") - wait
    assert _dataloader(s).predicted_interval == pytest.approx((wait - batch, wait + 0.2 * rest), abs=1e-3)


@pytest.mark.parametrize("worker_cpu, inline", [(5.0, True), (30.0, False)])
def test_workers_waiting_for_work_are_not_told_to_add_workers(loading, worker_cpu, inline):
    # GIVEN 4 workers on 8 cores with 5 idle, found waiting for their next index in 90% of the readings
    s = _with_host(loading, cores=8, idle=5, workers=4, workers_waiting_pct=90.0, workers_blocked_pct=5.0)
    s = dataclasses.replace(s, host=s.host.assign(worker_cpu_pct_mean=worker_cpu))
    f = _dataloader(s)
    wait = f.impact * whatif.per_step_ms(s, "wall_us")
    # THEN loading keeps up: no more workers are offered; a batch cheaper than the wait is loaded
    # inline, a dearer one left to the workers, whose hand-over is what remains to shorten
    assert "wait for work 90% of the time" in f.title and "I/O" not in f.title
    assert "more workers would not" in f.fix or inline
    if inline:
        assert "DataLoader(num_workers=4 -> 0)" in f.fix
    else:
        assert "num_workers=" not in f.fix and "fewer tensors per batch" in f.fix
        assert f.predicted_interval == pytest.approx((0.0, wait), abs=1e-3)
    # AND where they also spend a third of their time blocked in their own reads, loading inline would
    # cost that too: a batch then costs more than the wait, and the workers stay
    if inline:
        reading = dataclasses.replace(s, host=s.host.assign(workers_blocked_pct=33.0, workers_waiting_pct=60.0))
        assert "num_workers=4 -> 0" not in _dataloader(reading).fix
        assert whatif.worker_fit(reading).batch_ms == pytest.approx(
            4 * (0.05 + 0.33) * whatif.per_step_ms(s, "wall_us"))
    # AND workers blocked in their own reads are still told to read faster, with more of them
    blocked = _with_host(loading, cores=8, idle=5, workers=4, workers_waiting_pct=5.0, workers_blocked_pct=90.0)
    f = _dataloader(dataclasses.replace(blocked, host=blocked.host.assign(worker_cpu_pct_mean=5.0)))
    assert "wait on I/O" in f.title and "storage" in f.fix


@pytest.mark.parametrize("cores, idle, expected", [(8, 3, 3), (32, 20, whatif.MAX_WORKERS), (2, 1, 1)])
def test_num_workers_fits_the_idle_cores(loading, cores, idle, expected):
    s = _with_host(loading, cores=cores, idle=idle)
    f = _dataloader(s)
    assert f"num_workers={expected}," in f.fix
    # the saving: the batch (the wait, loaded inline) split over the workers, beside the rest of the step
    wait = f.impact * whatif.per_step_ms(s, "wall_us")
    rest = whatif.per_step_ms(s, "wall_us") - wait
    high = wait - max(wait / expected - rest, 0.0)
    assert f.predicted_interval == pytest.approx((0.5 * high, high), abs=1e-3)


@pytest.mark.parametrize("main, busy, expected", [(20.0, 80.0, 2), (5.0, 10.0, whatif.MAX_WORKERS), (20.0, 100.0, None)])
def test_a_loader_that_mostly_waits_shares_the_spare_capacity(loading, main, busy, expected):
    # GIVEN a 2-core machine with no core idle, whose training thread loads batches using only
    # main% of a core (the Dataset sleeps: I/O)
    f = _dataloader(_with_host(loading, cores=2, idle=0, main=main, busy=busy))
    # THEN workers fill the spare capacity (2 x (1 - busy)) at main% each, none where none is spare
    if expected is None:
        assert "no core is idle" in f.fix
    else:
        assert f"num_workers={expected}," in f.fix and f"a loader using {main:.0f}% of a core" in f.fix


def test_without_host_samples_the_count_is_left_to_the_idle_cores(loading):
    f = _dataloader(loading)
    assert "num_workers=N," in f.fix and "cores left idle" in f.fix


def _ranks(**columns):
    frame = pd.DataFrame(columns)
    for c in ("computing_us", "comm_not_overlapped_us", "free_us"):
        frame[c] = frame.get(c, 100_000.0)
    frame["stage"] = -1
    return frame


@pytest.mark.parametrize("backend, ascend", [("npu", True), ("cuda", False), ("cpu", False)])
def test_ascend_settings_only_on_torch_npu_runs(backend, ascend):
    # a slow rank in each dimension: late to the collectives, computing longer, idling longer
    ranks = _ranks(rank=[0, 1], computing_us=[100_000.0, 130_000.0], comm_not_overlapped_us=[130_000.0, 100_000.0],
                   free_us=[100_000.0, 130_000.0])
    fixes = " ".join(f.fix for f in cluster.slow_ranks(ranks, backend=backend))
    for setting in ("CPU_AFFINITY_CONF", "TASK_QUEUE_ENABLE", "AI Core"):
        assert (setting in fixes) == ascend, setting


def test_one_worker_on_a_spare_core_is_said_in_the_singular(loading):
    # GIVEN the run's loader (no workers) on 2 cores, one idle, the training thread a whole core
    f = _dataloader(_with_host(loading, cores=2, idle=1, main=100.0, busy=50.0))
    # THEN the prediction's basis counts one worker and two cores in words that agree
    assert "num_workers=1," in f.fix
    assert f.predicted_basis.startswith("1 worker on 2 cores (1 idle, 0 running) load a ")
