"""Whether two runs' steps differ beyond noise: Welch's t-test on their step times (logarithms)
and on one component's per-step times, each with the run-to-run noise measured from replicate
runs (a random-effects variance component) added where it is known."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .thresholds import MIN_EFFECT

ALPHA = 0.05


@dataclass(frozen=True)
class Noise:
    """Between-run noise of the step time, measured from replicate runs.

    ``sigma`` is the standard deviation of a run's log mean step time between runs of one
    configuration beyond what its steps' own spread explains (a random-effects variance
    component, method of moments); ``runs`` and ``groups`` the replicate runs and
    configurations it rests on; ``df`` its degrees of freedom (runs - groups)."""

    sigma: float = float("nan")
    runs: int = 0
    groups: int = 0

    @property
    def df(self) -> int:
        return self.runs - self.groups

    @property
    def known(self) -> bool:
        return self.df > 0 and self.sigma == self.sigma

    def describe(self) -> str:
        if not self.known:
            return (f"run-to-run noise unknown (assumed {MIN_EFFECT:.0%}): profile the baseline twice to measure it")
        of = f"{self.runs} replicate runs" + (f" of {self.groups} configurations" if self.groups > 1 else "")
        if self.sigma == 0:  # the moment estimate is truncated at zero
            return f"no run-to-run noise beyond the step-to-step spread, measured from {of}"
        return f"run-to-run noise {math.expm1(self.sigma):.1%} measured from {of}"


def between_run_noise(groups: list[list[np.ndarray]], log: bool = True) -> Noise:
    """Between-run noise from replicates.

    Parameters
    ----------
    groups : one list per configuration, holding each replicate run's step times (us); groups
        with fewer than two runs carry no information and are skipped.
    log : of the times' logarithms (sigma a ratio's log); False: of the times themselves (sigma
        in us: a component's, which can be 0 in every step). A run with a NaN time is left out.
    """
    between, df, within, runs, used = 0.0, 0, [], 0, 0
    for group in groups:
        values = [np.asarray(w, float) for w in group if len(w) and not np.isnan(np.asarray(w, float)).any()]
        logs = [np.log(w) for w in values] if log else values
        if len(logs) < 2:
            continue
        means = np.array([x.mean() for x in logs])
        between += float(((means - means.mean()) ** 2).sum())
        df += len(means) - 1
        within += [x.var(ddof=1) / x.size if x.size > 1 else 0.0 for x in logs]
        runs += len(means)
        used += 1
    if df == 0:
        return Noise()
    tau2 = max(0.0, between / df - float(np.mean(within)))
    return Noise(math.sqrt(tau2), runs, used)


@dataclass(frozen=True)
class StepTest:
    """Welch's t-test on log step times: ``ratio`` = geometric mean A / B, ``ci`` its 95% interval."""

    ratio: float
    ci: tuple[float, float]
    p_value: float
    df: float


def step_test(a: np.ndarray, b: np.ndarray, noise: Noise | None = None, alpha: float = ALPHA) -> StepTest:
    """Welch's t-test on ``log(a)`` vs ``log(b)`` (step times, any unit), with the between-run
    variance of ``noise`` added for each run when it is known (Welch-Satterthwaite degrees of
    freedom over all three variance terms). Fewer than two steps on a side: p = 1, no interval."""
    la, lb = np.log(np.asarray(a, float)), np.log(np.asarray(b, float))
    between = 2 * noise.sigma ** 2 if noise is not None and noise.known else 0.0
    d, (lo, hi), p, df = _welch(la, lb, between, noise.df if noise is not None else 0, alpha)
    return StepTest(math.exp(d) if d == d else float("nan"), (math.exp(lo), math.exp(hi)), p, df)


def _welch(x: np.ndarray, y: np.ndarray, between: float = 0.0, between_df: int = 0,
           alpha: float = ALPHA) -> tuple[float, tuple[float, float], float, float]:
    """Welch's t-test of mean(x) - mean(y), with a between-run variance term ``between`` of
    ``between_df`` degrees of freedom added when it is positive (Welch-Satterthwaite degrees of
    freedom over all the terms): (difference, its 1 - alpha interval, two-sided p, df). Fewer
    than two values on a side: p = 1, the interval (-inf, inf)."""
    if x.size < 2 or y.size < 2:
        d = float(x.mean() - y.mean()) if x.size and y.size else float("nan")
        return d, (-math.inf, math.inf), 1.0, float("nan")
    d = float(x.mean() - y.mean())
    terms = [(x.var(ddof=1) / x.size, x.size - 1), (y.var(ddof=1) / y.size, y.size - 1)]
    if between > 0:
        terms.append((between, between_df))
    var = sum(v for v, _ in terms)
    if var <= 0:  # no spread at all: any difference is exact
        return d, (d, d), 0.0 if d else 1.0, float("inf")
    from scipy import special  # a third of a second to import: only when a comparison is made

    df = var ** 2 / sum(v ** 2 / k for v, k in terms if v > 0)
    se = math.sqrt(var)
    p = float(2 * special.stdtr(df, -abs(d) / se))
    half = float(special.stdtrit(df, 1 - alpha / 2)) * se
    return d, (d - half, d + half), p, float(df)


def component_test(a: np.ndarray, b: np.ndarray, noise: Noise | None = None, own: Noise | None = None) -> float:
    """Two-sided p-value of Welch's t on one component's per-step times (us) in A and B. On the
    times themselves, not their logarithms: a component can be 0 in every step of a run. The
    run-to-run noise, where known, is added as for the step, the larger of: the component's own
    (``own``, sigma in us, from the history's replicates: ``between_run_noise(..., log=False)``),
    and the step's (``noise``) scaled to the component's size (a neighbour stretches every
    operator, so a run's component moves by sigma of its own size, the larger side's mean). The
    step's alone does not do: a component's drift between runs hides under jittery steps."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    size = max(abs(a.mean()), abs(b.mean())) if a.size and b.size else 0.0
    terms = [(2 * (noise.sigma * size) ** 2, noise.df)] if noise is not None and noise.known else []
    terms += [(2 * own.sigma ** 2, own.df)] if own is not None and own.known else []
    between, df = max(terms, default=(0.0, 0))
    return _welch(a, b, between, df)[2]
