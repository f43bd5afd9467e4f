"""``%npumem``'s answer (:mod:`npumagic.capture.ledger`'s table): text and HTML."""

from __future__ import annotations

import pandas as pd


class LedgerReport:
    """``%npumem``'s answer: ``.data`` the ledger (:data:`LEDGER_COLUMNS`), text and HTML."""

    def __init__(self, data) -> None:
        self.data = data

    def text(self) -> str:
        from ..analysis.memory_view import _size

        if self.data.empty:
            return "no tensors, modules or optimizers held by the namespace's variables"
        totals = self.data[self.data["device"] != ""].groupby("device")["bytes"].sum()
        out = ["held by the namespace's variables: " + ", ".join(f"{d} {_size(b)}" for d, b in totals.items())]
        for r in self.data.itertuples(index=False):
            where = (f"In[{int(r.cell)}]" if pd.notna(r.cell) else "-") + (f" (run {r.run})" if r.run else "")
            device = r.device or "(shared with a variable above)"
            graph = "; carries an autograd graph (what it saved stays alive until a backward frees it)" if r.graph else ""
            out.append(f"  {r.variable:<20} {r.kind:<18} {device:<8} {_size(r.bytes):>12}  {r.tensors} tensors  "
                       f"{where}{graph}")
        return "\n".join(out)

    def __str__(self) -> str:
        return self.text()

    def _repr_pretty_(self, printer, cycle: bool) -> None:
        printer.text(self.text())

    def _repr_html_(self) -> str:
        import html

        return f"<pre>{html.escape(self.text())}</pre>"
