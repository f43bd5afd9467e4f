"""The live timeline widget: an anywidget whose ES module (timeline.js) draws on a canvas and,
on every zoom or pan, sets ``view`` (the window in ms and its pixel width); the kernel answers in
``tiles`` from the run's :class:`~.lod.TimelineIndex`. The browser never holds the trace, only
the latest answer: a few thousand columns or events.

What the browser sets (``view``, ``probe``, ``find``, ``select``, ``link``) is read as untrusted: a message of the wrong shape
(a text width, a null ``t0``, an id beyond the events) is answered with ``{"error": ...}`` in
``tiles`` or ``detail``, never with an exception in the comm handler (ipywidgets would print its
traceback in the notebook and the view would wait for an answer that never comes)."""

from __future__ import annotations

import logging
import math
import numbers
import re
import time
from pathlib import Path

import anywidget
import numpy as np
import traitlets

from ...analysis.marks import of_finding
from ...errors import NpumagicError
from .flows import flows
from .legend import legend
from .lod import MAX_WIDTH_PX, VIEW_LIMIT_MS, TimelineIndex
from .lookup import Matches, search
from .opened import remember
from .selection import aggregate

log = logging.getLogger(__name__)
# a note is logged for whoever configured logging, never printed by logging's last resort (stderr):
# it is said on the widget's own thread, and stderr there is whichever cell runs then
log.addHandler(logging.NullHandler())
DEFAULT_WIDTH_PX = 1000  # the plot's width until the browser reports its own


class TimelineWidget(anywidget.AnyWidget):
    """Host, device, collective, memory and counter lanes of a trace, one group per rank, zoomed
    and panned in the browser and answered by the kernel.

    ``view``: {t0, t1 (ms from the first step), width (px), seq}; set it (or call :meth:`zoom`,
    :meth:`show_step`) to move the view from Python. ``tiles``: the kernel's answer to the latest
    view (:meth:`TimelineIndex.query`), with its ``seq`` and ``query_ms``. ``probe``/``detail``:
    the browser asks for one event's name, duration, step, shapes and source on hover.
    ``find``/``found``: a search and its count, the view moved to the match shown (:meth:`search`,
    :meth:`next`, :meth:`previous`). ``select``/``selection``: a shift-dragged range and its
    aggregate (:meth:`select_range`). ``link``/``flow``: a clicked event and its arrows between
    launch and device work. ``notes``: what the widget's own work after its first view left out,
    and why (a critical path lane that could not be built), shown under its legend (:meth:`note`)."""

    _esm = Path(__file__).with_name("timeline.js")
    # lanes, series, steps, extent, title, legend: drawn once, and again when the index grows (grown())
    frame = traitlets.Dict().tag(sync=True)
    # set by the browser: Any, so a message that is no dict reaches _answer / _describe and is
    # answered, instead of failing the trait's type check inside the comm handler
    view = traitlets.Any({}).tag(sync=True)
    tiles = traitlets.Dict().tag(sync=True)
    probe = traitlets.Any({}).tag(sync=True)
    detail = traitlets.Dict().tag(sync=True)
    find = traitlets.Any({}).tag(sync=True)  # set by the browser: {query, regex, move (0, 1, -1), seq}
    found = traitlets.Dict().tag(sync=True)  # the kernel's answer: count, position, the match shown
    select = traitlets.Any({}).tag(sync=True)  # set by the browser (shift-drag): {t0, t1, seq} in ms
    selection = traitlets.Dict().tag(sync=True)  # the range's aggregate (selection.aggregate)
    link = traitlets.Any({}).tag(sync=True)  # set by the browser (a click on an event): {id, seq}
    flow = traitlets.Dict().tag(sync=True)  # its arrows between launch and device work (flows.flows)
    shown = traitlets.Dict().tag(sync=True)  # the finding's mark show() moved the view to (outlined)
    export = traitlets.Any({}).tag(sync=True)  # set by the browser (its Perfetto button): {seq}
    exported = traitlets.Dict().tag(sync=True)  # the file written (export_perfetto), or an error
    reveal = traitlets.Int(0).tag(sync=True)  # raised by a click on a finding elsewhere: the view scrolls into sight
    notes = traitlets.List(traitlets.Unicode()).tag(sync=True)

    def __init__(self, index: TimelineIndex, title: str = "", source: str | None = None, run: str = "",
                 **kwargs) -> None:
        super().__init__(**kwargs)
        self.index = index
        self.title, self.source = title, source  # the profiler output read again to export it (none held)
        self.run_name = run  # the history's name of the run shown, or "" (its export's default file name)
        self.frame = self._frame()
        lo, hi = self.frame["extent"]
        self.view = {"t0": lo, "t1": hi, "width": DEFAULT_WIDTH_PX, "seq": 0}
        self._matches: Matches | None = None
        self._at = -1  # the match shown
        remember(source, self)

    def _frame(self) -> dict:
        with self.index.lock:
            return dict(self.index.layout(), title=self.title, legend=legend(self.index))

    def note(self, text: str) -> None:
        """Say ``text`` with this widget (under its legend, and logged): what its own thread was
        told (:func:`~.said.said_to`), rather than a warning in whichever cell runs then."""
        log.warning("%s", text)
        self.notes = [*self.notes, text]

    def grown(self) -> None:
        """Send the lanes again, after the index grew (its critical path's lanes, built after the
        first view): the browser draws them and asks its view again (the answer then holds them)."""
        self.frame = self._frame()

    @traitlets.observe("view")
    def _answer(self, change) -> None:
        v = change["new"]
        seq = _seq(v.get("seq", 0) if isinstance(v, dict) else None)
        try:
            t0, t1, width = _read_view(v)
        except ValueError as exc:
            log.debug("timeline view %r refused: %s", v, exc)
            self.tiles = {"seq": seq, "error": f"view refused: {exc}", "lanes": [], "names": [], "series": []}
            return
        began = time.perf_counter()
        with self.index.lock:
            answer = self.index.query(t0, t1, width)
        answer.update(seq=seq, query_ms=round((time.perf_counter() - began) * 1e3, 2))
        self.tiles = answer
        log.debug("timeline view %.3f..%.3f ms at %s px answered in %s ms", t0, t1, width, answer["query_ms"])

    @traitlets.observe("probe")
    def _describe(self, change) -> None:
        p = change["new"]
        if isinstance(p, dict) and "id" not in p:
            return  # nothing asked (the browser's empty probe)
        row = p.get("id") if isinstance(p, dict) else None
        try:
            if not isinstance(p, dict):
                raise ValueError(f"a probe is {{\"id\": N}}, not {type(p).__name__}")
            with self.index.lock:
                self.detail = dict(self.index.details(_event_id(row, len(self.index.events))), id=row)
        except ValueError as exc:
            log.debug("timeline probe %r refused: %s", p, exc)
            self.detail = {"id": _seq(row), "error": f"probe refused: {exc}"}

    @traitlets.observe("find")
    def _find(self, change) -> None:
        f = change["new"]
        if isinstance(f, dict) and not f:
            return  # nothing asked
        seq = _seq(f.get("seq", 0) if isinstance(f, dict) else None)
        try:
            if not isinstance(f, dict):
                raise ValueError(f"a search is {{query, regex, move}}, not {type(f).__name__}")
            move = f.get("move", 0)
            if move not in (0, 1, -1) or isinstance(move, bool):
                raise ValueError(f"move {move!r:.40}: 0 (search), 1 (next) or -1 (previous)")
            query, regex = f.get("query"), f.get("regex", False)
            if not isinstance(regex, bool):
                raise ValueError(f"regex {regex!r:.40}: true or false")
            with self.index.lock:  # the view it moves to is answered under it too (a lock of this thread again)
                if move and self._matches is not None and (query, regex) == (self._matches.query, self._matches.regex):
                    self._step(move)
                else:
                    self.search(query, regex)
            self.found = dict(self.found, seq=seq)
        except ValueError as exc:
            log.debug("timeline search %r refused: %s", f, exc)
            self.found = {"seq": seq, "error": f"search refused: {exc}", "count": 0}

    @traitlets.observe("select")
    def _select(self, change) -> None:
        s = change["new"]
        if isinstance(s, dict) and not s:
            return
        seq = _seq(s.get("seq", 0) if isinstance(s, dict) else None)
        try:
            t0, t1, _ = _read_view(dict(s, width=None) if isinstance(s, dict) else s)
            with self.index.lock:
                self.selection = dict(aggregate(self.index, t0, t1), seq=seq)
        except ValueError as exc:
            log.debug("timeline selection %r refused: %s", s, exc)
            self.selection = {"seq": seq, "error": f"selection refused: {exc}"}

    @traitlets.observe("link")
    def _link(self, change) -> None:
        p = change["new"]
        if isinstance(p, dict) and "id" not in p:
            return
        seq = _seq(p.get("seq", 0) if isinstance(p, dict) else None)
        try:
            if not isinstance(p, dict):
                raise ValueError(f"a click is {{\"id\": N}}, not {type(p).__name__}")
            with self.index.lock:
                self.flow = dict(flows(self.index, _event_id(p.get("id"), len(self.index.events))), seq=seq, id=p["id"])
        except ValueError as exc:
            log.debug("timeline click %r refused: %s", p, exc)
            self.flow = {"seq": seq, "error": f"click refused: {exc}", "arrows": []}

    @traitlets.observe("export")
    def _export(self, change) -> None:
        e = change["new"]
        if isinstance(e, dict) and not e:
            return
        seq = _seq(e.get("seq", 0) if isinstance(e, dict) else None)
        try:
            if not isinstance(e, dict):
                raise ValueError(f"an export is {{seq}}, not {type(e).__name__}")
            self.exported = dict(self.export_perfetto(), seq=seq)  # the browser names no path: the default one
        except (ValueError, OSError, NpumagicError) as exc:
            log.debug("timeline export %r failed: %s", e, exc)
            self.exported = {"seq": seq, "error": f"export failed: {exc}"}

    def export_perfetto(self, path: str | Path | None = None) -> dict:
        """Write this run as a Perfetto / chrome://tracing file (``npumagic trace``'s, with the
        findings), read again from its profiler output; default ``NAME.perfetto.json`` in the
        working directory, NAME the run's (else the profiler output's). Returns what was written, with ``lines`` saying it."""
        if not self.source:
            raise ValueError("this timeline was made from a trace in memory, with no profiler output to read "
                             "again: write it with npumagic.render.perfetto.write_perfetto(trace, path)")
        from ...analysis import job, load
        from ...analysis.advice import advise_run
        from ...named_runs import name_for
        from ...names import PERFETTO_SUFFIX
        from ..perfetto import write_perfetto

        label = self.title or str(self.source)
        findings = advise_run(job.analyze(self.source, progress=False), label, every_rank=True, low=True).findings
        out = Path(path) if path is not None else Path.cwd() / ((self.run_name or name_for(Path(self.source))) + PERFETTO_SUFFIX)
        done = write_perfetto(load(self.source), out, findings, title=label).as_dict()
        done["lines"] = [f"wrote {out}: {done['slices']:,} slices, {done['steps']} steps, "
                         f"{sum(done['marks'].values())} marks, {done['findings']} findings",
                         "open it in https://ui.perfetto.dev or chrome://tracing"]
        return done

    def search(self, query: str, regex: bool = False) -> int:
        """Find the events whose name holds ``query`` (case-insensitive; a regular expression with
        ``regex=True``) and show the first one from the view's start on. Returns how many there
        are; :meth:`next` and :meth:`previous` show the others."""
        with self.index.lock:
            self._matches = search(self.index, query, regex)
        if not len(self._matches):
            self._at = -1
            self.found = {"query": query, "regex": regex, "count": 0, "at": 0, "names": []}
            return 0
        self._at = self._matches.after(float(self.view.get("t0", 0)) * 1e6)
        self._show_match()
        return len(self._matches)

    def next(self) -> int:
        """Show the next match of the last :meth:`search` (after the last, the first); its position from 1."""
        return self._step(1)

    def previous(self) -> int:
        """Show the previous match of the last :meth:`search`; its position from 1."""
        return self._step(-1)

    def select_range(self, t0_ms: float, t1_ms: float) -> dict:
        """The aggregate of the range from ``t0_ms`` to ``t1_ms`` (ms from the first step), as a
        shift-drag in the view shows it (:func:`~.selection.aggregate`)."""
        self.select = {"t0": t0_ms, "t1": t1_ms, "seq": (self.selection.get("seq") or 0) + 1}
        if "error" in self.selection:
            raise ValueError(self.selection["error"])
        return self.selection

    def _step(self, move: int) -> int:
        if self._matches is None:
            raise ValueError("nothing searched yet: search(text) first")
        if len(self._matches):
            self._at = (self._at + move) % len(self._matches)
            self._show_match()
        return self._at + 1

    def _show_match(self) -> None:
        m, k = self._matches, self._at
        start, end = int(m.starts[k]), int(m.ends[k])
        pad = max(end - start, 1_000)
        # the view first: the browser then has the window when the count arrives
        self.zoom((start - pad) / 1e6, (end + pad) / 1e6)
        # the window again with the count: the browser drops a kernel's view that crosses one of its own
        self.found = {"query": m.query, "regex": m.regex, "count": len(m), "at": k + 1, "names": m.names,
                      "lane": int(m.lanes[k]), "id": int(m.rows[k]), "name": str(self.index.events["name"].iat[int(m.rows[k])]),
                      "start": start / 1e6, "end": end / 1e6, "t0": self.view["t0"], "t1": self.view["t1"]}

    def zoom(self, t0_ms: float, t1_ms: float) -> None:
        """Show the window from ``t0_ms`` to ``t1_ms`` (ms from the first step; finite)."""
        for end, value in (("start", t0_ms), ("end", t1_ms)):
            if not (_is_number(value) and _finite(value)):
                raise ValueError(f"zoom {t0_ms}:{t1_ms}: the {end} must be a finite number of ms from the first step")
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
        """Open a finding in the view: a Finding at its largest mark in the findings lane (an
        idle gap of its cause, a blocking sync, a wait for a slower rank, the memory peak:
        :func:`~npumagic.analysis.marks.of_finding`), outlined (``shown``), with as much again
        either side. Else its "where" (or a text): ``step N`` shows that step; else the longest
        event of the longest operator name the text holds; else the largest mark of a kind the
        text names ("idle gap", "memory peak"); else the longest event of the names holding the
        first item the text lists (a kernel type: "TransData", "MatMulV2 (775 µs), ..."). Returns
        what was shown."""
        mine = of_finding(self.index.marks, where) if not isinstance(where, str) and len(self.index.marks) else ()
        if len(mine):
            return self._show_mark(mine.iloc[0])
        text = str(getattr(where, "where", where))
        step = re.search(r"\bstep (\d+)", text)
        if step:
            self.show_step(int(step.group(1)))
            return f"step {step.group(1)}"
        index = self.index
        held = [k for k, name in enumerate(index.names) if name and name in text]
        if not held:
            mine = of_finding(index.marks, text) if len(index.marks) else ()
            if len(mine):
                return self._show_mark(mine.iloc[0])
        codes = [max(held, key=lambda k: len(index.names[k]))] if held else _holding(index.names, text)
        best = None  # (start, end, code) of the longest event of those names
        for lane in index.lanes:
            mine = np.flatnonzero(np.isin(lane.codes, codes))
            if mine.size:
                k = mine[np.argmax(lane.ends[mine] - lane.starts[mine])]
                if best is None or lane.ends[k] - lane.starts[k] > best[1] - best[0]:
                    best = (int(lane.starts[k]), int(lane.ends[k]), int(lane.codes[k]))
        if best is None:
            raise ValueError(f"{text!r} names no step and no operator of this run, nor a kind of mark")
        pad = max(best[1] - best[0], 1_000)
        self.zoom((best[0] - pad) / 1e6, (best[1] + pad) / 1e6)
        return str(index.names[best[2]])

    def _show_mark(self, mark) -> str:
        start, end = int(mark["start_ns"]), int(mark["end_ns"])
        pad = max(end - start, 1_000)
        self.zoom((start - pad) / 1e6, (end + pad) / 1e6)
        self.shown = {"rank": int(mark["rank"]), "kind": str(mark["kind"]), "start": start / 1e6, "end": end / 1e6,
                      "label": str(mark["label"])}
        return str(mark["label"])


def _holding(names, text: str) -> list[int]:
    """The names holding the first item of ``text`` that any name holds, where it lists items
    ("ForeachAddList (1954 µs), MatMulV2 (775 µs)": a finding's kernel types, each a part of
    kernel names) or is one ("TransData")."""
    for item in text.split(","):
        word = item.split(" (")[0].strip()
        found = [k for k, name in enumerate(names) if name and len(word) >= 3 and word in name]
        if found:
            return found
    return []


def _is_number(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _finite(value: numbers.Real) -> bool:
    # an int is finite however long (math.isfinite would overflow converting 10**400 to float)
    return isinstance(value, numbers.Integral) or math.isfinite(value)


def _read_view(v: object) -> tuple[float, float, int]:
    """(t0 ms, t1 ms, width px) of a view message, ends clamped to ±VIEW_LIMIT_MS and the width
    to 1..MAX_WIDTH_PX; ValueError naming what is wrong with it."""
    if not isinstance(v, dict):
        raise ValueError(f"a view is {{t0, t1, width, seq}}, not {type(v).__name__}")
    for key in ("t0", "t1"):
        value = v.get(key)
        if not _is_number(value) or value != value:
            raise ValueError(f"{key} {value!r:.40}: a number of ms from the first step")
    if not v["t1"] > v["t0"]:
        raise ValueError(f"t1 {v['t1']!r:.40} is not after t0 {v['t0']!r:.40}")
    # clamped before float(): an int of 400 digits would overflow it; a window wholly beyond the
    # limit becomes one of the narrowest width there (TimelineIndex.query widens it)
    ends = [float(max(min(v[key], VIEW_LIMIT_MS), -VIEW_LIMIT_MS)) for key in ("t0", "t1")]
    width = v.get("width")
    if width is None:
        return ends[0], ends[1], DEFAULT_WIDTH_PX
    if not _is_number(width) or width != width:
        raise ValueError(f"width {width!r:.40}: a number of pixels")
    return ends[0], ends[1], int(max(min(width, MAX_WIDTH_PX), 1))


def _event_id(row: object, events: int) -> int:
    """A probe's ``id`` as a row of the index's events; ValueError when it names none."""
    if not _whole(row):
        raise ValueError(f"id {row!r:.40}: an event id (a whole number)")
    if not 0 <= row < events:
        raise ValueError(f"no event {row!r:.40}; ids run from 0 to {events - 1}")
    return int(row)


def _whole(value: object) -> bool:
    return _is_number(value) and _finite(value) and int(value) == value


def _seq(value: object) -> int | None:
    """A message's ``seq`` or ``id`` to echo: a whole number JavaScript holds exactly, else None
    (NaN or 10**400 would not be strict JSON, or not survive the browser's parse)."""
    return int(value) if _whole(value) and abs(value) <= 2**53 else None
