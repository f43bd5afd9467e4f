"""The live timeline widget: an anywidget whose ES module (timeline.js) draws on a canvas and,
on every zoom or pan, sets ``view`` (the window in ms and its pixel width); the kernel answers in
``tiles`` from the run's :class:`~.lod.TimelineIndex`. The browser never holds the trace, only
the latest answer: a few thousand columns or events."""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path

import anywidget
import numpy as np
import traitlets

from .lod import TimelineIndex

log = logging.getLogger(__name__)
DEFAULT_WIDTH_PX = 1000  # the plot's width until the browser reports its own


class TimelineWidget(anywidget.AnyWidget):
    """Host, device, collective, memory and counter lanes of a trace, one group per rank, zoomed
    and panned in the browser and answered by the kernel.

    ``view``: {t0, t1 (ms from the first step), width (px), seq}; set it (or call :meth:`zoom`,
    :meth:`show_step`) to move the view from Python. ``tiles``: the kernel's answer to the latest
    view (:meth:`TimelineIndex.query`), with its ``seq`` and ``query_ms``. ``probe``/``detail``:
    the browser asks for one event's name, duration, step, shapes and source on hover."""

    _esm = Path(__file__).with_name("timeline.js")
    frame = traitlets.Dict().tag(sync=True)  # lanes, series, steps, extent, title: drawn once
    view = traitlets.Dict().tag(sync=True)
    tiles = traitlets.Dict().tag(sync=True)
    probe = traitlets.Dict().tag(sync=True)
    detail = traitlets.Dict().tag(sync=True)

    def __init__(self, index: TimelineIndex, title: str = "", **kwargs) -> None:
        super().__init__(**kwargs)
        self.index = index
        self.frame = dict(index.layout(), title=title)
        lo, hi = self.frame["extent"]
        self.view = {"t0": lo, "t1": hi, "width": DEFAULT_WIDTH_PX, "seq": 0}

    @traitlets.observe("view")
    def _answer(self, change) -> None:
        v = change["new"]
        if not (np.isfinite(float(v.get("t0", np.nan))) and np.isfinite(float(v.get("t1", np.nan)))):
            log.debug("timeline view %r ignored: no finite window", v)
            return
        began = time.perf_counter()
        answer = self.index.query(float(v["t0"]), float(v["t1"]), int(v.get("width") or DEFAULT_WIDTH_PX))
        answer.update(seq=v.get("seq", 0), query_ms=round((time.perf_counter() - began) * 1e3, 2))
        self.tiles = answer
        log.debug("timeline view %.3f..%.3f ms at %s px answered in %s ms", v["t0"], v["t1"], v.get("width"),
                  answer["query_ms"])

    @traitlets.observe("probe")
    def _describe(self, change) -> None:
        row = change["new"].get("id")
        if row is not None:
            self.detail = dict(self.index.details(int(row)), id=row)

    def zoom(self, t0_ms: float, t1_ms: float) -> None:
        """Show the window from ``t0_ms`` to ``t1_ms`` (ms from the first step)."""
        if not t1_ms > t0_ms:
            raise ValueError(f"zoom {t0_ms}:{t1_ms}: the end must come after the start")
        self.view = {"t0": float(t0_ms), "t1": float(t1_ms), "width": self.view.get("width", DEFAULT_WIDTH_PX),
                     "seq": self.view.get("seq", 0) + 1}

    def show_step(self, step: int, rank: int | None = None) -> None:
        """Show one step (of ``rank``, default the lowest with that step), as a row of the step table names it."""
        found = [s for s in self.frame["steps"] if s["step"] == step and (rank is None or s["rank"] == rank)]
        if not found:
            steps = sorted({s["step"] for s in self.frame["steps"]})
            raise ValueError(f"no step {step}{'' if rank is None else f' on rank {rank}'}; the run has steps {steps}")
        self.zoom(found[0]["start"], found[0]["end"])

    def show(self, where) -> str:
        """Open a finding's "where" (a Finding, or its text) in the view: ``step N`` shows that
        step; else the longest event of the longest operator name the text holds, with as much
        again either side. Returns what was shown."""
        text = str(getattr(where, "where", where))
        step = re.search(r"\bstep (\d+)", text)
        if step:
            self.show_step(int(step.group(1)))
            return f"step {step.group(1)}"
        index = self.index
        held = [k for k, name in enumerate(index.names) if name and name in text]
        if not held:
            raise ValueError(f"{text!r} names no step and no operator of this run")
        code = max(held, key=lambda k: len(index.names[k]))
        best = None
        for lane in index.lanes:
            mine = np.flatnonzero(lane.codes == code)
            if mine.size:
                k = mine[np.argmax(lane.ends[mine] - lane.starts[mine])]
                if best is None or lane.ends[k] - lane.starts[k] > best[1] - best[0]:
                    best = (int(lane.starts[k]), int(lane.ends[k]))
        pad = max(best[1] - best[0], 1_000)
        self.zoom((best[0] - pad) / 1e6, (best[1] + pad) / 1e6)
        return str(index.names[code])
