"""The interleaved A/B test run in this process: the variants warmed up and timed by
:mod:`npumagic.capture.alternate`, alternated until :mod:`npumagic.analysis.ab` decides (capture
never imports analysis; this module joins them for %npuab and the pytest plugin)."""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from .analysis.ab import MIN_BLOCKS, ABResult, alternate, steadier_clock  # noqa: F401 - MIN_BLOCKS for the shells
from .capture.alternate import device_events, device_sync, time_both, timer, warm_up

CLOCK_CALLS = 3  # warm-up calls of each timed by both clocks on a device, to choose the steadier


def interleave(a: Callable[[], object], b: Callable[[], object], names: tuple[str, str], threshold: float,
               max_steps: int, warmup: int = 2, seed: int | None = None) -> ABResult:
    """Warm both variants up, then alternate them until decided (see :mod:`npumagic.analysis.ab`).
    On a device, :data:`CLOCK_CALLS` more warm-up calls of each are timed by the wall clock and
    by the device's events, and the steadier times the test (:func:`steadier_clock`). The
    variants' exceptions propagate (the experiment stops with them)."""
    variants = {"a": a, "b": b}
    warm_up(variants, warmup)
    sync = device_sync()  # after the warm-up: it may be what initialised the device
    events = device_events() if sync is not None else None
    clock, spreads = "wall", None
    if events is not None:
        clock, spreads = steadier_clock(*time_both(variants, CLOCK_CALLS, sync, events))
    measure = timer(variants, sync, events if clock == "device" else None)
    result = alternate(measure, threshold, max_steps, np.random.default_rng(seed), names)
    return dataclasses.replace(result, clock=clock, spreads=spreads)
