"""Step boundaries: ``npumagic.step()`` in the cell, else every ``optimizer.step()`` (a global
post-hook), else the cell body re-run once per step (``--repeat-cell``)."""

from __future__ import annotations

import contextvars
import re
from typing import Any, Callable

from .options import CaptureOptions

EXPLICIT_STEP = re.compile(r"\bnpumagic\.step\s*\(|\bfrom\s+npumagic\s+import\s+.*\bstep\b")

_current: contextvars.ContextVar["StepClock | None"] = contextvars.ContextVar("npumagic_capture", default=None)


class StepClock:
    """Counts steps and advances the profiler's schedule; stops the profiler once it is done,
    so the rest of the cell runs at full speed."""

    def __init__(self, profiler: Any, options: CaptureOptions, explicit: bool) -> None:
        self.profiler = profiler
        self.options = options
        self.explicit = explicit
        self.steps = 0
        self.optimizer_steps = 0
        self.done = False
        self.stopped = False

    def explicit_step(self) -> None:
        self.explicit = True
        self.advance()

    def optimizer_step(self) -> None:
        self.optimizer_steps += 1
        if not self.explicit:
            self.advance()

    def advance(self) -> None:
        self.steps += 1
        if self.done:
            return
        self.profiler.step()
        if self.steps >= self.options.total_steps:
            self.done = True
            self.stop()

    def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            self.profiler.__exit__(None, None, None)


def step() -> None:
    """Mark the end of one training step inside a profiled cell; does nothing elsewhere.

    Use it when a step is not one ``optimizer.step()`` (gradient accumulation, several
    optimizers, inference loops)::

        %%npuprofile --steps 3
        for batch in loader:
            train_step(batch)
            npumagic.step()
    """
    clock = _current.get()
    if clock is not None:
        clock.explicit_step()


def active() -> "StepClock | None":
    return _current.get()


def activate(clock: StepClock) -> contextvars.Token:
    return _current.set(clock)


def deactivate(token: contextvars.Token) -> None:
    _current.reset(token)


def optimizer_hook(clock: StepClock) -> Callable[[], None]:
    """Register a global optimizer step post-hook ending a step; returns its remover."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    handle = register_optimizer_step_post_hook(lambda optimizer, args, kwargs: clock.optimizer_step())
    return handle.remove
