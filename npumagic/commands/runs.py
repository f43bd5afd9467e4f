"""``runs``: the run history of an output directory, as a table. Its text and JSON are made from
the history's plain rows, without pandas (``npumagic runs`` answers at once); its HTML and
:attr:`RunTable.table` build the DataFrame ``%npuruns`` shows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .base import Command, Result


@dataclass(frozen=True)
class RunTable(Result):
    rows: tuple[dict[str, Any], ...] | None  # None: the directory holds no history
    out: str

    @property
    def table(self):
        """The runs as a DataFrame (:data:`~npumagic.records.RUN_LIST_COLUMNS`); None without a history."""
        from ..records import run_list_frame

        return run_list_frame(list(self.rows)) if self.rows is not None else None

    def to_dict(self) -> dict[str, Any]:
        from ..jsonout import runs_doc

        return runs_doc(list(self.rows) if self.rows is not None else None, self.out)

    def text(self, width: int | None = None) -> str:
        from ..records import RUN_LIST_COLUMNS
        from ..render.tables import Rows, format_runs

        if not self.rows:
            return f"no runs in {self.out}"
        return format_runs(Rows(list(self.rows), RUN_LIST_COLUMNS)).to_text()

    def html(self) -> str:
        from ..render.tables import format_runs

        return format_runs(self.table)._repr_html_() if self.rows else super().html()


def runs(places) -> RunTable:
    return RunTable(tuple(places.runs.rows()) if places.runs is not None else None, str(places.out))


COMMAND = Command("runs", "list the run history of an output directory", (), runs,
                  about="List the runs recorded in the history (name, when, status, backend, steps, median step, "
                        "bottleneck, note).")
