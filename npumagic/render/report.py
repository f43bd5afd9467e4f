"""Display objects: RunReport (what %%npuprofile shows under the cell: step table, checklist
verdict, figures) and FigureReport (%npushow). Each carries text/plain and text/html."""

from __future__ import annotations

import html
from dataclasses import dataclass, field, replace

from ..analysis.checklist import Verdict
from ..analysis.compare_parts import parts_text
from ..analysis.summary import Summary
from ..wording import say
from ..records import Run
from .live.bundle import live_bundle
from ..terminal import display_width, terminal_safe, wrap
from .tables import Table, format_history, format_steps
from .text import comparison_html, comparison_text, verdict_html, verdict_text
from .views import RenderedFigure


@dataclass(frozen=True)
class RunReport:
    """A run's result as shown under a cell; ``.run``, ``.summary``, ``.verdict`` and
    ``.advice`` hold the data (``r = %%npuprofile ...`` keeps it, like ``%timeit -o``)."""

    run: Run
    summary: Summary | None
    verdict: Verdict | None
    notes: list[str] = field(default_factory=list)
    figures: list[RenderedFigure] = field(default_factory=list)
    live: object = None  # the live timeline widget, where a widget front end shows it (``r.live.show_step(3)``)
    live_view: object = None  # the report as widgets: its HTML, the live timeline, the other figures

    @property
    def steps(self):
        return self.summary.steps if self.summary is not None else None

    @property
    def advice(self):
        """The run's findings, most important first (None when the run could not be analysed)."""
        return self.verdict.advice if self.verdict is not None else None

    @property
    def name(self) -> str:
        return self.run.name

    @property
    def step_table(self) -> Table | None:
        """The compact step table shown under the cell (``.data``: the full step frame)."""
        return format_steps(self.summary.steps) if self.summary is not None and len(self.summary.steps) else None

    def figure(self, view: str) -> RenderedFigure | None:
        return next((f for f in self.figures if f.view == view), None)

    def _header(self) -> str:
        r = self.run
        device = f" ({r.device})" if r.device and r.device != r.backend else ""  # a loaded CPU trace says only "cpu"
        backend = f" — {r.backend}{device}" if r.backend else ""  # none where no process of a command stepped
        return f"npumagic {r.name}: {r.status}{backend}, output in {r.run_dir}"

    def _verdict(self) -> Verdict | None:
        """The verdict with the shell's own way to record a conclusion (a notebook's %npunote)
        added to its last step."""
        v = self.verdict
        if v is None or not v.steps or not v.steps[-1][1].startswith("recorded as") or not say("add_note", ""):
            return v
        title, text = v.steps[-1]
        steps = v.steps[:-1] + [(title, text + say("add_note", self.run.name))]
        return replace(v, steps=steps)

    @terminal_safe
    def __str__(self) -> str:
        return self.text(display_width())

    @terminal_safe
    def text(self, width: int | None = None) -> str:
        """The report as text; with ``width`` (a terminal's), its sentences wrapped to it."""
        parts = [wrap(self._header(), width)]
        parts += [wrap(f"  note: {n}", width, 8) for n in self.notes]
        if self.step_table is not None:
            parts += ["", self.step_table.to_text()]
        if self.verdict is not None:
            parts += ["", verdict_text(self._verdict(), width)]
        saved = [f"{f.view}: {f.path}" for f in self.figures if f.path is not None]
        if saved:
            parts += [""] + saved
        return "\n".join(parts)

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(str(self) if not cycle else "RunReport(...)")

    def _repr_html_(self) -> str:
        parts = [f"<p><b>{html.escape(self._header())}</b></p>"]
        parts += [f"<p style='color:#777;margin:0'>{html.escape(n)}</p>" for n in self.notes]
        if self.step_table is not None:
            parts.append(self.step_table._repr_html_())
        if self.verdict is not None:
            parts.append(verdict_html(self._verdict()))
        parts += [f.html() for f in self.figures]
        return "\n".join(parts)

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, str]:
        return live_bundle({"text/plain": str(self), "text/html": self._repr_html_()}, self.live_view, include, exclude)


@dataclass(frozen=True)
class FigureReport:
    """Figures of one run redrawn by %npushow."""

    run: str
    figures: list[RenderedFigure]
    live: object = None  # as RunReport's
    live_view: object = None

    @terminal_safe
    def __str__(self) -> str:
        return "\n".join(f"{self.run} {f.view}: {f.path or '(not saved)'}" + (f"\n{f.text()}" if f.text() else "")
                         for f in self.figures)

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(str(self))

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, str]:
        return live_bundle({"text/plain": str(self), "text/html": "\n".join(f.html() for f in self.figures)},
                           self.live_view, include, exclude)


@dataclass(frozen=True)
class CompareReport:
    """%npucompare: the Comparison and its figure. The Comparison's data reads straight off
    the report: ``c = %npucompare a b`` then ``c.significant``, ``c.speedup``, ``c.ci``,
    ``c.kernels``, ``c.breakdown``, ``c.explained_by``, ``c.changed``."""

    comparison: object
    figure: RenderedFigure | None = None
    parts: tuple = ()  # --by-region / --by-module: PartComparisons (c.parts[0].table)

    def __getattr__(self, name: str):
        # c = %npucompare a b; c.significant, c.speedup, c.ci, c.kernels ... (like %timeit -o)
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.comparison, name)

    def __dir__(self):
        return sorted(set(super().__dir__()) | {n for n in dir(self.comparison) if not n.startswith("_")})

    @terminal_safe
    def __str__(self) -> str:
        return (comparison_text(self.comparison, width=display_width())
                + "".join("\n\n" + parts_text(p, width=display_width()) for p in self.parts)
                + (f"\n\nfigure: {self.figure.path}" if self.figure and self.figure.path else ""))

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(str(self))

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, str]:
        html_text = comparison_html(self.comparison, self.figure.html() if self.figure is not None else "")
        html_text += "".join(f"<pre>{html.escape(parts_text(p))}</pre>" for p in self.parts)
        return {"text/plain": str(self), "text/html": html_text}


@dataclass(frozen=True)
class KernelHistory:
    """%npuhistory: one kernel across the runs (``.table``, a DataFrame) and a small plot."""

    kernel: str
    table: object
    figure: RenderedFigure | None = None

    @terminal_safe
    def __str__(self) -> str:
        return format_history(self.table, self.kernel).to_text()

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(str(self))

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, str]:
        html_parts = [format_history(self.table, self.kernel)._repr_html_()]
        if self.figure is not None:
            html_parts.append(self.figure.html())
        return {"text/plain": str(self), "text/html": "\n".join(html_parts)}
