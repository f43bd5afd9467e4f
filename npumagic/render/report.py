"""RunReport: what %%npuprofile shows under the cell — the step table, the checklist verdict and
the timeline — as one display object carrying text/plain and text/html."""

from __future__ import annotations

import base64
import html
import io
from dataclasses import dataclass, field
from pathlib import Path

from matplotlib.figure import Figure

from ..analysis.checklist import Verdict
from ..analysis.metrics import Summary, step_table_text
from ..history import Run


def figure_png(fig: Figure, dpi: int = 100) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


@dataclass(frozen=True)
class RunReport:
    """A run's result as shown under a cell; ``.summary``/``.verdict`` hold the data."""

    run: Run
    summary: Summary | None
    verdict: Verdict | None
    notes: list[str] = field(default_factory=list)
    timeline_png: bytes | None = None
    timeline_path: Path | None = None

    @property
    def steps(self):
        return self.summary.steps if self.summary is not None else None

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
        if self.timeline_path is not None:
            parts += ["", f"timeline: {self.timeline_path}"]
        return "\n".join(parts)

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(str(self) if not cycle else "RunReport(...)")

    def _repr_html_(self) -> str:
        parts = [f"<p><b>{html.escape(self._header())}</b></p>"]
        parts += [f"<p style='color:#777'>{html.escape(n)}</p>" for n in self.notes]
        if self.summary is not None and len(self.summary.steps):
            parts.append(self.summary.steps.to_html(index=False, float_format=lambda v: f"{v:,.1f}"))
        if self.verdict is not None:
            parts.append(self.verdict._repr_html_())
        if self.timeline_png:
            data = base64.b64encode(self.timeline_png).decode()
            parts.append(f"<img alt='timeline' src='data:image/png;base64,{data}'/>")
        return "\n".join(parts)

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, str]:
        return {"text/plain": str(self), "text/html": self._repr_html_()}
