"""What a fix can save, bounded by the step's critical path replayed without its cause
(analysis/critical_path.replay, analysis/path_bound.py): worked by hand, then on a genuine trace
whose DataLoader wait the device partly overlaps, stored with the run and read back."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from npumagic.analysis import path_bound, whatif
from npumagic.analysis.advice import advise_run
from npumagic.analysis.critical_path import Removal, replay
from npumagic.analysis.persist import dump_summary, load_summary

from ..conftest import CUDA, shared_summary
from .test_critical_path import STEP, STEPS, US, _events


def _named(ev, *names):
    return ev["name"].astype(str).isin(names).to_numpy()


def test_a_replayed_step_loses_what_the_device_leaves_it_not_what_was_removed():
    # GIVEN the hand-made step: two tiny kernels, a 600 us GEMM a .item() waits 520 us for, one more operator
    ev = _events(STEP)
    length, without = replay(ev, STEPS, 1, [Removal(host=_named(ev, "aten::item")), Removal(python=True),
                                            Removal(host=_named(ev, "aten::add")), Removal(host=np.zeros(len(ev), bool))])
    assert length == 945 * US
    # WHEN the .item() goes THEN the step ends with the GEMM (launched at 210 us, 15 us late, 600 us
    # long) and the 5 us kernel now queued behind it: 115 us saved, not the 540 us the call took
    assert without[0] == 830 * US
    # the 10 us of Python between the operators; the adds with their launches and kernels (300 us
    # of host before the GEMM's launch): the path then starts 10 us before that launch
    assert without[1] == 935 * US
    assert without[2] == (10 + 15 + 600 + 5 + 5 + 10) * US
    assert without[3] == length


def _steps_with_a_sync_at_the_end(n=3):
    """``n`` steps of 950 us: 300 us of host work, an operator launching a 600 us GEMM, and a
    cudaDeviceSynchronize that waits for it until 930 us."""
    rows, windows = [], []
    for k in range(n):
        t = 950 * k
        rows += [("aten::prep", "host_op", "main", -1, t, 300, -1), ("aten::mm", "host_op", "main", -1, t + 300, 50, -1),
                 ("cudaLaunchKernel", "runtime", "main", -1, t + 310, 10, k),
                 ("cudaDeviceSynchronize", "sync", "main", -1, t + 360, 570, -1),
                 ("gemm", "kernel", "GPU 0/Stream 7", 7, t + 325, 600, k)]
        windows.append([k, t * US, (t + 949) * US])
    ev = _events(rows)
    ev["step"] = ev["ts_ns"].to_numpy() // (950 * US)
    steps = pd.DataFrame({"step": range(n), "wall_us": [950.0] * n})
    return SimpleNamespace(events=ev, steps=steps, meta={"device_mode": True, "step_windows_ns": windows})


def test_a_sync_at_a_steps_end_saves_what_the_next_step_then_overlaps():
    # GIVEN steps that each wait for their GEMM at their end
    s = _steps_with_a_sync_at_the_end()
    # WHEN the sync is removed THEN the next step's 350 us of host work runs beside the GEMM, and
    # the GEMMs run back to back: 600 us a step for 945 us, though in a step alone the path loses
    # nothing (the GEMM ends it either way)
    (step, after), = [path_bound.replayed_steps(s)]
    assert after == step + 1
    bound = path_bound.bounds(s, lambda ev: {"sync": Removal(host=_named(ev, "cudaDeviceSynchronize"))})["sync"]
    assert bound.saving_ms == pytest.approx(0.345) and bound.length_ms == pytest.approx(0.945)
    alone = pd.DataFrame({"rank": [0], "step": [after], "start_ns": [950 * after * US],
                          "end_ns": [(950 * (after + 1) - 1) * US]})
    length, (without,) = replay(s.events, alone, after, [Removal(host=_named(s.events, "cudaDeviceSynchronize"))])
    assert length == without == 925 * US


def test_no_step_is_replayed_on_the_cpu_or_with_one_step():
    s = _steps_with_a_sync_at_the_end()
    assert path_bound.replayed_steps(SimpleNamespace(**{**vars(s), "meta": {**s.meta, "device_mode": False}})) == []
    one = _steps_with_a_sync_at_the_end(1)
    assert path_bound.replayed_steps(one) == [] and path_bound.bounds(one, lambda ev: {"x": Removal(python=True)}) == {}


@pytest.fixture(scope="module")
def autograd_api():
    return shared_summary(CUDA / "legacy_kineto" / "resnet50_autograd_api_nw0.pt.trace.json.gz")


def test_host_work_under_the_gaps_saves_what_the_median_steps_path_loses(autograd_api):
    # GIVEN a genuine run whose first step is a 4.5 s start-up: the host operators under the largest
    # gaps (aten::add, conv2d, addmm) hold 579 ms of device idle per step on average
    s = autograd_api
    found = {f.rule or f.category: f for f in advise_run(s)}
    host = found["host_bound"]
    lever = whatif.lever(s, host)
    assert lever.high_ms > 3 * s.step_stats["median_us"] / 1000
    # WHEN its fix is predicted THEN the upper end is what the median step's critical path loses
    # without those operators: less than the step, and no more than their own time in it
    bound = s.path_bounds["cpu_work"]
    assert bound["ops"] == [g["op"] for g in host.evidence["gap_operators"][:3]]
    assert host.predicted_interval[1] == pytest.approx(bound["saving_ms"], abs=1e-3)
    step, _ = path_bound.replayed_steps(s)
    ev = s.events
    own = ev[ev["name"].astype(str).isin(bound["ops"]).to_numpy() & (ev["step"] == step).to_numpy()]
    assert 0 < bound["saving_ms"] <= float(own["dur_ns"].sum()) / 1e6 < s.step_stats["median_us"] / 1000
    # AND the lever's low end keeps its share of the high one; the basis says where the bound comes from
    lo, hi = host.predicted_interval
    assert lo / hi == pytest.approx(lever.low_ms / lever.high_ms, abs=1e-3)
    assert "median step's critical path" in host.predicted_basis


def test_a_run_read_back_from_the_history_predicts_as_the_fresh_one(autograd_api):
    back = load_summary(dump_summary(autograd_api))
    assert back.events is None and back.path_bounds == autograd_api.path_bounds
    fresh = {f.rule or f.category: f.predicted_interval for f in advise_run(autograd_api)}
    again = {f.rule or f.category: f.predicted_interval for f in advise_run(back)}
    assert again["cuda_dataloader"] == fresh["cuda_dataloader"]
    # the host operators under the gaps need the events: read back, host_bound is the generic one,
    # bounded still by what the path loses with no host time at all
    assert again["host_bound"][1] == pytest.approx(back.path_bounds["host"]["saving_ms"], abs=1e-3)
    assert again["host_bound"][1] < whatif.lever(back, _finding(back, "host_bound")).high_ms


def _finding(s, rule):
    return next(f for f in advise_run(s) if (f.rule or f.category) == rule)
