"""Display objects: RunReport (what %%npuprofile shows under the cell: step table, checklist
verdict, figures) and FigureReport (%npushow). Each carries text/plain and text/html."""

from __future__ import annotations

import html
from dataclasses import dataclass, field

from ..analysis.checklist import Verdict
from ..analysis.metrics import Summary, step_table_text
from ..history import Run
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

    def figure(self, view: str) -> RenderedFigure | None:
        return next((f for f in self.figures if f.view == view), None)

    def _header(self) -> str:
        r = self.run
        return f"npumagic {r.name}: {r.status} — {r.backend} ({r.device}), output in {r.run_dir}"

    def __str__(self) -> str:
        parts = [self._header()]
        parts += [f"  note: {n}" for n in self.notes]
        if self.summary is not None and len(self.summary.steps):
            parts += ["", step_table_text(self.summary.steps)]
        if self.verdict is not None:
            parts += ["", str(self.verdict)]
        saved = [f"{f.view}: {f.path}" for f in self.figures if f.path is not None]
        if saved:
            parts += [""] + saved
        return "\n".join(parts)

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(str(self) if not cycle else "RunReport(...)")

    def _repr_html_(self) -> str:
        parts = [f"<p><b>{html.escape(self._header())}</b></p>"]
        parts += [f"<p style='color:#777;margin:0'>{html.escape(n)}</p>" for n in self.notes]
        if self.summary is not None and len(self.summary.steps):
            parts.append(self.summary.steps.to_html(index=False, float_format=lambda v: f"{v:,.1f}"))
        if self.verdict is not None:
            parts.append(self.verdict._repr_html_())
        parts += [f.html() for f in self.figures]
        return "\n".join(parts)

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, str]:
        return {"text/plain": str(self), "text/html": self._repr_html_()}


@dataclass(frozen=True)
class FigureReport:
    """Figures of one run redrawn by %npushow."""

    run: str
    figures: list[RenderedFigure]

    def __str__(self) -> str:
        return "\n".join(f"{self.run} {f.view}: {f.path or '(not saved)'}" for f in self.figures)

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(str(self))

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, str]:
        return {"text/plain": str(self), "text/html": "\n".join(f.html() for f in self.figures)}


@dataclass(frozen=True)
class CompareReport:
    """%npucompare: the Comparison and its figure. The Comparison's data reads straight off
    the report: ``c = %npucompare a b`` then ``c.significant``, ``c.speedup``, ``c.ci``,
    ``c.kernels``, ``c.breakdown``, ``c.explained_by``, ``c.changed``."""

    comparison: object
    figure: RenderedFigure | None = None

    def __getattr__(self, name: str):
        # c = %npucompare a b; c.significant, c.speedup, c.ci, c.kernels ... (like %timeit -o)
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.comparison, name)

    def __dir__(self):
        return sorted(set(super().__dir__()) | {n for n in dir(self.comparison) if not n.startswith("_")})

    def __str__(self) -> str:
        return str(self.comparison) + (f"\n\nfigure: {self.figure.path}" if self.figure and self.figure.path else "")

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(str(self))

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, str]:
        c = self.comparison
        parts = [f"<p><b>{html.escape(c.sentence())}</b></p>", c.breakdown.drop(columns=["column"]).to_html(index=False, float_format=lambda v: f"{v:,.2f}")]
        if c.changed:
            warn = " — the checklist's rule is one change at a time" if len(c.changed) > 1 else ""
            parts.append(f"<p>What changed{warn}:</p><ul>" + "".join(f"<li>{html.escape(x)}</li>" for x in c.changed) + "</ul>")
        for diff in c.diffs.values():
            parts.append(f"<pre>{html.escape(diff)}</pre>")
        if self.figure is not None:
            parts.append(self.figure.html())
        if len(c.kernels):
            parts.append(c.kernels.head(15).to_html(index=False, float_format=lambda v: f"{v:,.1f}"))
        return {"text/plain": str(self), "text/html": "\n".join(parts)}


@dataclass(frozen=True)
class KernelHistory:
    """%npuhistory: one kernel across the runs (``.table``) and a small plot."""

    kernel: str
    table: object
    figure: RenderedFigure | None = None

    def __str__(self) -> str:
        return f"{self.kernel} across runs:\n" + self.table.to_string(index=False)

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(str(self))

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, str]:
        html_parts = [f"<p><b>{html.escape(self.kernel)}</b> across runs</p>", self.table.to_html(index=False)]
        if self.figure is not None:
            html_parts.append(self.figure.html())
        return {"text/plain": str(self), "text/html": "\n".join(html_parts)}
