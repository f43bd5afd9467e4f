"""``export``: the troubleshooting log of a history (each run's verdict, findings and note)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .base import Command, Result


@dataclass(frozen=True)
class Log(Result):
    runs: list
    out: str
    written: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        from ..jsonout import export_doc

        return export_doc(self.runs, self.out, list(self.written))

    def text(self, width: int | None = None) -> str:
        from ..render.export import render_markdown

        return render_markdown(self.runs)


def export(places) -> Log:
    return Log(places.runs.records() if places.runs is not None else [], str(places.out))


COMMAND = Command("export", "the troubleshooting log (verdicts, findings, notes) as Markdown or CSV", (), export,
                  about="The troubleshooting log of the history: each run's verdict, findings and the user's note, as "
                        "Markdown.")
