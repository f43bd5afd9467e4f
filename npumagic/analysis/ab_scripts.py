"""Two scripts compared on a shared machine (``npumagic ab``): short captures of each, alternated
A B B A B A A B ..., each a fresh process, decided on the paired median steps.

Each capture gives the median of its timed steps. Captures ``2k`` and ``2k + 1`` are neighbours
in time, one of each script (the order makes every pair so), and give one paired difference, the
log of A's median over B's: a neighbour's load that lasts longer than a capture hits both alike
and cancels; the order ABBA BAAB puts A first in half the pairs, so a drift over a pair adds to
the spread, not to one side. The median, not the mean, of a capture's steps: a step stretched by
a neighbour moves it little. The pairs' differences are decided by the always-valid confidence
sequence of :mod:`.sequential` at 5%, looked at after every pair, as ``%npuab`` decides its
ABBA blocks (:mod:`.ab`): beyond the threshold either way, within it, or undecided when
``--max-captures`` is spent, with the captures that would decide."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import sequential
from .ab import ALPHA, THRESHOLD

ORDER = "abbabaab"  # the captures' sides, repeated: every pair (2k, 2k+1) holds one of each
MIN_PAIRS = sequential.first_bounded(ALPHA)  # fewer pairs can never decide
MAX_CAPTURES = 24


def side_of(capture: int) -> str:
    """Which script capture ``capture`` (from 0) runs: "a" or "b"."""
    return ORDER[capture % len(ORDER)]


@dataclass(frozen=True)
class ScriptsResult:
    """Script A against script B by alternated captures. ``medians_a[i]``, ``medians_b[i]``: the
    median step (s) of pair ``i``'s capture of each; ``speedup`` = A / B (the geometric mean of
    the pairs' ratios: above 1, B is faster); ``ci`` its 95% interval ((0, inf) while unbounded);
    ``more_captures`` an estimate of the captures that would decide an undecided result."""

    a: str
    b: str
    medians_a: tuple[float, ...]
    medians_b: tuple[float, ...]
    speedup: float
    ci: tuple[float, float]
    decided: bool
    significant: bool
    threshold: float
    steps_per_capture: int
    max_captures: int
    more_captures: int | None
    alpha: float = ALPHA

    @property
    def captures(self) -> int:
        return 2 * len(self.medians_a)

    @property
    def median_a(self) -> float:
        return float(np.median(self.medians_a)) if self.medians_a else math.nan

    @property
    def median_b(self) -> float:
        return float(np.median(self.medians_b)) if self.medians_b else math.nan

    def interval_text(self) -> str:
        if 0 < self.ci[0] and self.ci[1] < math.inf:
            return f"paired ratio {self.a}/{self.b} {self.speedup:.2f}x, 95% CI {self.ci[0]:.2f}–{self.ci[1]:.2f}x"
        return f"paired ratio {self.a}/{self.b} {self.speedup:.2f}x, 95% CI not yet bounded"

    def sentence(self) -> str:
        figures = (f"median step {self.a} {self.median_a * 1000:,.2f} ms, {self.b} {self.median_b * 1000:,.2f} ms; "
                   f"{self.captures} captures alternated of {self.steps_per_capture} steps each "
                   f"({self.interval_text()}: the {len(self.medians_a)} pairs' ratios of median steps, an always-valid "
                   "confidence sequence)")
        if self.significant:
            ratio = max(self.speedup, 1 / self.speedup)
            amount = f"{ratio:.1f}x" if ratio >= 1.5 else f"{ratio - 1:.0%}"
            return f"{self.b} is {amount} {'faster' if self.speedup > 1 else 'slower'} than {self.a}: {figures}"
        if self.decided:
            return f"no difference beyond {self.threshold:.0%} between {self.a} and {self.b}: {figures}"
        more = f"about {self.more_captures} more captures would decide" if self.more_captures else "more captures would decide"
        return (f"undecided between {self.a} and {self.b} after {self.captures} captures (--max-captures "
                f"{self.max_captures}): {more}; {figures}")

    def to_dict(self) -> dict:
        return {"a": self.a, "b": self.b, "speedup": self.speedup, "ci": list(self.ci), "decided": self.decided,
                "significant": self.significant, "threshold": self.threshold, "captures": self.captures,
                "steps_per_capture": self.steps_per_capture, "max_captures": self.max_captures,
                "more_captures": self.more_captures, "alpha": self.alpha, "median_a_s": self.median_a,
                "median_b_s": self.median_b, "medians_a_s": list(self.medians_a),
                "medians_b_s": list(self.medians_b), "verdict": self.sentence()}

    def __str__(self) -> str:
        return self.sentence()


def decide(medians_a: list[float], medians_b: list[float], names: tuple[str, str], threshold: float = THRESHOLD,
           steps_per_capture: int = 0, max_captures: int = MAX_CAPTURES) -> ScriptsResult:
    """The decision after the pairs so far: ``medians_a[i]`` and ``medians_b[i]`` (s, positive)
    are pair ``i``'s median steps."""
    diffs = np.log(medians_a) - np.log(medians_b)
    t = math.log1p(threshold)
    decided = significant = False
    if diffs.size >= 2:
        mean, lo, hi = sequential.interval(diffs, ALPHA)
        significant = lo > t or hi < -t
        decided = significant or (-t < lo and hi < t)
    else:
        mean, lo, hi = float(diffs.mean()) if diffs.size else 0.0, -math.inf, math.inf
    more = None
    if not decided and diffs.size >= 2:
        need = sequential.blocks_to_decide(diffs, t, ALPHA)
        more = None if need is None else 2 * max(need - diffs.size, 1)
    return ScriptsResult(names[0], names[1], tuple(map(float, medians_a)), tuple(map(float, medians_b)),
                         math.exp(mean), (math.exp(lo), math.exp(hi)), decided, significant, threshold,
                         steps_per_capture, max_captures, more)
