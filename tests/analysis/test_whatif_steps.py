"""What-if levers read from the steps and the host samples, on real CPU runs: a DataLoader that
stalls in a few steps makes the steps jittery, and those stalls are the DataLoader finding's to
remove, not jitter's (analysis/whatif.py's steady_lever); Python outside operators saves only its
own time, not the time the thread waited for a core (python_lever)."""

from __future__ import annotations

import dataclasses
import tempfile
import time

import numpy as np
import pandas as pd
import pytest
import torch
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

import npumagic

from ..conftest import profiled_loader_run

STALLED = {6, 7}  # the batches (of two samples) whose samples wait 15 ms instead of 1 ms


class _Stalling(torch.utils.data.Dataset):
    def __len__(self):
        return 4096

    def __getitem__(self, i):
        time.sleep(0.015 if i // 2 in STALLED else 0.001)
        return torch.randn(16)


@pytest.fixture(scope="module")
def stalling():
    """A real CPU run of 8 steps whose DataLoader (in the training process) stalls in two of them."""
    return profiled_loader_run(_Stalling(), 8)


def test_jitter_beside_a_dataloader_finding_leaves_the_stalls_to_it(stalling):
    # GIVEN a run whose slow steps are slow because they wait for data
    found = {f.rule or f.category: f for f in npumagic.advise(stalling)}
    assert {"jitter", "dataloader"} <= set(found)
    steps = stalling.steps
    wall_ms = steps["wall_us"].to_numpy() / 1000
    rest = wall_ms - steps["dataloader_us"].to_numpy() / 1000
    # WHEN jitter's saving is predicted THEN it is what the mean step loses to slow steps beside the
    # wait for data (mean less median of the steps without their wait), not the whole mean less median
    jitter = found["jitter"]
    lost = rest.mean() - np.median(rest)
    assert jitter.predicted_interval == pytest.approx((0.0, max(lost, 0.0)), abs=1e-3)
    assert lost < 0.5 * (wall_ms.mean() - np.median(wall_ms))
    assert "beside their wait for data" in jitter.predicted_basis
    # AND the DataLoader finding, whose fix removes the stalls, ranks above it
    ranked = [f.rule or f.category for f in npumagic.advise(stalling)]
    assert ranked.index("dataloader") < ranked.index("jitter")


def test_jitter_alone_keeps_the_whole_mean_less_median(stalling):
    # GIVEN the same run's jitter finding without the DataLoader finding beside it
    from npumagic.analysis import whatif

    jitter = next(f for f in npumagic.advise(stalling) if f.category == "jitter")
    bare = whatif.lever(stalling, jitter)
    # THEN its bound is all the mean step loses to slow steps
    wall_ms = stalling.steps["wall_us"].to_numpy() / 1000
    assert (bare.low_ms, bare.high_ms) == pytest.approx((0.0, jitter.impact * wall_ms.mean()), abs=1e-3)


@pytest.fixture(scope="module")
def python_loop():
    """A real CPU run whose steps spend most of their time in a Python loop outside operators."""
    folder = tempfile.mkdtemp()
    model = torch.nn.Linear(16, 4)
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=5, repeat=1),
                 on_trace_ready=tensorboard_trace_handler(folder)) as prof:
        for _ in range(7):
            sum(i * i for i in range(20000))
            model(torch.randn(8, 16)).sum().backward()
            prof.step()
    return npumagic.analyze(folder)


def _waiting(summary, wait_pct):
    """``summary`` with host samples in which the training thread waited ``wait_pct`` % of each step
    for a core."""
    host = pd.DataFrame({"step": summary.steps["step"], "process_cpu_pct": 60.0, "main_thread_cpu_pct": 60.0,
                         "rss_bytes": 1e9, "workers": 0, "worker_cpu_pct_mean": np.nan, "worker_cpu_pct_max": np.nan,
                         "cores": 2, "cores_busy_pct": 100.0, "cores_idle": 0, "main_thread_wait_pct": wait_pct})
    return dataclasses.replace(summary, host=host)


def _python(summary):
    return next(f for f in npumagic.advise(summary) if f.rule == "host_bound" and "python_ms" in f.evidence)


def test_python_outside_operators_saves_its_own_time_not_the_wait_for_a_core(python_loop):
    # GIVEN the run's Python-bound steps, the thread waiting for a core 40% of each step
    stake = _median_python_ms(python_loop)
    f = _python(_waiting(python_loop, 40.0))
    # THEN moving the median step's Python out saves at most the 60% of it the thread ran, half of that at least
    assert f.evidence["python_ms"] == pytest.approx(_python(python_loop).evidence["python_ms"])
    assert f.predicted_interval == pytest.approx((0.5 * 0.6 * stake, 0.6 * stake), abs=1e-3)
    assert "less the 40% of it the thread waited for a core" in f.predicted_basis


def _median_python_ms(summary) -> float:
    return float(np.median(summary.steps["idle_python_us"])) / 1000


def test_python_outside_operators_without_host_samples_saves_all_of_it(python_loop):
    f = _python(python_loop)
    stake = _median_python_ms(python_loop)
    assert f.predicted_interval == pytest.approx((0.5 * stake, stake), abs=1e-3)
    assert "waited for a core" not in f.predicted_basis


def test_a_slow_steps_python_is_left_to_jitter(python_loop):
    # GIVEN the run with one step's Python ten times as long (a collection, a neighbour's time slice)
    steps = python_loop.steps.copy()
    slow = steps["idle_python_us"].idxmax()  # above the median already: the median stays
    extra = 9 * steps.at[slow, "idle_python_us"]
    for column in ("wall_us", "idle_us", "free_us", "idle_python_us"):
        steps.at[slow, column] += extra
    f = _python(dataclasses.replace(python_loop, steps=steps))
    # THEN the mean step's Python grows, but the fix is predicted from the median step's, as the
    # achieved saving is measured (the slow step is the jitter finding's)
    assert f.evidence["python_ms"] > _median_python_ms(python_loop) * 1.5
    stake = _median_python_ms(python_loop)
    assert f.predicted_interval == pytest.approx((0.5 * stake, stake), abs=1e-3)
