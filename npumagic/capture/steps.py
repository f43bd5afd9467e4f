"""Step boundaries: ``npumagic.step()`` in the cell, else every ``optimizer.step()`` (a global
post-hook), else the cell body re-run once per step (``--repeat-cell``)."""

from __future__ import annotations

import contextvars
import re
import time
from typing import Any, Callable

from .options import CaptureOptions
from .quiet import without_profiler_chatter

EXPLICIT_STEP = re.compile(r"\bnpumagic\.step\s*\(|\bfrom\s+npumagic\s+import\s+.*\bstep\b")

_current: contextvars.ContextVar["StepClock | None"] = contextvars.ContextVar("npumagic_capture", default=None)


class StepClock:
    """Counts steps and drives the profiler's schedule.

    The profiler is entered only when the first warm-up step begins (after skip-first and
    wait), numbered so its ProfilerStep# ids match the loop's steps, and left as soon as the
    schedule is done: outside the window the cell pays for one hook call per step, not for
    torch's per-step bookkeeping (~10 us, a few percent of a small model's step).
    """

    def __init__(self, profiler: Any, options: CaptureOptions, explicit: bool) -> None:
        self.profiler = profiler
        self.options = options
        self.explicit = explicit
        self.steps = 0
        self.optimizer_steps = 0
        self.start_at = options.skip_first + options.wait
        self.started = False
        self.done = False
        self.stopped = False
        # told the profiler's action at each change, and the next one ahead of each step()
        self.on_action: Callable[..., None] | None = None
        # (perf_counter_ns at each boundary, what the profiler did during the step that ended
        # there: "off" before it starts and after it stops, else its action's name): the
        # profiled steps beside the unprofiled ones show what profiling itself costs
        self.marks: list[tuple[int, str]] = []

    def _mark(self) -> None:
        running = self.started and not self.stopped
        self.marks.append((time.perf_counter_ns(), getattr(self.profiler.current_action, "name", "?") if running else "off"))

    def step_times(self) -> dict[str, list[float]]:
        """Wall time (us) of each step between two boundaries, by whether the profiler recorded
        it (``profiled``: its active steps) or did not run (``unprofiled``); the first step,
        which carries the loop's own start-up, and warm-up steps are left out."""
        out: dict[str, list[float]] = {"profiled": [], "unprofiled": []}
        for (t0, _), (t1, state) in zip(self.marks[1:], self.marks[2:]):
            key = "unprofiled" if state == "off" else "profiled" if state.startswith("RECORD") else None
            if key:
                out[key].append((t1 - t0) / 1000.0)
        return out

    def begin(self) -> None:
        self.marks.append((time.perf_counter_ns(), "start"))
        if self.start_at == 0:
            self._start()

    def _start(self) -> None:
        # torch.profiler.profile and torch_npu.profiler.profile both number steps from step_num
        # and decide their first action from schedule(step_num) at start().
        self.profiler.step_num = self.steps
        self.profiler.current_action = self.profiler.schedule(self.steps)
        self.started = True
        with without_profiler_chatter():
            self.profiler.__enter__()
        self._tell()

    def _tell(self, action: Any = None, ahead: bool = False) -> None:
        if self.on_action is not None:
            self.on_action(action if action is not None else self.profiler.current_action, ahead=ahead)

    def explicit_step(self) -> None:
        if not self.explicit:
            self.explicit = True
            if self.optimizer_steps:
                # npumagic.step() sits outside the cell's text (in a helper), so the optimizer
                # steps of this first iteration were counted as boundaries: this call ends the
                # same step. Re-base the count on explicit calls before the window opens.
                self._rebase()
                return
        self.advance()

    def _rebase(self) -> None:
        counted, self.steps = self.steps, 1
        if not self.started:
            if self.steps >= self.start_at:
                self._start()
        elif counted != 1 and getattr(self.profiler.current_action, "name", "") == "NONE":
            # Several optimizer steps per iteration already started the profiler on their count:
            # while it only waits, renumber it to ours (once it records, the cycle stays as is).
            self.profiler.step_num = self.steps
            self.profiler.current_action = self.profiler.schedule(self.steps)

    def optimizer_step(self) -> None:
        self.optimizer_steps += 1
        if not self.explicit:
            self.advance()

    def advance(self) -> None:
        self._mark()
        self.steps += 1
        if self.done:
            return
        if not self.started:
            if self.steps >= self.start_at:
                self._start()
            return
        if self.on_action is not None:  # at the boundary, before step() exports a finished cycle
            self._tell(self.profiler.schedule(self.profiler.step_num + 1), ahead=True)
        with without_profiler_chatter():  # a new cycle's trace starts (and the last one stops) in step()
            self.profiler.step()
        self._tell()
        if self.steps >= self.options.total_steps:
            self.done = True
            self.stop()

    def stop(self) -> None:
        if self.started and not self.stopped:
            self.stopped = True
            self._tell("NONE")
            with without_profiler_chatter():
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
