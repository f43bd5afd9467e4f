"""``%npuadvise``'s findings where a widget front end shows them: the same HTML as the static
output, in a small anywidget that gives each finding's row a "timeline" button. A click asks the
kernel, which moves the run's live view (the latest one open: :mod:`.opened`) to the finding
(:meth:`~.widget.TimelineWidget.show`), or opens one under the advice when none is. The advice's
text, its JSON and its attributes are the :class:`~npumagic.analysis.advice.Advice`'s own: a
terminal sees no change.

The HTML goes into the page as the notebook's own ``text/html`` would: every text in it (a
finding naming an operator of the trace) was escaped where the table was built."""

from __future__ import annotations

import logging
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Callable

import anywidget
import traitlets

from ...analysis.advice import Advice
from .bundle import live_bundle

log = logging.getLogger(__name__)


class AdviceWidget(anywidget.AnyWidget):
    """The advice's HTML with a button per finding. ``pick`` (set by the browser: {index, seq})
    is answered in ``picked``: the finding's index and what the view shows, or an error."""

    _esm = Path(__file__).with_name("advice.js")
    html = traitlets.Unicode().tag(sync=True)
    findings = traitlets.List().tag(sync=True)  # per row of the table: {rule, ranks, title}
    pick = traitlets.Any({}).tag(sync=True)  # set by the browser: untrusted, as the timeline's messages
    picked = traitlets.Dict().tag(sync=True)

    def __init__(self, advice: Advice, open_view: Callable[[], object], **kwargs) -> None:
        super().__init__(**kwargs)
        self.advice, self._open_view = advice, open_view
        self.html = advice._repr_html_() or ""
        self.findings = [{"rule": str(f.rule), "ranks": [int(r) for r in getattr(f, "ranks", ()) or ()],
                          "title": str(f.title)} for f in advice.findings]

    def show(self, k: int) -> str:
        """What a click on finding ``k`` (from 0) does: the run's live view moved to it (opened
        first where none is), scrolled into sight. Returns what the view shows."""
        finding = self.advice.findings[k]
        view = self._open_view()
        said = view.show(finding)
        view.reveal += 1
        return said

    @traitlets.observe("pick")
    def _pick(self, change) -> None:
        p = change["new"]
        if isinstance(p, dict) and not p:
            return
        seq = p.get("seq") if isinstance(p, dict) and isinstance(p.get("seq"), int) else None
        k = p.get("index") if isinstance(p, dict) else None
        try:
            if not isinstance(k, int) or isinstance(k, bool) or not 0 <= k < len(self.advice.findings):
                raise ValueError(f"no finding {k!r:.40}; there are {len(self.advice.findings)}")
            self.picked = {"seq": seq, "index": k, "shown": self.show(k)}
        except (ValueError, OSError) as exc:  # a finding the view cannot place; a run whose files are gone
            log.debug("advice pick %r refused: %s", p, exc)
            self.picked = {"seq": seq, "index": k if isinstance(k, int) else None, "error": str(exc)}


@dataclass(frozen=True)
class LinkedAdvice(Advice):
    """An Advice shown as :class:`AdviceWidget` where widgets show (its text unchanged)."""

    live_view: object = None

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        return live_bundle({"text/plain": str(self), "text/html": self._repr_html_() or ""}, self.live_view,
                           include, exclude)


def linked_advice(advice: Advice, run_dir: str | Path | None, open_new: Callable[[], object]) -> LinkedAdvice:
    """``advice`` with its widget: a click moves the latest open live view of ``run_dir`` (a
    profiler output folder, or one holding its trace), else the view ``open_new()`` makes, shown
    under the advice."""
    import ipywidgets

    from .opened import latest

    box = ipywidgets.VBox()

    def open_view():
        view = latest(run_dir) if run_dir else None
        if view is None:
            view = open_new()
            box.children = box.children[:1] + (view,)
        return view

    box.children = (AdviceWidget(advice, open_view),)
    return LinkedAdvice(**{f.name: getattr(advice, f.name) for f in fields(advice)}, live_view=box)
