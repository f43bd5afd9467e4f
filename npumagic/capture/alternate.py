"""Timing one call of a variant for the interleaved A/B test: ``time.perf_counter`` around the
call, with the device synchronised before and after it when one is in use, so queued device work
of the previous call is not charged to this one and this call's own work is. What can be timed
so is checked before anything runs (:func:`unfit_step`). On a device a call can also be timed by
the device's own events recorded before and after it (:func:`device_events`, :func:`time_both`):
the time the device's queue took, without the host's scheduling of the call. The test itself
runs in :mod:`npumagic.ab_run`, which joins this timing to :mod:`npumagic.analysis.ab`'s decision."""

from __future__ import annotations

import functools
import inspect
import sys
import time
from typing import Callable

from ..errors import NpumagicError

WARMUP_LIMIT = 1_000  # untimed calls of each: warm-up needs a few; more is a typo (10**9 would never end)
STEP_LIMIT = 100_000  # timed calls, both sides: 17 minutes at 10 ms a step; the decision comes long before


def unfit_step(fn: Callable[..., object]) -> str | None:
    """Why ``fn`` cannot be timed as one step (called with no arguments, its work done when it
    returns), or None when it can. An ``async def`` or a generator function returns an object at
    once and runs nothing, so the timing would measure nothing; a required parameter would fail
    the first call. Callables whose signature cannot be read (some builtins) pass: their first
    call will tell."""
    call = getattr(fn, "__call__", None)
    for f in (fn, call if not inspect.isroutine(fn) and not inspect.isclass(fn) else None):
        if f is None:
            continue
        while isinstance(f, functools.partial):
            f = f.func
        if inspect.iscoroutinefunction(f) or inspect.isasyncgenfunction(f):
            return "an async function: calling it runs nothing until awaited, so there is no step to time"
        if inspect.isgeneratorfunction(f):
            return "a generator function: calling it runs nothing until iterated, so there is no step to time"
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    required = [p.name for p in signature.parameters.values()
                if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if required:
        return f"it needs {'arguments' if len(required) > 1 else 'an argument'} ({', '.join(required)}); a step is called with none"
    return None


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


def device_events() -> Callable[[], object] | None:
    """A maker of timing events on the device the process has initialised (torch_npu's, else
    CUDA's ``Event(enable_timing=True)``), or None on the CPU; as :func:`device_sync`, never
    imports torch."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    npu = getattr(torch, "npu", None) if "torch_npu" in sys.modules else None
    if npu is not None and getattr(npu, "is_initialized", lambda: False)():
        return lambda: npu.Event(enable_timing=True)
    if torch.cuda.is_initialized():
        return lambda: torch.cuda.Event(enable_timing=True)
    return None


def _timed_call(fn: Callable[[], object], side: str, sync: Callable[[], None] | None,
                events: Callable[[], object] | None) -> tuple[float, float | None]:
    """One call's wall time and, with ``events``, its device time (s): the device synchronised
    before it (the previous call's queued work is not this one's) and after it (its own is)."""
    if sync is not None:
        sync()
    marks = (events(), events()) if events is not None else None
    start = time.perf_counter()
    if marks is not None:
        marks[0].record()
    _ran(fn(), side)
    if marks is not None:
        marks[1].record()
    if sync is not None:
        sync()
    wall = time.perf_counter() - start
    return wall, (marks[0].elapsed_time(marks[1]) / 1000.0 if marks is not None else None)  # elapsed_time is in ms


def timer(variants: dict[str, Callable[[], object]], sync: Callable[[], None] | None = None,
          events: Callable[[], object] | None = None) -> Callable[[str], float]:
    """``measure(side)``: call ``variants[side]`` once and return its time in seconds: the wall
    time, or with ``events`` (:func:`device_events`) the device time between two events."""

    def measure(side: str) -> float:
        wall, device = _timed_call(variants[side], side, sync, events)
        return device if device is not None else wall

    return measure


def time_both(variants: dict[str, Callable[[], object]], calls: int, sync: Callable[[], None],
              events: Callable[[], object]) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """``calls`` more warm-up calls of each variant, alternating, each timed by both clocks:
    (wall, device) times in s by side, for choosing the steadier clock."""
    wall: dict[str, list[float]] = {side: [] for side in variants}
    device: dict[str, list[float]] = {side: [] for side in variants}
    for _ in range(calls):
        for side, fn in variants.items():
            w, d = _timed_call(fn, side, sync, events)
            wall[side].append(w)
            device[side].append(d)
    return wall, device


def _ran(returned: object, side: str) -> None:
    """Refuse a step whose call only made an awaitable (a plain function returning a coroutine,
    which :func:`unfit_step` cannot see): its time would be that of making it."""
    if inspect.isawaitable(returned):
        getattr(returned, "close", lambda: None)()  # no "never awaited" warning on top of the error
        raise StepError(f"variant {side.upper()} returned {type(returned).__name__}: an awaitable is not a step; "
                        "give a function that does the step's work before it returns")


class StepError(NpumagicError, TypeError):
    """A variant that is no step (its call returned an awaitable)."""


def warm_up(variants: dict[str, Callable[[], object]], calls: int) -> None:
    """Run each variant ``calls`` times, alternating, untimed (compilation, caches, allocator)."""
    for _ in range(calls):
        for side, fn in variants.items():
            _ran(fn(), side)
