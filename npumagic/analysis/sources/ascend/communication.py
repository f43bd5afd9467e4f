"""communication.json and communication_matrix.json of one rank, as rows.

Each collective call with its time split (elapsed, wait, synchronisation, transit) and its
busiest physical link; each (call, link type) with that link's own transit size and time; the
traffic of each (op, source rank, destination rank) pair.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ....errors import TraceError
from ... import schema
from .._notes import ReadNotes
from .files import json_object, read_json


def communication_tables(out: Path, rank: int,
                         notes: ReadNotes | None = None) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """communication.json -> one row per collective call (with its busiest physical link) and one
    row per (call, link type) with that link's own transit size and time; communication_matrix.json
    -> one row per (op, source rank, destination rank)."""
    rows, link_rows = communication_rows(out / "communication.json", rank, notes=notes)
    comm = pd.DataFrame(rows) if rows else schema.empty(schema.COMM_COLUMNS)
    links = pd.DataFrame(link_rows) if link_rows else schema.empty(schema.LINK_COLUMNS)
    matrix = matrix_rows(out / "communication_matrix.json", rank)
    return comm, links, pd.DataFrame(matrix) if matrix else schema.empty(schema.MATRIX_COLUMNS)


def communication_rows(path: Path, rank: int, calls: bool = True,
                       notes: ReadNotes | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """communication.json's rows (see :func:`communication_tables`): the calls' (none without
    ``calls``) and the links'. A call with a negative time or transit size (no profiler writes
    one) is left out with its links, counted in ``notes``."""
    data = read_json(path)
    rows, link_rows, negative = [], [], []
    for step_key, kinds in data.items():
        step = _step_key(step_key, path)
        kinds = json_object(kinds, path, repr(step_key))
        for group in ("collective", "p2p"):
            for op_key, op in json_object(kinds.get(group) or {}, path, f"{step_key}.{group}").items():
                if op_key.startswith("Total") or not isinstance(op, dict):
                    continue
                name, _, comm_group = op_key.partition("@")
                where = f"{step_key}.{group}.{op_key}"
                t = json_object(op.get("Communication Time Info", {}), path, f"{where}: Communication Time Info")
                bandwidth = json_object(op.get("Communication Bandwidth Info", {}), path,
                                    f"{where}: Communication Bandwidth Info")
                number = lambda value, *what: _number_field(value, path, where, *what)  # noqa: E731
                links = {k: v for k, v in bandwidth.items() if isinstance(v, dict)}
                figures = [number(t.get(k), k) for k in ("Elapse Time(ms)", "Wait Time(ms)", "Transit Time(ms)",
                                                         "Synchronization Time(ms)")]
                figures += [number(info.get(k), link, k) for link, info in links.items()
                            for k in ("Transit Size(MB)", "Transit Time(ms)")]
                negative.append(any(f < 0 for f in figures))
                if negative[-1]:
                    continue
                for link, info in links.items():
                    mb = number(info.get("Transit Size(MB)"), link, "Transit Size(MB)")
                    ms = number(info.get("Transit Time(ms)"), link, "Transit Time(ms)")
                    if mb > 0:
                        link_rows.append({"rank": rank, "step": step, "op": name, "group": comm_group,
                                          "link_type": link, "transit_mb": mb, "transit_ms": ms,
                                          "bandwidth_gbps": mb / ms if ms > 0 else np.nan})
                if not calls:
                    continue
                # SDMA aggregates the on-chip links (HCCS/PCIE/SIO): prefer the physical link.
                physical = {k: v for k, v in links.items() if k != "SDMA"}
                best = max(physical.items() or links.items(),
                           key=lambda kv: number(kv[1].get("Transit Size(MB)"), "Transit Size(MB)"), default=("", {}))
                time_of = lambda key: number(t.get(key), key)  # noqa: E731
                rows.append({
                    "rank": rank, "step": step, "op": name, "group": group,
                    "ts_ns": int(round(time_of("Start Timestamp(us)") * 1000)),
                    "elapsed_us": time_of("Elapse Time(ms)") * 1000,
                    "wait_us": time_of("Wait Time(ms)") * 1000,
                    "sync_us": time_of("Synchronization Time(ms)") * 1000,
                    "transit_us": time_of("Transit Time(ms)") * 1000,
                    "transit_mb": number(best[1].get("Transit Size(MB)"), "Transit Size(MB)"),
                    "bandwidth_gbps": number(best[1].get("Bandwidth(GB/s)"), "Bandwidth(GB/s)"),
                    "link": best[0],
                })
    if notes is not None and any(negative):
        notes.count(path, len(negative), "collective calls", negative_time_or_size=np.array(negative))
    return rows, link_rows


def _step_key(key: str, path: Path) -> int:
    digits = re.sub(r"\D", "", key)
    if len(digits) > 15:
        raise TraceError(path, f"step key {key[:40]!r} is out of range; expected 'step<N>'")
    return int(digits or -1)


def _number_field(value: Any, path: Path, *what: str) -> float:
    """A finite number field of communication*.json (absent or empty: 0), or TraceError naming it
    (``what``: where it is, joined into the message only then): a text or NaN time is not turned
    into 0 silently."""
    try:
        number = float(value or 0)
    except (TypeError, ValueError, OverflowError):
        number = math.nan
    if isinstance(value, bool) or not math.isfinite(number) or abs(number) > 9.2e15:
        where = " ".join(what[:-1])
        field = f"{where}: {what[-1]}" if where else what[-1]
        raise TraceError(path, f"{field} is {str(value)[:40]!r}; expected a finite number")
    return number


def matrix_rows(path: Path, rank: int) -> list[dict[str, Any]]:
    """communication_matrix.json's rows, one per (op, source rank, destination rank). Per op type
    torch_npu keeps the top1/middle/bottom op of each (src, dst) pair by bandwidth and, in newer
    versions, their "total"; the total is used where present, else the middle (median) op, so
    each pair counts once."""
    data = read_json(path)
    rows = []
    for step_key, kinds in data.items():
        step = _step_key(step_key, path)
        kinds = json_object(kinds, path, repr(step_key))
        for group in ("collective", "p2p"):
            ops = json_object(kinds.get(group) or {}, path, f"{step_key}.{group}")
            keys = list(ops)
            for key in keys:
                kind, _, comm_group = key.partition("@")
                base, _, pick = kind.rpartition("-")
                wanted = "total" if f"{base}-total@{comm_group}" in ops else "middle"
                if pick != wanted or not isinstance(ops[key], dict):
                    continue
                for pair, info in ops[key].items():
                    src, _, dst = str(pair).partition("-")
                    if not (src.isdigit() and dst.isdigit() and len(src + dst) < 18) or not isinstance(info, dict):
                        continue
                    mb = _number_field(info.get("Transit Size(MB)"), path, key, pair, "Transit Size(MB)")
                    ms = _number_field(info.get("Transit Time(ms)"), path, key, pair, "Transit Time(ms)")
                    rows.append({"rank": rank, "step": step, "op": info.get("Op Name") or base, "group": comm_group,
                                 "src_rank": int(src), "dst_rank": int(dst),
                                 "link_type": str(info.get("Transport Type", "")), "transit_mb": mb, "transit_ms": ms,
                                 "bandwidth_gbps": mb / ms if ms > 0 else np.nan})
    return rows
