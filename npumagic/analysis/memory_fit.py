"""Will it fit: the peak at another batch size (or sequence length), from runs of one configuration
at two or more sizes, against the device's capacity.

Assumption (said with every answer): the step's peak allocated memory is linear in the size, a
part that does not depend on it (parameters, gradients, optimizer states) plus a part proportional
to it (activations, the batch): the least-squares line through the runs' peaks. Reserved memory
keeps the largest run's reserved/allocated ratio. Memory that grows faster than the size
(attention over a longer sequence is quadratic in its length) breaks the line: three sizes or more
give a 95% prediction interval that shows it; two sizes give the line alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .thresholds import MEMORY_NEAR_CAPACITY

CONFIDENCE = 0.95
ASSUMPTION = ("the step's peak allocated memory is linear in the size (fixed + per-item x size, least squares "
              "through the runs); reserved keeps the largest run's reserved/allocated ratio")


@dataclass(frozen=True)
class FitPrediction:
    sizes: tuple[int, ...]
    peaks: tuple[float, ...]  # each run's peak allocated (its steps' highest, the first step left out)
    at_size: int
    fixed_bytes: float
    per_item_bytes: float
    predicted_allocated_bytes: float
    interval: tuple[float, float] | None  # 95% prediction interval (3 sizes or more)
    predicted_reserved_bytes: float
    capacity_bytes: float | None
    fits: bool | None  # None: no capacity known
    largest_size: int | None  # the largest size whose reserved stays under MEMORY_NEAR_CAPACITY x capacity

    def sentence(self) -> str:
        from .memory_view import _size

        measured = ", ".join(f"{s}: {_size(p)}" for s, p in zip(self.sizes, self.peaks))
        ci = f" (95% interval {_size(self.interval[0])} to {_size(self.interval[1])})" if self.interval else \
            " (two sizes: no interval)"
        said = (f"at size {self.at_size}: peak allocated {_size(self.predicted_allocated_bytes)}{ci}, reserved "
                f"{_size(self.predicted_reserved_bytes)}; {_size(self.fixed_bytes)} fixed + "
                f"{_size(self.per_item_bytes)} per item, from the peaks measured at {measured}")
        if self.capacity_bytes is None:
            return said + f". Assumed: {ASSUMPTION}. The device's capacity is unknown (give capacity_gib)"
        verdict = "FITS" if self.fits else "DOES NOT FIT"
        largest = (f"; the largest size under {MEMORY_NEAR_CAPACITY:.0%} of it: {self.largest_size}"
                   if self.largest_size is not None else "")
        return f"{verdict} in {_size(self.capacity_bytes)} {said}{largest}. Assumed: {ASSUMPTION}"


def step_peak(view) -> float | None:
    """A run's peak allocated memory: its steps' highest (the first step left out where there are
    more: it creates the optimizer's states), else the capture's."""
    steps = view.steps.dropna(subset=["peak_allocated_bytes"]) if len(view.steps) else view.steps
    if len(steps) > 1:
        steps = steps.iloc[1:]
    return float(steps["peak_allocated_bytes"].max()) if len(steps) else view.peak_allocated_bytes


def predict_fit(points: list[tuple[int, object]], at_size: int, capacity_bytes: float | None = None) -> FitPrediction:
    """The peak at ``at_size`` from ``points`` ((size, MemoryView) of two or more distinct sizes)."""
    sizes = np.array([s for s, _ in points], float)
    peaks = np.array([step_peak(v) for _, v in points], float)
    if len(set(sizes)) < 2:
        raise ValueError("a fit needs runs at two or more different sizes")
    if np.isnan(peaks).any():
        raise ValueError("a run without recorded memory cannot be fitted")
    per_item, fixed = np.polyfit(sizes, peaks, 1)
    allocated = float(fixed + per_item * at_size)
    interval = _prediction_interval(sizes, peaks, per_item, fixed, at_size) if len(sizes) > 2 else None
    largest_view = points[int(np.argmax(sizes))][1]
    ratio = (largest_view.peak_reserved_bytes / largest_view.peak_allocated_bytes
             if largest_view.peak_reserved_bytes and largest_view.peak_allocated_bytes else 1.0)
    ratio = max(ratio, 1.0)
    capacity = capacity_bytes or next((v.capacity_bytes for _, v in points if v.capacity_bytes), None)
    fits = largest = None
    if capacity is not None:
        fits = allocated * ratio <= MEMORY_NEAR_CAPACITY * capacity
        largest = max(int(math.floor((MEMORY_NEAR_CAPACITY * capacity / ratio - fixed) / per_item)), 0) \
            if per_item > 0 else None
    return FitPrediction(tuple(int(s) for s in sizes), tuple(float(p) for p in peaks), at_size, float(fixed),
                         float(per_item), allocated, interval, allocated * ratio, capacity, fits, largest)


def _prediction_interval(x, y, slope, intercept, at) -> tuple[float, float]:
    from scipy import special

    n = len(x)
    residual = y - (slope * x + intercept)
    s = math.sqrt(float((residual**2).sum()) / (n - 2))
    spread = float(((x - x.mean()) ** 2).sum())
    half = float(special.stdtrit(n - 2, 1 - (1 - CONFIDENCE) / 2)) * s * math.sqrt(1 + 1 / n + (at - x.mean())**2 / spread)
    centre = slope * at + intercept
    return (float(centre - half), float(centre + half))
