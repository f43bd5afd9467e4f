"""The checklist's Baseline gives one step's figures: the busy share beside the median step time is
that median step's, not a time-weighted share over all steps."""

from __future__ import annotations

import dataclasses

import numpy as np

import npumagic

from ..conftest import CUDA, shared_summary


def test_the_baseline_busy_share_is_the_median_steps():
    # GIVEN the shared V100 trace: 5 steps, time-weighted 97.7% busy, its median step 98.8%
    s = shared_summary(CUDA / "ns_resolution")
    wall = s.steps["wall_us"].to_numpy()
    median_step = s.steps.iloc[int(np.argmin(np.abs(wall - np.median(wall))))]
    assert f"{median_step['device_util']:.0%}" != f"{s.device_util:.0%}"  # the two differ on screen
    # WHEN the checklist runs THEN its Baseline shows the median step's
    baseline = npumagic.checklist(s).steps[0][1]
    assert s.median_step_util == median_step["device_util"]
    assert f"device busy {median_step['device_util']:.0%}," in baseline


def test_the_comparison_and_verify_show_the_baselines_busy_share_not_a_median_of_shares():
    # GIVEN a run whose median step is 20% busy while the median of its steps' shares is 50%
    base = shared_summary(CUDA / "ns_resolution")
    order = np.argsort(base.steps["wall_us"].to_numpy(), kind="stable")
    shares = np.empty(len(order))
    shares[order] = [0.1, 0.5, 0.2, 0.6, 0.9]  # by wall time: the middle step gets 0.2
    run = dataclasses.replace(base, steps=base.steps.assign(device_util=shares))
    assert np.median(shares) == 0.5 and run.median_step_util == 0.2
    # WHEN it is compared with the original THEN the table, Verify and its Baseline give one figure
    row = npumagic.compare(base, run, "before", "after").breakdown.set_index("column").loc["device_util"]
    assert (row["metric"], row["a"], row["b"]) == ("device busy", base.median_step_util, 0.2)
    checklist = npumagic.checklist(run, baseline=base)
    assert "device busy 20%," in checklist.steps[0][1]
    assert f"device busy {base.median_step_util:.0%}->20% (worse)" in checklist.steps[3][1]
