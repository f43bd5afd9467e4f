"""The interleaved A/B test on synthetic step times: its false-call rate by simulation, a 2x
change decided, and a drift that fools back-to-back runs but not the interleaved ones."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from npumagic.analysis import sequential
from npumagic.analysis.ab import ConfidenceSequence, alternate, mean_of_logs, steadier_clock
from npumagic.analysis.compare import ALPHA, MIN_EFFECT, step_test


def _steps(rng, ratio=1.0, sigma=0.05, drift=0.0, outliers=0.0):
    """A measure() of lognormal steps: B takes 1/ratio of A; each call slower by ``drift`` than the
    one before (both sides); a share ``outliers`` of calls stretched 1.5-3x (a busy neighbour)."""
    calls = [0]

    def measure(side: str) -> float:
        calls[0] += 1
        base = (1.0 if side == "a" else 1.0 / ratio) * (1 + drift * calls[0])
        spike = rng.uniform(1.5, 3.0) if rng.random() < outliers else 1.0
        return base * spike * math.exp(rng.normal(0, sigma))

    return measure


@pytest.mark.parametrize("threshold, outliers", [(0.0, 0.0), (0.0, 0.05), (0.0, 1 / 3), (0.02, 0.0), (0.02, 0.05),
                                                (0.02, 1 / 3)])
def test_identical_variants_are_called_different_at_most_5_percent_of_the_time(threshold, outliers):
    # GIVEN 400 experiments of two identical variants (threshold 0: any difference counts, the
    # hardest case for a test that looks after every block); one call in three stretched 1.5-3x by a
    # neighbour makes the block differences heavy-tailed, which the confidence sequence does not assume
    rng = np.random.default_rng(34)
    # WHEN each runs to a decision or 100 steps
    calls = [alternate(_steps(rng, outliers=outliers), threshold, 100, rng).significant for _ in range(400)]
    # THEN at most 5% are called different (the always-valid confidence sequence keeps the nominal rate)
    assert np.mean(calls) <= 0.05


def test_a_2x_change_is_decided_early_with_its_size():
    rng = np.random.default_rng(1)
    result = alternate(_steps(rng, ratio=2.0, sigma=0.1), 0.05, 200, rng)
    assert result.decided and result.significant and result.steps < 200
    assert 1.5 <= result.speedup <= 2.5 and result.ci[0] > 1.05
    assert result.sentence().startswith("B is 2.0x faster than A")


def test_no_difference_beyond_the_threshold_is_decided_when_the_interval_fits_inside_it():
    rng = np.random.default_rng(2)
    result = alternate(_steps(rng, sigma=0.01), 0.05, 400, rng)
    assert result.decided and not result.significant
    assert 1 / 1.05 < result.ci[0] <= result.ci[1] < 1.05
    assert result.sentence().startswith("no difference beyond 5% between A and B")


def test_an_undecided_result_says_how_many_more_steps_would_decide():
    rng = np.random.default_rng(3)
    result = alternate(_steps(rng, sigma=0.3), 0.05, 40, rng)
    assert not result.decided and result.steps == 40 and result.more_steps > 0
    assert f"about {result.more_steps} more steps would decide" in result.sentence()


def test_a_drift_fools_back_to_back_runs_but_not_the_interleaved_test():
    # GIVEN identical variants on a machine that slows by 5% of the first step a call (both sides alike)
    rng = np.random.default_rng(4)
    interleaved = alternate(_steps(rng, sigma=0.02, drift=0.05), 0.02, 80, rng)
    # back to back: 20 steps of A, then 20 of B, judged as %npucompare judges two runs
    measure = _steps(rng, sigma=0.02, drift=0.05)
    a = np.array([measure("a") for _ in range(20)])
    b = np.array([measure("b") for _ in range(20)])
    test = step_test(a, b)
    back_to_back = test.p_value < ALPHA and abs(math.log(np.median(a) / np.median(b))) >= math.log1p(MIN_EFFECT)
    # THEN back to back calls B slower, interleaved does not call a difference
    assert back_to_back and np.median(b) > np.median(a)
    assert not interleaved.significant


def test_the_confidence_sequence_is_unbounded_until_6_blocks_then_narrows():
    widths = sequential.width(np.arange(1, 101), 0.05)
    assert np.isinf(widths[:5]).all() and np.isfinite(widths[5:]).all()
    assert (np.diff(widths[5:]) < 0).all()
    # wider than a fixed-sample t interval at the same n: the price of looking after every block
    assert widths[24] * math.sqrt(25 / 24) > 2.064 / math.sqrt(25)


def test_the_interval_ends_where_the_t_mixture_likelihood_ratio_reaches_1_over_alpha():
    # L_n(mu) = sqrt(c / (n + c)) (1 - S^2 / ((n + c) V))^(-n / 2), S and V the sum and sum of
    # squares of the differences from mu: the interval is {mu : L_n(mu) < 1 / alpha}
    def ratio(d, mu, c=sequential.MIXTURE):
        s, v = (d - mu).sum(), ((d - mu) ** 2).sum()
        return math.sqrt(c / (d.size + c)) * (1 - s * s / ((d.size + c) * v)) ** (-d.size / 2)

    rng = np.random.default_rng(0)
    for n in (6, 10, 40):
        d = rng.normal(0.1, 0.05, n)
        mean, lo, hi = sequential.interval(d, 0.05)
        assert ratio(d, lo) == pytest.approx(20) and ratio(d, hi) == pytest.approx(20)
        assert ratio(d, mean) < 1 and ratio(d, lo - 0.01) > 20 and ratio(d, hi + 0.01) > 20
    assert ratio(rng.normal(size=1), 0.0) == pytest.approx(1)  # one difference says nothing


def test_a_test_looking_after_every_block_at_an_uncorrected_t_interval_would_call_far_more():
    # GIVEN the same identical-variant experiments judged by an uncorrected 95% t interval after every block
    from scipy import special

    class Naive:
        alpha = 0.05
        block = staticmethod(mean_of_logs)

        def interval(self, d, blocks):
            if d.size < 2:
                return None
            half = special.stdtrit(d.size - 1, 0.975) * d.std(ddof=1) / math.sqrt(d.size)
            return d.mean(), d.mean() - half, d.mean() + half

        def more_steps(self, d, t, blocks):
            return None

    rng = np.random.default_rng(34)
    naive = [alternate(_steps(rng), 0.0, 100, rng, rule=Naive()).significant for _ in range(200)]
    rng = np.random.default_rng(34)
    valid = [alternate(_steps(rng), 0.0, 100, rng).significant for _ in range(200)]
    # THEN peeking calls many of them different; the confidence sequence does not
    assert np.mean(naive) > 0.15 and np.mean(valid) <= 0.05


def test_a_10_percent_change_is_decided_sooner_than_by_bonferroni_split_looks():
    # GIVEN main's earlier rule: a t interval at 5% / L after blocks 3, 5, 8, 12, ... (L looks)
    from scipy import special

    class Bonferroni:
        alpha = 0.05
        block = staticmethod(mean_of_logs)

        def interval(self, d, blocks):
            at, k = [], 3
            while k < blocks:
                at.append(k)
                k = max(k + 1, math.ceil(k * 1.5))
            if d.size not in at + [blocks]:
                return None
            half = special.stdtrit(d.size - 1, 1 - 0.025 / (len(at) + 1)) * d.std(ddof=1) / math.sqrt(d.size)
            return d.mean(), d.mean() - half, d.mean() + half

        def more_steps(self, d, t, blocks):
            return None

    # WHEN 200 experiments of B 10% faster (spread 5% a call) are judged by each, from the same seed
    steps = {}
    for name, rule in (("bonferroni", Bonferroni()), ("sequence", None)):
        rng = np.random.default_rng(9)
        runs = [alternate(_steps(rng, ratio=1.1), 0.05, 400, rng, rule=rule) for _ in range(200)]
        assert np.mean([r.significant and r.speedup > 1 for r in runs]) >= 0.95
        steps[name] = np.median([r.steps for r in runs])
    # THEN the confidence sequence decides in fewer steps (the median)
    assert steps["sequence"] < steps["bonferroni"]


@pytest.mark.parametrize("kwargs, match", [({"max_steps": 20}, "at least 24"), ({"threshold": -0.1}, "0 or more")])
def test_bad_budgets_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        alternate(lambda side: 1.0, **kwargs)


def test_the_ratio_of_the_medians_and_the_paired_ratio_are_both_shown_and_named():
    # GIVEN A steady at 2 s and B at 1 s in one block, 3 s in the next: the medians say 2 / 2, the
    # blocks' own ratios 2 and 2/3 (geometric mean 1.15)
    calls = {"a": 0, "b": 0}

    def measure(side: str) -> float:
        calls[side] += 1
        return 2.0 if side == "a" else (1.0 if (calls["b"] - 1) // 2 % 2 == 0 else 3.0)

    # WHEN they are alternated over 6 blocks
    result = alternate(measure, 0.05, 24, np.random.default_rng(0))
    # THEN each ratio is printed under its own name, and the medians' one agrees with the medians
    assert (result.median_a, result.median_b, result.median_ratio) == (2.0, 2.0, 1.0)
    assert result.speedup == pytest.approx(math.sqrt(2 * 2 / 3))
    sentence = result.sentence()
    assert "median step A 2,000.00 ms, B 2,000.00 ms (ratio of the medians 1.00x)" in sentence
    assert "paired ratio A/B 1.15x" in sentence and "geometric mean of the 6 ABBA blocks' own ratios" in sentence


def test_a_neighbour_stretching_one_call_in_twenty_hides_a_10_percent_change_from_the_means_but_not_the_faster_calls():
    # GIVEN B 10% faster, and one call in twenty stretched 1.5-3x by a neighbour (a wait for a core)
    decided = {}
    for name, rule in (("means", ConfidenceSequence(block=mean_of_logs)), ("faster calls", None)):
        rng = np.random.default_rng(9)
        # WHEN 100 experiments of 400 steps are judged on each block's mean log ratio, or on each side's faster call
        runs = [alternate(_steps(rng, ratio=1.1, outliers=0.05), 0.05, 400, rng, rule=rule) for _ in range(100)]
        decided[name] = np.mean([r.significant and r.speedup > 1 for r in runs])
    # THEN the stretched calls leave most undecided on the means; the faster calls decide nearly all
    assert decided["means"] < 0.6 and decided["faster calls"] >= 0.9


# Real recorded step times (ms): the wall time of each ProfilerStep (its CPU annotation) and the span
# of the device work its calls launched (first kernel or copy start to last end, by correlation id),
# read from two real traces. V100 (shared cuda/ns_resolution, steps 101-105): the host runs ahead of
# the device's queue in the first steps, so their wall times are short while the device's are even.
V100_WALL = [35.11575, 72.0775, 95.69725, 95.551, 95.699]
V100_DEVICE = [97.66275, 95.736, 95.56975, 95.66325, 95.394]
# H200 (tests/data/h200_item_pageable, steps 2-5): a host-bound loop with a .item() each step.
H200_WALL = [5.585889, 3.682473, 3.584344, 3.855718]
H200_DEVICE = [4.049172, 3.402396, 3.270268, 3.324221]


def _sides(times):
    """The warm-up's calls alternate A, B, A, ...: the recorded steps dealt out so."""
    return {"a": times[0::2], "b": times[1::2]}


@pytest.mark.parametrize("wall, device", [(V100_WALL, V100_DEVICE), (H200_WALL, H200_DEVICE)])
def test_the_device_time_is_chosen_where_it_is_the_steadier(wall, device):
    clock, (wall_spread, device_spread) = steadier_clock(_sides(wall), _sides(device))
    assert clock == "device" and device_spread < wall_spread
    # by hand for the V100: A's wall times 35.1, 95.7, 95.7 ms spread 0.579 in log time, B's 72.1, 95.6 ms 0.199
    if wall is V100_WALL:
        assert wall_spread == pytest.approx(math.sqrt((0.5788 ** 2 + 0.1993 ** 2) / 2), rel=1e-3)


def test_the_wall_time_stays_where_the_device_time_is_the_noisier():
    clock, spreads = steadier_clock(_sides(H200_DEVICE), _sides(H200_WALL))  # the same numbers, clocks swapped
    assert clock == "wall" and spreads[0] < spreads[1]


def test_a_tie_keeps_the_wall_time():
    assert steadier_clock(_sides(H200_WALL), _sides(H200_WALL))[0] == "wall"


def test_a_device_clock_that_saw_a_call_take_no_time_is_not_chosen():
    device = _sides(H200_DEVICE)
    device["b"] = [0.0, 3.402396]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no log of 0 on the way
        clock, spreads = steadier_clock(_sides(H200_WALL), device)
    assert clock == "wall" and spreads[1] == math.inf
