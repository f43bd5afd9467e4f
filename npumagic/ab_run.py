"""The interleaved A/B test run in this process: the variants warmed up and timed by
:mod:`npumagic.capture.alternate`, alternated until :mod:`npumagic.analysis.ab` decides (capture
never imports analysis; this module joins them for %npuab and the pytest plugin)."""

from __future__ import annotations

from typing import Callable

import numpy as np

from .analysis.ab import MIN_BLOCKS, ABResult, alternate  # noqa: F401 - MIN_BLOCKS for the shells
from .capture.alternate import device_sync, timer, warm_up


def interleave(a: Callable[[], object], b: Callable[[], object], names: tuple[str, str], threshold: float,
               max_steps: int, warmup: int = 2, seed: int | None = None) -> ABResult:
    """Warm both variants up, then alternate them until decided (see :mod:`npumagic.analysis.ab`).
    The variants' exceptions propagate (the experiment stops with them)."""
    variants = {"a": a, "b": b}
    warm_up(variants, warmup)
    measure = timer(variants, device_sync())  # after the warm-up: it may be what initialised the device
    return alternate(measure, threshold, max_steps, np.random.default_rng(seed), names)
