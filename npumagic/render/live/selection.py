"""A time range selected on the live timeline, summed up in the kernel: its top host operators
and kernels by time, and per rank the busy share (of the device where the rank has one, else of
its host operators), the collectives' share and the idle time by what the host did meanwhile
(a DataLoader wait, a sync, host operators, or nothing traced)."""

from __future__ import annotations

import numpy as np

from ...analysis.intervals import Spans
from ..tables import shorten
from .lod import duration

TOP = 5
NAME_CHARS = 60  # a name in the widget's lines (the dict keeps it whole)
DEVICE_BUSY = ("kernel", "comm", "memcpy")
DEVICE = ("device", "comm")  # lane groups of device work
# what the host did while the busy lane idled, the first that covers a moment taking it
IDLE_CAUSES = (("dataloader", "DataLoader wait"), ("sync", "sync"), ("host_op", "host operators"))
UNTRACED = "nothing traced"


def aggregate(index, t0_ms: float, t1_ms: float, top: int = TOP) -> dict:
    """The range from ``t0_ms`` to ``t1_ms`` (ms from the index's origin, clipped to the run) of
    a :class:`~.lod.TimelineIndex`: a JSON-ready dict with ``t0``, ``t1``, ``span_ms``,
    ``operators`` and ``kernels`` (the ``top`` names by time inside the range: ``name``, ``ms``
    (their spans clipped to the range, summed: an operator's time includes what it calls),
    ``calls``), ``ranks`` (``rank``, ``busy_of`` "device" or "host", ``busy`` and ``comm`` as
    0..1 shares of the range, ``idle_ms`` and ``idle``: {cause: ms}) and ``lines``, all that as
    the widget shows it."""
    # the range within the run (a selection reaching past its ends sums up what is there)
    lo, hi = (int(round(min(max(t * 1e6, index.lo), index.hi))) for t in (t0_ms, t1_ms))
    if hi <= lo:
        raise ValueError(f"the range {t0_ms:.6g}:{t1_ms:.6g} ms holds no ns of the run "
                         f"({index.lo / 1e6:.6g}:{index.hi / 1e6:.6g} ms)")
    kind_of = np.asarray(index.events["kind"].cat.categories.astype(str))
    kind_codes = index.events["kind"].cat.codes.to_numpy()
    spans: dict[tuple[int, str, str], list] = {}  # (rank, lane group, kind) -> [(starts, ends)]
    timed = {"host_op": [], "kernel": []}  # kind -> [(codes, clipped ns)]
    for lane in index.lanes:
        i, j = lane.window(lo, hi)
        s, e = np.clip(lane.starts[i:j], lo, hi), np.clip(lane.ends[i:j], lo, hi)
        keep = e > s
        s, e, codes, kinds = s[keep], e[keep], lane.codes[i:j][keep], kind_codes[lane.rows[i:j][keep]]
        host = lane.group == "host"
        for code in np.flatnonzero(np.bincount(kinds, minlength=kind_of.size)):  # the kinds present, no sort
            kind, mine = str(kind_of[code]), kinds == code
            spans.setdefault((lane.rank, lane.group, kind), []).append((s[mine], e[mine]))
            if (kind == "host_op" and host) or (kind == "kernel" and not host):
                timed[kind].append((codes[mine], e[mine] - s[mine]))
    span_ns = hi - lo
    ranks = sorted({ln.rank for ln in index.lanes})
    devices = {ln.rank for ln in index.lanes if ln.group == "device"}
    out = {"t0": lo / 1e6, "t1": hi / 1e6, "span_ms": span_ns / 1e6,
           "operators": _top(index, timed["host_op"], top), "kernels": _top(index, timed["kernel"], top),
           "ranks": [_rank(spans, rank, rank in devices, lo, hi) for rank in ranks]}
    out["lines"] = _lines(out)
    return out


def _union(spans: dict, rank: int, groups: tuple, kinds) -> Spans:
    parts = [p for group in groups for kind in kinds for p in spans.get((rank, group, kind), [])]
    if not parts:
        return Spans.empty()
    return Spans.union_of(np.concatenate([s for s, _ in parts]), np.concatenate([e for _, e in parts]))


def _rank(spans: dict, rank: int, device: bool, lo: int, hi: int) -> dict:
    # a rank without a device lane (a CPU run, its collectives in a lane of their own): its host operators
    busy = _union(spans, rank, DEVICE, DEVICE_BUSY) if device else _union(spans, rank, ("host",), ("host_op",))
    comm = _union(spans, rank, DEVICE, ("comm",))
    idle = Spans(np.array([lo]), np.array([hi])) - busy
    causes = {}
    for kind, label in IDLE_CAUSES:
        if not device and kind == "host_op":
            continue  # host operators are what is busy where the rank has no device
        part = idle & _union(spans, rank, ("host",), (kind,))
        causes[label] = part.total / 1e6
        idle = idle - part
    causes[UNTRACED] = idle.total / 1e6
    span = hi - lo
    return {"rank": int(rank), "busy_of": "device" if device else "host", "busy": busy.total / span,
            "comm": comm.total / span, "idle_ms": (span - busy.total) / 1e6, "idle": causes}


def _top(index, parts: list, top: int) -> list[dict]:
    if not parts:
        return []
    codes = np.concatenate([c for c, _ in parts])
    ns = np.concatenate([t for _, t in parts]).astype(np.float64)
    total = np.bincount(codes, weights=ns, minlength=len(index.names))
    calls = np.bincount(codes, minlength=len(index.names))
    best = np.argsort(-total, kind="stable")[:top]
    return [{"name": str(index.names[c]), "ms": total[c] / 1e6, "calls": int(calls[c])} for c in best if calls[c]]


def _lines(agg: dict) -> list[str]:
    lines = [f"selected {duration(agg['span_ms'] * 1e3)} from {agg['t0']:,.3f} ms"]
    for r in agg["ranks"]:
        causes = ", ".join(f"{label} {duration(ms * 1e3)}" for label, ms in r["idle"].items() if ms > 0)
        lines.append(f"rank {r['rank']}: {r['busy_of']} busy {r['busy']:.0%}, comm {r['comm']:.0%}; "
                     f"idle {duration(r['idle_ms'] * 1e3)}" + (f" ({causes})" if causes else ""))
    for title, rows in (("top operators", agg["operators"]), ("top kernels", agg["kernels"])):
        if rows:
            lines.append(f"{title}: " + ", ".join(f"{shorten(r['name'], NAME_CHARS)} {duration(r['ms'] * 1e3)} "
                                                  f"({r['calls']}x)" for r in rows))
    return lines
