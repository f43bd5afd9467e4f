"""The memory view as text: the peak and who holds it, the top operators, churn, growth and the
components, each line a sentence with its figure."""

from __future__ import annotations

import pandas as pd

from ..analysis.finding import plural
from ..analysis.memory_view import MemoryView, _size


def memory_text(label: str, view: MemoryView, top: int = 10) -> str:
    read = f"; read {view.read}" if view.read and view.read != label else ""
    out = [f"{label}: memory of {view.device} ({view.source}; PyTorch's pool: {view.pool}{read})"]
    if view.peak_allocated_bytes is not None:
        share = (f", {view.peak_allocated_bytes / view.capacity_bytes:.0%} of the device's "
                 f"{_size(view.capacity_bytes)}" if view.capacity_bytes else "")
        reserved = f"; peak reserved {_size(view.peak_reserved_bytes)}" if view.peak_reserved_bytes else ""  # CPU: none
        if view.unused_reserved_at_peak_bytes is not None:
            reserved += f" (reserved but unused at the peak: {_size(view.unused_reserved_at_peak_bytes)})"
        out.append(f"peak allocated {_size(view.peak_allocated_bytes)}{share}{reserved}"
                   + (f"; at the peak: {view.peak_operator}" if view.peak_operator else ""))
        held = float(view.holders["bytes"].sum())
        if len(view.holders):
            out.append(f"live at the peak, by allocating operator ({_size(held)} of it recorded; the rest was "
                       "allocated before the capture):")
            out += _rows(view.holders, top, lambda r: f"{int(r.blocks)} block{'s' if r.blocks != 1 else ''} {_size(r.bytes)}")
        if len(view.module_holders):
            out.append("live at the peak, by the nn.Module allocating them:")
            out += _rows(view.module_holders.rename(columns={"module": "operator"}), top,
                         lambda r: f"{int(r.blocks)} block{'s' if r.blocks != 1 else ''} {_size(r.bytes)}")
    if len(view.operators):
        out.append(f"operators by bytes allocated ({len(view.operators)}):")
        out += _rows(view.operators.rename(columns={"name": "operator"}), top,
                     lambda r: f"{plural(int(r.allocations), 'alloc', 'allocs')} {_size(r.bytes)}, mean life {_us(r.mean_lifetime_us)}, "
                               f"live at step end {_size(r.live_at_step_end_bytes)}")
    if len(view.steps) and not view.paired:
        out.append("churn: not known (no allocation could be paired with its free)")
    elif len(view.steps):
        per_step = view.churn_count / len(view.steps)
        out.append(f"churn: {view.churn_count} blocks of 1 MiB or more freed within their step "
                   f"({per_step:,.1f} a step, {_size(view.churn_bytes / len(view.steps))} a step)"
                   + (f"; most by {', '.join(view.churn_operators['operator'].head(3))}" if view.churn_count else ""))
    out.append(view.growth.sentence())
    if view.components:
        parts = ", ".join(f"{name} {_size(peak)}" for name, peak in list(view.components.items())[:8])
        out.append(f"components (peak held on the device): {parts}")
    if view.beyond_pool_bytes is not None:
        out.append(f"beyond PyTorch's pool at the process's peak (APP - {view.pool} reserved): "
                   f"{_size(view.beyond_pool_bytes)}")
    if view.static_bytes:
        out.append(f"static graph memory (static_op_mem.csv): {_size(view.static_bytes)}")
    if view.device == "cpu":
        out.append("note: on the CPU, the allocated total carries what earlier captures in this process allocated "
                   "and freed unseen; compare or fit CPU runs made in separate processes")
    out += [f"note: {n}" for n in view.notes]
    return "\n".join(out)


def _rows(frame: pd.DataFrame, top: int, said) -> list[str]:
    width = min(48, max((len(str(n)) for n in frame["operator"].head(top)), default=8))
    lines = [f"  {str(r.operator)[:width]:<{width}}  {said(r)}" for r in frame.head(top).itertuples(index=False)]
    return lines + ([f"  ... {len(frame) - top} more"] if len(frame) > top else [])


def _us(value: float) -> str:
    if pd.isna(value):
        return "-"
    return f"{value / 1e3:,.2f} ms" if value >= 1e3 else f"{value:,.1f} us"
