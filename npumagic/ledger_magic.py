"""``%npumem``: the notebook's memory ledger, the tensors, modules (parameters, gradients, buffers),
optimizer states and lists or dicts of tensors the namespace's variables keep alive. A notebook that
runs out of memory after some cells often still holds an earlier model or batch in a variable."""

from __future__ import annotations

from pathlib import Path

from .capture.ledger import ledger
from .names import DB_NAME
from .render.ledger import LedgerReport


def notebook_ledger(magics) -> LedgerReport:
    shell = magics.shell
    return LedgerReport(ledger(shell.user_ns, set(shell.user_ns_hidden), shell.history_manager.input_hist_raw,
                               _profiled_cells(magics)))


def _profiled_cells(magics) -> dict[str, str]:
    """The cell bodies of this history's runs -> run name, without creating a history."""
    if magics._session is None and not (magics._home / Path(magics.output_dir).expanduser() / DB_NAME).exists():
        return {}
    return {r.source.strip(): r.name for r in magics.session.runs.records() if r.source}
