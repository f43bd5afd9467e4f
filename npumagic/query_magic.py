"""``%npuquery SQL``: the command ``query`` of the core (:mod:`npumagic.commands.query`) over the
notebook's history, the whole line its SQL (no quoting needed)."""

from __future__ import annotations

NAME = "npuquery"


def query_magic(magics):
    """The line magic of NpuMagics ``magics``' session."""
    from IPython.core.error import UsageError

    from .commands import ERRORS, Places, find
    from .magic_input import usage_errors

    def npuquery(line: str):
        """SQL (DuckDB) over the stored tables of every run of the history: the views steps,
        kernels, comm, links, ranks, memory, events, ... each with run and rank columns; only
        reading statements run. Returns the rows (``.table``: a DataFrame; ``.to_dict()``).

        Example: ``%npuquery SELECT run, rank, median(wall_us) FROM steps GROUP BY ALL``
        (``%npu query "SQL" --history DIR`` reads other histories too)"""
        if not line.strip():
            raise UsageError(f"usage: %{NAME} SQL")
        with usage_errors(*ERRORS):
            return find("query").run(Places(session=magics.session), sql=line.strip())

    return npuquery
