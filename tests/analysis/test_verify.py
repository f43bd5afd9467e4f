"""Predict, then verify (analysis/verify.py): the baseline's finding's predicted saving against the
achieved one, on shared runs (arithmetic only: the level1 run as the baseline, level0 after), and the
run-to-run noise that widens the interval, read from the steps' own spread (cuda/nccl, ns_resolution)."""

from __future__ import annotations

import numpy as np
import pytest

import npumagic
from npumagic.analysis.verify import Verification, pick, verify

from ..conftest import ASCEND, CUDA, shared_summary


@pytest.fixture(scope="module")
def runs():
    return shared_summary(ASCEND / "level1" / "rank0_ascend_pt"), shared_summary(ASCEND / "level0" / "rank0_ascend_pt")


def test_the_achieved_saving_is_the_median_steps_difference(runs):
    base, after = runs
    told = pick(npumagic.advise(base).findings, "communication")
    checked = verify(base, after, told)
    achieved = (base.step_stats["median_us"] - after.step_stats["median_us"]) / 1000
    assert checked.achieved_ms == pytest.approx(achieved)
    assert (checked.low_ms, checked.high_ms) == told.predicted_interval
    # 154.48 -> 135.61 ms: 18.87 ms saved, under the 25.49 ms the fewer-bytes lever promised at
    # least, but within the 5% run-to-run noise (7.72 ms) assumed where none was measured
    noise = 0.05 * base.step_stats["median_us"] / 1000
    assert checked.noise_ms == pytest.approx(noise)
    assert checked.low_ms - noise < achieved < checked.low_ms
    assert checked.outcome == "within" and checked.ratio == pytest.approx(achieved / told.predicted_saving_ms)
    assert checked.sentence() == (f"communication: predicted -{told.predicted_saving_ms:,.2f} ms "
                                  f"(-{told.predicted_interval[1]:,.2f} to -{told.predicted_interval[0]:,.2f}), achieved "
                                  f"-{achieved:,.2f} ms per step (within the interval, noise ±{noise:,.2f} ms)")


@pytest.mark.parametrize("achieved, noise, outcome", [(1.0, 0.0, "short"), (2.0, 0.0, "within"), (3.0, 0.0, "within"),
                                                     (3.5, 0.0, "beyond"), (3.5, 0.5, "within"), (1.4, 0.5, "short")])
def test_outcome_against_the_interval_widened_by_the_noise(achieved, noise, outcome):
    assert Verification("dataloader", 2.5, 2.0, 3.0, achieved, noise).outcome == outcome


def test_the_checklist_verifies_the_baselines_next_change(runs):
    base, after = runs
    verify_step = dict(npumagic.checklist(after, baseline=base).steps)["Verify"]
    assert "; the baseline's Next change, communication: predicted -" in verify_step
    assert verify_step.endswith(" ms per step (within the interval, noise ±7.72 ms)")


def _median_error_ms(s) -> float:
    """The standard error of the median step: 1.2533 sigma / sqrt(n), sigma = 1.4826 MAD."""
    wall = s.steps["wall_us"].to_numpy(dtype=float)
    mad = np.median(np.abs(wall - np.median(wall)))
    return 1.2533 * 1.4826 * mad / np.sqrt(wall.size) / 1000


def test_the_prediction_carries_the_run_to_run_noise_of_two_medians_from_the_steps_spread():
    # GIVEN the shared nccl run (3 steps: 228.1, 219.7, 219.1 ms) and ns_resolution (5 steps)
    base, after = shared_summary(CUDA / "nccl"), shared_summary(CUDA / "ns_resolution")
    # WHEN it is advised THEN each finding's saving may land by chance 1.96 x the two medians'
    # errors either side of its interval (the fixed run's taken as the baseline's), said in words
    verdict = npumagic.checklist(base)
    top = verdict.advice.lead.finding
    noise = 1.96 * np.sqrt(2) * _median_error_ms(base)
    assert top.predicted_noise_ms == pytest.approx(noise, abs=1e-3) and noise > 0.5
    assert verdict.next_change.endswith(f", ±{top.predicted_noise_ms:,.2f} ms run to run (95%, from the steps' spread)")
    assert top.as_dict()["predicted_noise_ms"] == top.predicted_noise_ms
    # AND verified against a run, the noise is both runs' measured errors, not 5% of the step
    checked = verify(base, after, top)
    assert checked.noise_ms == pytest.approx(1.96 * np.hypot(_median_error_ms(base), _median_error_ms(after)))
    assert checked.noise_ms < 0.05 * base.step_stats["median_us"] / 1000


def test_the_checklist_verifies_the_fix_the_run_applied_not_the_baselines_lead(runs):
    # GIVEN level1 as the baseline and a run that applied the fix of a finding other than its lead
    from npumagic.analysis.changed import AppliedFix

    base, after = runs
    advice = npumagic.advise(base)
    other = next(f for f in advice.findings if f is not advice.lead.finding and f.predicted_interval)
    # WHEN the run's checklist is given the fix read from what changed
    verify_step = dict(npumagic.checklist(after, baseline=base, applied=AppliedFix(other, "X went 1 -> 2")).steps)["Verify"]
    # THEN Verify checks that finding's prediction, saying the change, not the baseline's Next change
    lo, hi = other.predicted_interval
    assert (f"; the fix read from what changed (X went 1 -> 2), {other.rule}: predicted "
            f"-{other.predicted_saving_ms:,.2f} ms (-{hi:,.2f} to -{lo:,.2f}), achieved ") in verify_step
    assert "the baseline's Next change" not in verify_step
