"""The child side of ``npumagic ab``: in a script that ``npumagic ab`` starts (armed by the
bootstrap as ``npumagic run``'s capture is, with :data:`~npumagic.capture.inject.ENV`'s
``timing`` set), the step boundaries are timed and no profiler runs, so the steps cost what
they cost unprofiled.

The same boundaries as ``npumagic run``: every ``optimizer.step()``, or ``npumagic.step()``
once the script calls it (its optimizer steps are no longer counted from there). The first
``skip`` steps (start-up, compilation, the allocator's first sizes) are not kept; after ``steps``
more, this process writes their wall times to ``RUN_DIR/npumagic_timed/PID.json`` and ends with
``SystemExit(0)`` raised from the boundary, so a script written for a thousand steps makes a
short capture (its ``finally`` blocks and exit handlers still run). A script that ends sooner
writes what it timed at exit."""

from __future__ import annotations

import atexit
import json
import os
import time
from pathlib import Path

from . import steps as _steps

TIMED_DIR = "npumagic_timed"


class TimedSteps:
    """Times a process's steps for ``npumagic ab`` (the interface of :class:`~npumagic.capture.inject.Injected`
    that the bootstrap and ``npumagic.step()`` call)."""

    def __init__(self, run_dir: str, skip: int, steps: int, rank: int = 0) -> None:
        self.path = Path(run_dir) / TIMED_DIR / f"{os.getpid()}.json"
        self.skip, self.steps, self.rank = skip, steps, rank
        self.explicit = False
        self.boundaries: list[int] = []  # perf_counter_ns at each boundary counted
        self.written = False

    def install(self, hook: bool = True, seen_loaders: list = ()) -> None:
        if hook:
            _steps.optimizer_hook(self)
        _steps.activate(self)
        atexit.register(self.write)

    def explicit_step(self) -> None:
        if not self.explicit:  # npumagic.step() marks the steps from here: the optimizer's no longer do
            self.explicit, self.boundaries = True, []
        self._boundary()

    def optimizer_step(self) -> None:
        if not self.explicit:
            self._boundary()

    def _boundary(self) -> None:
        self.boundaries.append(time.perf_counter_ns())
        if len(self.boundaries) > self.skip + self.steps:
            self.write()
            raise SystemExit(0)

    def step_us(self) -> list[float]:
        """Wall time of each kept step in us: between boundary ``skip`` and the next ones (the
        first boundary only starts the clock, as in ``npumagic run``)."""
        kept = self.boundaries[self.skip:]
        return [(b - a) / 1000.0 for a, b in zip(kept, kept[1:])]

    def write(self) -> None:
        if self.written:
            return
        self.written = True
        from ..safeio import write_atomic

        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, json.dumps({"pid": os.getpid(), "rank": self.rank, "boundaries": len(self.boundaries),
                                            "step_us": self.step_us()}))
