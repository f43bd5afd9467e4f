"""The band learned from a configuration's earlier runs, on hand-made medians."""

from __future__ import annotations

import math

import numpy as np
import pytest

from npumagic.analysis.alerts import LAST_RUNS, learn_band


def test_twelve_steady_runs_give_the_floor_band_and_a_6_percent_jump_is_outside_it():
    medians = 100_000 * np.exp(np.tile([-0.002, 0.002], 6))  # 12 runs within ±0.2%
    band = learn_band(medians)
    # t(0.975, 11) = 2.201; s = 0.002 * sqrt(12/11); sqrt(1 + 1/12) -> the 5% floor is wider
    assert band.runs == 12 and band.pct == pytest.approx(0.05)
    alert = band.check(106_000)
    assert alert.outside and alert.sentence() == "6.0% slower than its last 12 runs, outside their ±5.0% band"


def test_the_band_is_the_t_prediction_interval_when_the_runs_spread_beyond_the_floor():
    logs = np.tile([-0.05, 0.05], 6)
    band = learn_band(100_000 * np.exp(logs))
    s = logs.std(ddof=1)
    assert band.half == pytest.approx(2.2009852 * s * math.sqrt(1 + 1 / 12), rel=1e-6)
    assert not band.check(110_000).outside and band.check(130_000).outside
    assert band.check(80_000).sentence().startswith("20.0% faster than its last 12 runs, outside")


def test_two_runs_give_a_wide_band_and_one_gives_none():
    band = learn_band([20_000, 22_000])
    assert band.half == pytest.approx(12.7062 * abs(math.log(1.1)) / math.sqrt(2) * math.sqrt(1.5), rel=1e-4)
    assert learn_band([20_000]) is None and learn_band([20_000, float("nan")]) is None


def test_only_the_last_runs_are_learned_from():
    band = learn_band([1_000] * 5 + [50_000, 50_100] * LAST_RUNS)
    assert band.runs == LAST_RUNS and band.center_us > 49_000


@pytest.mark.parametrize("confidence", [0.5, 0.9, 0.95, 0.99, 0.999])
def test_the_t_quantile_is_scipys_without_scipy(confidence):
    # GIVEN the closed form of Student's t for integer degrees of freedom THEN it gives scipy's
    # quantile (what the band used, at a quarter of a second of imports), for the band's 1 to 19 df and beyond
    from scipy import special

    from npumagic.analysis.student_t import two_sided

    for df in [*range(1, LAST_RUNS + 1), 50, 200]:
        assert two_sided(df, confidence) == pytest.approx(float(special.stdtrit(df, 1 - (1 - confidence) / 2)),
                                                          rel=1e-11)


@pytest.mark.parametrize("df, confidence", [(0, 0.95), (2.5, 0.95), (3, 1.0), (3, 0.0)])
def test_the_t_quantile_refuses_what_it_cannot_answer(df, confidence):
    from npumagic.analysis.student_t import two_sided

    with pytest.raises(ValueError, match="integer df > 0 and a confidence in"):
        two_sided(df, confidence)
