"""``query``: SQL over the stored tables of every run of one or many histories (DuckDB; see
:mod:`npumagic.query`). Its text and JSON are made from plain rows, without pandas."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .base import Arg, Command, Result

TEXT_ROWS = 200  # rows a terminal shows; --json and .to_dict() hold them all


@dataclass(frozen=True)
class QueryResult(Result):
    sql: str
    columns: tuple[str, ...]
    rows: tuple[tuple, ...]
    runs: tuple[str, ...]
    tables: tuple[str, ...]

    @property
    def table(self):
        """The rows as a DataFrame."""
        import pandas as pd

        return pd.DataFrame(list(self.rows), columns=list(self.columns))

    def to_dict(self) -> dict[str, Any]:
        from ..jsonout import document
        from ..query import plain

        return document("query", sql=self.sql, columns=list(self.columns),
                        rows=[dict(zip(self.columns, map(plain, row))) for row in self.rows],
                        runs=list(self.runs), tables=list(self.tables))

    def text(self, width: int | None = None) -> str:
        if not self.columns:
            return "the statement returned no table"
        shown = [[_cell(v) for v in row] for row in self.rows[:TEXT_ROWS]]
        widths = [max([len(c), *(len(r[i]) for r in shown)]) for i, c in enumerate(self.columns)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(self.columns, widths)),
                 "  ".join("-" * w for w in widths)]
        lines += ["  ".join(v.rjust(w) if _numeric(row_v) else v.ljust(w)
                            for v, w, row_v in zip(r, widths, row)) for r, row in zip(shown, self.rows)]
        more = len(self.rows) - len(shown)
        lines.append(f"{len(self.rows)} row{'s' if len(self.rows) != 1 else ''} from {len(self.runs)} stored "
                     f"run{'s' if len(self.runs) != 1 else ''}" + (f" ({more} not shown; --json has them all)"
                                                                   if more else ""))
        return "\n".join(line.rstrip() for line in lines)


def _numeric(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    text = str(value).replace("\n", " ")
    return text if len(text) <= 60 else text[:59] + "…"


def query(places, sql: str, histories: list[str] | None = None) -> QueryResult:
    from ..query import run_query

    # a history named is checked as a path is (the MCP server: below its roots)
    dirs = [str(places.check(h)) for h in histories] if histories else [str(places.out or "npumagic_runs")]
    answer = run_query(sql, dirs)
    return QueryResult(sql, tuple(answer.columns), tuple(answer.rows), tuple(k.run for k in answer.runs),
                       tuple(answer.tables))


COMMAND = Command(
    "query", "SQL (DuckDB) over the stored tables of every run of one or many histories",
    (Arg("sql", "a SELECT (or WITH, DESCRIBE, SHOW, EXPLAIN) statement over the views steps, kernels, comm, "
                "links, ranks, memory, events, ... (each with run, history and rank columns)", positional=True,
         metavar="SQL"),
     Arg("histories", "an output directory of the magics whose runs' tables are read (repeatable; default the "
                      "output directory)", many=True, flag="--history", metavar="DIR")),
    query, about="Run SQL over every stored run's tables (per-rank steps, kernels, collectives, links, memory, "
                 "events) in one or many histories, read-only, with DuckDB: e.g. SELECT run, rank, "
                 "max(wall_us) FROM steps GROUP BY ALL. Only reading statements run.")
