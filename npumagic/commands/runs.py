"""``runs``: the run history of an output directory, as a table."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .base import Command, Result


@dataclass(frozen=True)
class RunTable(Result):
    table: Any  # None: the directory holds no history
    out: str

    def to_dict(self) -> dict[str, Any]:
        from ..jsonout import runs_doc

        return runs_doc(self.table, self.out)

    def text(self, width: int | None = None) -> str:
        from ..render.tables import format_runs

        if self.table is None or not len(self.table):
            return f"no runs in {self.out}"
        return format_runs(self.table).to_text()

    def html(self) -> str:
        from ..render.tables import format_runs

        return format_runs(self.table)._repr_html_() if self.table is not None and len(self.table) else super().html()


def runs(places) -> RunTable:
    return RunTable(places.runs.table() if places.runs is not None else None, str(places.out))


COMMAND = Command("runs", "list the run history of an output directory", (), runs,
                  about="List the runs recorded in the history (name, when, status, backend, steps, median step, "
                        "bottleneck, note).")
