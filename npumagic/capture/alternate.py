"""Timing one call of a variant for the interleaved A/B test: ``time.perf_counter`` around the
call, with the device synchronised before and after it when one is in use, so queued device work
of the previous call is not charged to this one and this call's own work is."""

from __future__ import annotations

import sys
import time
from typing import Callable


def device_sync() -> Callable[[], None] | None:
    """The synchronize of the device the process has initialised (torch_npu, else CUDA), or None
    on the CPU. Only modules already imported are looked at: timing never imports torch."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    npu = getattr(torch, "npu", None) if "torch_npu" in sys.modules else None
    if npu is not None and getattr(npu, "is_initialized", lambda: False)():
        return npu.synchronize
    if torch.cuda.is_initialized():
        return torch.cuda.synchronize
    return None


def timer(variants: dict[str, Callable[[], object]], sync: Callable[[], None] | None = None) -> Callable[[str], float]:
    """``measure(side)``: call ``variants[side]`` once and return its time in seconds."""

    def measure(side: str) -> float:
        fn = variants[side]
        if sync is not None:
            sync()
        start = time.perf_counter()
        fn()
        if sync is not None:
            sync()
        return time.perf_counter() - start

    return measure


def warm_up(variants: dict[str, Callable[[], object]], calls: int) -> None:
    """Run each variant ``calls`` times, alternating, untimed (compilation, caches, allocator)."""
    for _ in range(calls):
        for fn in variants.values():
            fn()


def interleave(a: Callable[[], object], b: Callable[[], object], names: tuple[str, str], threshold: float,
               max_steps: int, warmup: int = 2, seed: int | None = None):
    """Warm both variants up, then alternate them until decided (see :mod:`npumagic.analysis.ab`).
    The variants' exceptions propagate (the experiment stops with them)."""
    import numpy as np

    from ..analysis.ab import alternate

    variants = {"a": a, "b": b}
    warm_up(variants, warmup)
    measure = timer(variants, device_sync())  # after the warm-up: it may be what initialised the device
    return alternate(measure, threshold, max_steps, np.random.default_rng(seed), names)
