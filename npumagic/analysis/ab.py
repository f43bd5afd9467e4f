"""Interleaved A/B: alternate two variants in randomised ABBA blocks and stop as soon as the
step-time ratio is decided, beyond a threshold either way or within it.

The test: each block runs A twice and B twice, in the order ABBA or BAAB (chosen at random), and
gives one paired sample, the log of A's faster call over B's faster call. A neighbour only ever
slows a call (a wait for a core of a few ms, on a shared machine one call in several), so the
faster of two calls is the one it spared: on a 2-CPU machine at load 4 the spread of the block
differences was 0.085 this way against 0.18 with the mean of both calls, and their median absolute
deviation 0.026 against 0.28. With identical variants the difference is symmetric about 0 whatever
the noise (the random order swaps the sides' positions); a drift over the block adds only to its
spread. The differences of successive blocks are close to independent. The 95% interval of their
mean (log) is exponentiated into an interval of the ratio A / B.

The sequential test: after every block the interval is the always-valid confidence sequence of
:mod:`.sequential` (Lai's t-mixture), which covers the true mean at every block at once, so
looking after each one and stopping at the first decision keeps the 95% (it assumes the block
differences independent and normal; their spread is estimated). It replaced a t interval looked
at after geometric blocks (3, 5, 8, 12, ...) at 5% divided by the number of looks (Bonferroni):
that rule could only stop at a look and paid for every look the budget allowed, used or not.
It needs 6 blocks (24 steps) before its interval is bounded, so a 2x change takes 24 steps where
the old rule took 12, and smaller changes fewer. Measured by simulation (``tests/analysis/test_ab.py``,
400 experiments of identical variants, budget 100 steps): 1.0% called different with no threshold,
2.0% with one call in twenty stretched 1.5-3x by a neighbour, 0.25% with one in three (heavy tails
the sequence does not assume; main's rule: 3.8% with none, 5.5% with one in three). A 10% change at a spread of 5% a call
(200 experiments, 400 steps): a median of 64 steps against main's 72 (52 for the sequence on the
means: the faster call costs a little where nothing stretches a call); with one call in twenty
stretched, 68 steps and 98% called faster, where main's rule left half undecided at 400.

On a CUDA or NPU device each call may be timed by the device's own events rather than the wall
clock: :func:`steadier_clock` picks the clock whose times spread less over warm-up calls timed by
both (``ab_run`` times them), and the result says which.

Decisions, with ``t = log(1 + threshold)``: the interval lies above ``t`` (B faster) or below
``-t`` (B slower): significant; it lies within ``(-t, t)``: no difference beyond the threshold;
else another block, until the step budget is spent (undecided, with an estimate of the steps
that would decide)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .. import presentation
from . import sequential

ALPHA = 0.05
THRESHOLD = 0.05  # the smallest change called real, as compare.MIN_EFFECT
MAX_STEPS = 200
MIN_BLOCKS = sequential.first_bounded(ALPHA)  # the smallest budget: fewer blocks could never decide
ORDERS = ("abba", "baab")


def fastest(a: list[float], b: list[float]) -> float:
    """A block's difference: log of A's faster call over B's faster call."""
    return math.log(min(a)) - math.log(min(b))


def mean_of_logs(a: list[float], b: list[float]) -> float:
    """A block's difference as main's earlier rule took it: the mean log time of A's calls minus B's."""
    return float(np.log(a).mean() - np.log(b).mean())


class ConfidenceSequence:
    """The decision rule: the interval of :mod:`.sequential`, looked at after every block.
    ``alternate`` takes any rule with ``block(a_times, b_times)`` (a block's difference),
    ``interval(diffs, blocks)`` (None: no look after this block of a budget of ``blocks``) and
    ``more_steps(diffs, t, blocks)``; ``bench/ab.py`` runs main's earlier rule through it on the
    same step times."""

    name = "always-valid t-mixture confidence sequence, looked at after every block"

    def __init__(self, alpha: float = ALPHA, block: Callable[[list[float], list[float]], float] = fastest):
        self.alpha = alpha
        self.block = block

    def interval(self, diffs: np.ndarray, blocks: int) -> tuple[float, float, float] | None:
        return sequential.interval(diffs, self.alpha) if diffs.size >= 2 else None

    def more_steps(self, diffs: np.ndarray, t: float, blocks: int) -> int | None:
        """Steps (4 a block) after which an interval of the present mean and spread would clear
        the nearer side of the threshold; None when the mean sits on it."""
        need = sequential.blocks_to_decide(diffs, t, self.alpha)
        return None if need is None else 4 * max(need - diffs.size, 1)


@dataclass(frozen=True)
class ABResult:
    """A against B, interleaved. ``speedup`` = step time A / B (the geometric mean of each block's
    own A/B ratio of the sides' faster calls, the "paired ratio": above 1, B is faster; not ``median_ratio``, the ratio of
    the two medians); ``ci`` its 95% interval after the last block (the always-valid confidence
    sequence; (0, inf) while unbounded);
    ``steps`` the timed calls of both sides (warm-up excluded); ``decided``: the interval lies
    beyond the threshold (``significant``) or within it; ``more_steps`` an estimate of the steps
    that would have decided an undecided result; ``comparison`` (with ``--profile``) the
    breakdown of the difference from a few profiled steps of each."""

    a: str
    b: str
    speedup: float
    ci: tuple[float, float]
    steps: int
    decided: bool
    significant: bool
    threshold: float
    max_steps: int
    more_steps: int | None
    alpha: float  # of the confidence sequence, over all the blocks looked at
    times_a: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))  # seconds, in order
    times_b: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))
    order: str = field(repr=False, default="")  # "abba baab ..." as run
    comparison: object = field(repr=False, default=None)  # --profile: a Comparison of a few profiled steps of each
    clock: str = "wall"  # what timed each call: "wall", or "device" (its events; see steadier_clock)
    spreads: tuple[float, float] | None = None  # on a device: the (wall, device) spreads over the warm-up

    @property
    def median_a(self) -> float:
        return float(np.median(self.times_a)) if self.times_a.size else float("nan")

    @property
    def median_b(self) -> float:
        return float(np.median(self.times_b)) if self.times_b.size else float("nan")

    @property
    def median_ratio(self) -> float:
        """``median_a / median_b``: what the two medians shown say. Not ``speedup``, which pairs
        each block's A with its own B (the tested figure); the two part where the step times
        drift or are skewed, so both are shown, each named."""
        return self.median_a / self.median_b if self.median_b > 0 else float("nan")

    def clock_text(self) -> str:
        """Which clock timed the calls and why, on a device; "" on the CPU (wall time, as always)."""
        if self.spreads is None:
            return ""
        wall, device = self.spreads
        other = "wall" if self.clock == "device" else "device"
        return (f"; {self.clock} time of each call, steadier over the warm-up (spread {min(wall, device):.1%} "
                f"against {max(wall, device):.1%} for the {other} time)")

    def sentence(self) -> str:
        pct = f"{self.threshold:.0%}" if self.threshold >= 0.01 else f"{self.threshold:.1%}"
        figures = (f"median step {self.a} {self.median_a * 1000:,.2f} ms, {self.b} {self.median_b * 1000:,.2f} ms "
                   f"(ratio of the medians {self.median_ratio:.2f}x); {self.steps} steps interleaved{self.clock_text()}")
        bounded = 0 < self.ci[0] and self.ci[1] < math.inf
        ci = f"95% CI {self.ci[0]:.2f}–{self.ci[1]:.2f}x" if bounded else "95% CI not yet bounded"
        evidence = (f"paired ratio {self.a}/{self.b} {self.speedup:.2f}x, {ci}: the geometric mean of the "
                    f"{self.steps // 4} ABBA blocks' own ratios (each side's faster call), an always-valid confidence sequence")
        if self.significant:
            faster = self.speedup > 1
            ratio = max(self.speedup, 1 / self.speedup)
            amount = f"{ratio:.1f}x" if ratio >= 1.5 else f"{ratio - 1:.0%}"
            return (f"{self.b} is {amount} {'faster' if faster else 'slower'} than {self.a} (paired ratio): {figures} "
                    f"({evidence})")
        if self.decided:
            return f"no difference beyond {pct} between {self.a} and {self.b}: {figures} ({evidence})"
        more = f"about {self.more_steps} more steps would decide" if self.more_steps else "more steps would decide"
        return (f"undecided between {self.a} and {self.b} after {self.steps} steps (--max-steps {self.max_steps}): "
                f"{more}; {figures} ({evidence})")

    def to_dict(self) -> dict:
        return {"a": self.a, "b": self.b, "speedup": self.speedup, "ci": list(self.ci), "steps": self.steps,
                "decided": self.decided, "significant": self.significant, "threshold": self.threshold,
                "max_steps": self.max_steps, "more_steps": self.more_steps, "alpha": self.alpha,
                "median_a_s": self.median_a, "median_b_s": self.median_b, "median_ratio": self.median_ratio,
                "clock": self.clock, "verdict": self.sentence()}

    def __str__(self) -> str:
        return presentation.text(self)

    def _repr_html_(self) -> str | None:
        return presentation.html(self)

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(str(self))


def spread(times: dict[str, list[float]]) -> float:
    """The spread of a clock's times over the warm-up: each side's standard deviation of log
    time (ddof 1: a relative spread, so a clock and a slower one compare), pooled over the sides."""
    if any(not min(t, default=1.0) > 0 for t in times.values()):
        return math.inf  # a call the clock saw take no time (an event pair with no work between): not a clock to use
    variances = [np.var(np.log(t), ddof=1) for t in times.values() if len(t) >= 2]
    return float(np.sqrt(np.mean(variances))) if variances else math.inf


def steadier_clock(wall: dict[str, list[float]], device: dict[str, list[float]]) -> tuple[str, tuple[float, float]]:
    """"device" where the device times of the warm-up calls (by side, s) spread less than their
    wall times, else "wall"; with the two spreads. A host that runs ahead of the device's queue,
    or waits on a neighbour for a core, stretches the wall time of some calls but not the device
    time; where the device time is the noisier (calls of a few us, near the events' resolution),
    the wall time stays."""
    spreads = (spread(wall), spread(device))
    return ("device" if spreads[1] < spreads[0] else "wall"), spreads


def alternate(measure: Callable[[str], float], threshold: float = THRESHOLD, max_steps: int = MAX_STEPS,
              rng: np.random.Generator | None = None, names: tuple[str, str] = ("A", "B"),
              rule=None) -> ABResult:
    """Run the sequential interleaved test.

    Parameters
    ----------
    measure : ``measure("a")`` / ``measure("b")`` runs one step of that variant and returns its
        time (seconds; any positive unit). Warm-up is the caller's.
    threshold : the smallest change of step time (fraction, e.g. 0.05) that counts as a difference.
    max_steps : budget of timed steps, both sides together (4 a block; at least ``4 * MIN_BLOCKS``).
    rng : the block orders' random source (seed it for a reproducible order).
    rule : the decision rule (default :class:`ConfidenceSequence` at 5%).
    """
    blocks = max_steps // 4
    if blocks < MIN_BLOCKS:
        raise ValueError(f"max_steps {max_steps}: at least {4 * MIN_BLOCKS} steps are needed ({MIN_BLOCKS} ABBA blocks, "
                         "the fewest the test can decide on)")
    if not threshold >= 0:
        raise ValueError(f"threshold {threshold}: must be 0 or more")
    rng = rng if rng is not None else np.random.default_rng()
    rule = rule if rule is not None else ConfidenceSequence()
    t = math.log1p(threshold)
    times = {"a": [], "b": []}
    diffs, orders = [], []
    decided = significant = False
    lo = hi = mean = float("nan")
    for k in range(1, blocks + 1):
        order = ORDERS[int(rng.integers(2))]
        block = {"a": [], "b": []}
        for side in order:
            took = float(measure(side))
            if not took > 0:
                raise ValueError(f"a step of {side.upper()} took {took} s: step times must be positive")
            block[side].append(took)
            times[side].append(took)
        orders.append(order)
        diffs.append(rule.block(block["a"], block["b"]))
        looked = rule.interval(np.asarray(diffs), blocks)
        if looked is None:
            continue
        mean, lo, hi = looked
        significant = lo > t or hi < -t
        decided = significant or (-t < lo and hi < t)
        if decided:
            break
    d = np.asarray(diffs)
    if mean != mean:  # the budget ended before the rule looked
        mean, lo, hi = float(d.mean()), -math.inf, math.inf
    more = None if decided else rule.more_steps(d, t, blocks)
    return ABResult(names[0], names[1], math.exp(mean), (math.exp(lo), math.exp(hi)), 4 * len(diffs), decided,
                    significant, threshold, max_steps, more, rule.alpha, np.asarray(times["a"]), np.asarray(times["b"]),
                    " ".join(orders))
