"""Interleaved A/B: alternate two variants in randomised ABBA blocks and stop as soon as the
step-time ratio is decided, beyond a threshold either way or within it.

The test: each block runs A twice and B twice, in the order ABBA or BAAB (chosen at random), and
gives one paired sample, the block's mean log step time of A minus that of B. A drift that is
linear over the block (a neighbour ramping up, a clock throttling) hits both sides alike and
cancels in that difference; the differences of successive blocks are close to independent. The
95% interval of their mean is a t interval (the spread is unknown and the blocks are few at
first), exponentiated into an interval of the ratio A / B.

The sequential correction: the interval is looked at after 3 blocks, then at blocks growing by
half each time (3, 5, 7, 10, 15, ...) and at the last one, and each look uses alpha / L, with L the
number of looks the step budget allows (Bonferroni). Why this one: peeking after every block at
an unadjusted 95% interval would call identical variants different far more than 5% of the
time; the union bound holds for any dependence between looks, needs no assumption on the
distribution beyond the t interval's own, and costs little because geometric looks are few
(about 10 for 1000 steps). An always-valid confidence sequence would allow a look after every
block, but those assume a known variance bound, which step times do not have. Measured by
simulation (400 experiments of identical variants, ``tests/analysis/test_ab.py``): 3.8% called
different with no threshold at all; with one call in three stretched 1.5-3x by a neighbour, 5.5%
with no threshold (a t interval on a few heavy-tailed blocks is slightly liberal) and 3.5%
at a 2% threshold.

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

ALPHA = 0.05
THRESHOLD = 0.05  # the smallest change called real, as compare.MIN_EFFECT
MAX_STEPS = 200
FIRST_LOOK = 3  # blocks: the first interval has 2 degrees of freedom
GROWTH = 1.5
ORDERS = ("abba", "baab")


def looks(blocks: int) -> list[int]:
    """The blocks after which the interval is looked at, for a budget of ``blocks``."""
    at, k = [], FIRST_LOOK
    while k < blocks:
        at.append(k)
        k = max(k + 1, int(math.ceil(k * GROWTH)))
    return at + [blocks] if blocks >= FIRST_LOOK else []


def interval(diffs: np.ndarray, alpha: float) -> tuple[float, float, float]:
    """Mean of the per-block log differences and its two-sided ``1 - alpha`` t interval (log)."""
    from scipy import special

    n = diffs.size
    mean = float(diffs.mean())
    se = float(diffs.std(ddof=1)) / math.sqrt(n)
    half = float(special.stdtrit(n - 1, 1 - alpha / 2)) * se
    return mean, mean - half, mean + half


@dataclass(frozen=True)
class ABResult:
    """A against B, interleaved. ``speedup`` = step time A / B (the geometric mean of each block's
    own A/B ratio, the "paired ratio": above 1, B is faster; not ``median_ratio``, the ratio of
    the two medians); ``ci`` its interval at the final look (Bonferroni-corrected 95%);
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
    alpha: float  # per look
    times_a: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))  # seconds, in order
    times_b: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))
    order: str = field(repr=False, default="")  # "abba baab ..." as run
    comparison: object = field(repr=False, default=None)  # --profile: a Comparison of a few profiled steps of each

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

    def sentence(self) -> str:
        pct = f"{self.threshold:.0%}" if self.threshold >= 0.01 else f"{self.threshold:.1%}"
        figures = (f"median step {self.a} {self.median_a * 1000:,.2f} ms, {self.b} {self.median_b * 1000:,.2f} ms "
                   f"(ratio of the medians {self.median_ratio:.2f}x); {self.steps} steps interleaved")
        evidence = (f"paired ratio {self.a}/{self.b} {self.speedup:.2f}x, 95% CI {self.ci[0]:.2f}–{self.ci[1]:.2f}x: "
                    f"the geometric mean of the {self.steps // 4} ABBA blocks' own ratios, sequentially corrected")
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
                "max_steps": self.max_steps, "more_steps": self.more_steps, "alpha_per_look": self.alpha,
                "median_a_s": self.median_a, "median_b_s": self.median_b, "median_ratio": self.median_ratio,
                "verdict": self.sentence()}

    def __str__(self) -> str:
        return presentation.text(self)

    def _repr_html_(self) -> str | None:
        return presentation.html(self)

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(str(self))


def _more_steps(diffs: np.ndarray, t: float, alpha: float) -> int | None:
    """Steps (4 a block) after which an interval of the present spread would clear the nearer
    side of the threshold, the mean staying where it is; None when the mean sits on it."""
    from scipy import special

    gap = abs(abs(float(diffs.mean())) - t)
    sd = float(diffs.std(ddof=1))
    if gap <= 0 or not sd == sd:
        return None
    z = float(special.stdtrit(max(diffs.size - 1, 1), 1 - alpha / 2))
    need = math.ceil((z * sd / gap) ** 2)
    return 4 * max(need - diffs.size, 1)


def alternate(measure: Callable[[str], float], threshold: float = THRESHOLD, max_steps: int = MAX_STEPS,
              rng: np.random.Generator | None = None, names: tuple[str, str] = ("A", "B")) -> ABResult:
    """Run the sequential interleaved test.

    Parameters
    ----------
    measure : ``measure("a")`` / ``measure("b")`` runs one step of that variant and returns its
        time (seconds; any positive unit). Warm-up is the caller's.
    threshold : the smallest change of step time (fraction, e.g. 0.05) that counts as a difference.
    max_steps : budget of timed steps, both sides together (4 a block; at least 12).
    rng : the block orders' random source (seed it for a reproducible order).
    """
    blocks = max_steps // 4
    if blocks < FIRST_LOOK:
        raise ValueError(f"max_steps {max_steps}: at least {4 * FIRST_LOOK} steps are needed ({FIRST_LOOK} ABBA blocks)")
    if not threshold >= 0:
        raise ValueError(f"threshold {threshold}: must be 0 or more")
    rng = rng if rng is not None else np.random.default_rng()
    at = looks(blocks)
    alpha = ALPHA / len(at)
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
        diffs.append(np.log(block["a"]).mean() - np.log(block["b"]).mean())
        if k not in at:
            continue
        mean, lo, hi = interval(np.asarray(diffs), alpha)
        significant = lo > t or hi < -t
        decided = significant or (-t < lo and hi < t)
        if decided:
            break
    d = np.asarray(diffs)
    more = None if decided else _more_steps(d, t, alpha)
    return ABResult(names[0], names[1], math.exp(mean), (math.exp(lo), math.exp(hi)), 4 * len(diffs), decided,
                    significant, threshold, max_steps, more, alpha, np.asarray(times["a"]), np.asarray(times["b"]),
                    " ".join(orders))
