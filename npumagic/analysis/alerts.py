"""Regression alerts learned from the history: the band in which a run of a configuration is
expected to land, learned from the earlier runs of the same configuration, and the check of a
new run's median step against it.

The band is a 95% prediction interval for one more run's log median step, from the n earlier
runs' log medians: mean ± t(0.975, n - 1) · s · sqrt(1 + 1/n), never narrower than ±MIN_EFFECT.
Why this one:

- each earlier run's median already carries its own step-to-step noise and the run-to-run drift
  (clocks, caches, neighbours), so their spread is the spread a new run of the same configuration
  has; no separate within-run term is needed, unlike the two-sample test of :mod:`.compare`;
- the t quantile pays for learning the spread from few runs: from 2 runs the band is wide
  (t = 12.7: two runs say little), from 12 it is close to ±2.3 s. A fixed ±k·MAD band would be as
  narrow after 2 runs as after 50, and the MAD of 2 or 3 values is mostly chance;
- the floor: a few runs can agree by chance far better than the machine does (two runs 0.1%
  apart, then a neighbour starts); below MIN_EFFECT, the drift measured here between runs of the
  identical cell, a change is not called real, as in :mod:`.compare` without replicates.
Step times are multiplicative, so the band is symmetric in log time and said as ± percent."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from .student_t import two_sided
from .thresholds import MIN_EFFECT

CONFIDENCE = 0.95
MIN_RUNS = 2  # the fewest earlier runs a spread can be learned from
LAST_RUNS = 20  # the band follows the configuration's recent runs, not its whole past


@dataclass(frozen=True)
class Band:
    """Where a run of a configuration is expected: ``center_us`` (geometric mean of the earlier
    runs' median steps), ``half`` (the half-width in log time) from ``runs`` earlier runs."""

    center_us: float
    half: float
    runs: int

    @property
    def pct(self) -> float:
        """The half-width as a fraction (0.008 = ±0.8%)."""
        return math.expm1(self.half)

    def check(self, median_us: float) -> "Alert":
        change = math.log(median_us / self.center_us)
        return Alert(median_us, self, math.expm1(change), abs(change) > self.half)


@dataclass(frozen=True)
class Alert:
    """A run's median step against its configuration's band: ``change`` (fraction, + slower)
    and whether it lies ``outside`` the band."""

    median_us: float
    band: Band
    change: float
    outside: bool

    def sentence(self) -> str:
        way = "slower" if self.change > 0 else "faster"
        band = f"±{_pct(self.band.pct)} band"
        of = f"its last {self.band.runs} runs"
        if self.outside:
            return f"{_pct(abs(self.change))} {way} than {of}, outside their {band}"
        return f"{_pct(abs(self.change))} {way} than {of}, within their {band}"

    def to_dict(self) -> dict:
        return {"median_us": self.median_us, "center_us": self.band.center_us, "band_pct": 100 * self.band.pct,
                "runs": self.band.runs, "change_pct": 100 * self.change, "outside": self.outside,
                "verdict": self.sentence()}


def _pct(x: float) -> str:
    return f"{x:.1%}" if x < 10 else f"{x:.0%}"


def learn_band(medians_us, confidence: float = CONFIDENCE) -> Band | None:
    """The band of the earlier runs' median steps (us; oldest first, the last LAST_RUNS used);
    None with fewer than MIN_RUNS positive medians."""
    # plain Python, no numpy: `npumagic check` learns a band and imports neither numpy nor pandas
    x = [math.log(v) for v in map(float, medians_us) if math.isfinite(v) and v > 0][-LAST_RUNS:]
    n = len(x)
    if n < MIN_RUNS:
        return None
    half = max(two_sided(n - 1, confidence) * statistics.stdev(x) * math.sqrt(1 + 1 / n), math.log1p(MIN_EFFECT))
    return Band(math.exp(statistics.fmean(x)), half, n)
