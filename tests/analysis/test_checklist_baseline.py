"""The checklist's Baseline gives one step's figures: the busy share beside the median step time is
that median step's, not a time-weighted share over all steps."""

from __future__ import annotations

import numpy as np

import npumagic
from npumagic.analysis.checklist import median_step_busy

from ..conftest import CUDA, shared_summary


def test_the_baseline_busy_share_is_the_median_steps():
    # GIVEN the shared V100 trace: 5 steps, time-weighted 97.7% busy, its median step 98.8%
    s = shared_summary(CUDA / "ns_resolution")
    wall = s.steps["wall_us"].to_numpy()
    median_step = s.steps.iloc[int(np.argmin(np.abs(wall - np.median(wall))))]
    assert f"{median_step['device_util']:.0%}" != f"{s.device_util:.0%}"  # the two differ on screen
    # WHEN the checklist runs THEN its Baseline shows the median step's
    baseline = npumagic.checklist(s).steps[0][1]
    assert median_step_busy(s) == median_step["device_util"]
    assert f"device busy {median_step['device_util']:.0%}," in baseline
