"""One rank of torch_npu's text export (``export_type=text``), from the richest files it holds.

With trace_view.json: every view, its kernels from kernel_details.csv where present (else from
the ``Ascend Hardware`` compute tasks). Without it: device kernels, HCCL ops and steps from
kernel_details.csv (no host lanes). With step_trace_time.csv alone: torch_npu's own breakdown,
marked as the vendor's.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from ....errors import TraceError
from ... import schema
from .._columns import decimal_us_to_ns_checked, to_int
from .._counters import chrome_counters
from .._kineto_decode import AscendEvent
from .._notes import ReadNotes, reading
from .._stream import EventStream
from .csv_tables import (KERNEL_COLUMNS, VendorTables, good_step_trace, is_collective, kernel_details, l2_cache,
                         memory_record, step_trace_rows, vendor_column)
from .discover import OUTPUT, device_info
from .files import read_csv
from .trace_view import hccl_tasks, process_names, profiler_steps, trace_events


log = logging.getLogger(__name__)


OPTIONAL_FILES = ("kernel_details.csv", "step_trace_time.csv", "op_statistic.csv", "communication.json",
                  "memory_record.csv", "operator_details.csv", "operator_memory.csv", "npu_module_mem.csv",
                  "api_statistic.csv", "communication_matrix.json")


def read_rank(rank_dir: Path, rank: int, notes: ReadNotes) -> dict[str, Any]:
    out = rank_dir / OUTPUT
    trace_path = out / "trace_view.json"
    missing = [f for f in OPTIONAL_FILES if not (out / f).is_file()]
    if missing:
        log.debug("%s lacks %s", out, ", ".join(missing))
    with reading(trace_path):
        try:
            stream = EventStream(trace_path, AscendEvent)
            raw_events = [e for chunk in stream for e in chunk]
            samples = stream.counters
            if repairs := stream.repairs():
                notes.remark(trace_path, repairs)
        except msgspec.DecodeError as exc:
            raise TraceError(trace_path, f"an event does not match the trace_view.json format ({exc})") from None
        events = trace_events(raw_events, trace_path, notes)
        hccl = hccl_tasks(raw_events)
    kernel_path = out / "kernel_details.csv"
    note = ""
    kernels = metrics = details = None
    if kernel_path.is_file():
        with reading(kernel_path):
            kernels, metrics, details = kernel_details(kernel_path, events, notes)
        if kernels.empty:  # plausible: an export with no device kernels
            notes.remark(kernel_path, "no kernel rows; using the Ascend Hardware tasks of trace_view.json")
            kernels = None
    if kernels is not None:
        events = pd.concat([events[events["kind"] != "kernel"], kernels], ignore_index=True)
    elif not kernel_path.is_file():
        note = ("no kernel_details.csv: kernels from the Ascend Hardware tasks of trace_view.json "
                "(no core types, shapes or AI Core metrics)")
    events["rank"] = rank
    steps = profiler_steps(events, rank, notes, trace_path)
    if steps.empty:
        warnings.warn(f"{trace_path}: no ProfilerStep# events; the whole capture is treated as one step "
                      "(call prof.step() in the training loop)", stacklevel=4)
    vendor = VendorTables(out, notes=notes)
    if details is not None:
        vendor["kernel_details"] = details
    counters = pd.concat([chrome_counters(samples, process_names(raw_events), rank, 0),
                          l2_cache(out / "l2_cache.csv", metrics, rank)], ignore_index=True)
    if len(hccl):
        vendor["hccl_tasks"] = hccl
    device = device_info(rank_dir)
    if device:
        vendor["device_info"] = device
    return {
        "rank": rank,
        "events": events,
        "steps": steps,
        "memory": memory_record(out / "memory_record.csv", rank, notes),
        "counters": counters,
        "kernel_metrics": (metrics if metrics is not None else schema.empty(schema.KERNEL_METRIC_COLUMNS)).assign(
            rank=rank),
        "vendor": vendor,
        "note": note,
        "sources": {"breakdown": "kernel_details.csv + trace_view.json (HCCL lanes, ProfilerStep#)",
                    "timeline": "trace_view.json"},
    }


def read_csv_rank(rank_dir: Path, rank: int, notes: ReadNotes) -> dict[str, Any]:
    """Without trace_view.json: device kernels and HCCL ops from kernel_details.csv, steps from its
    Step Id column (each step's device window; its host start from step_trace_time.csv's Preparing)."""
    out = rank_dir / OUTPUT
    raw = read_csv(out / "kernel_details.csv", KERNEL_COLUMNS)
    empty = pd.DataFrame({"ts_ns": pd.Series(dtype=np.int64), "kind": pd.Series(dtype=object),
                          "stream": pd.Series(dtype=np.int64), "correlation": pd.Series(dtype=np.int64)})
    kernels, metrics, details = kernel_details(out / "kernel_details.csv", empty, notes)  # counts the bad rows
    ts, ts_ok = decimal_us_to_ns_checked(raw["Start Time(us)"])
    dur, dur_ok = decimal_us_to_ns_checked(raw["Duration(us)"])
    good = (ts_ok & dur_ok & (dur >= 0) & (ts >= 0) & (raw["Name"] != "Name").to_numpy()
            & ~raw.duplicated(keep="first").to_numpy())  # the rows kernel_details counted as bad
    raw, ts, dur = raw[good].reset_index(drop=True), ts[good], dur[good]
    hccl = is_collective(raw)
    stream = to_int(raw["Stream ID"]) if "Stream ID" in raw else np.full(len(raw), -1, dtype=np.int64)
    comm = pd.DataFrame({
        "name": raw["Name"][hccl].to_numpy(), "kind": "comm", "ts_ns": ts[hccl], "dur_ns": dur[hccl],
        "lane": "HCCL/Communication", "stream": stream[hccl], "device": 0, "correlation": -1,
        "core": "", "type": raw["Name"][hccl].to_numpy(),
    })
    events = pd.concat([kernels, comm], ignore_index=True)
    events["rank"] = rank
    step_id = to_int(raw["Step Id"]) if "Step Id" in raw else np.full(len(raw), -1, dtype=np.int64)
    vendor = VendorTables(out, notes=notes)
    vendor["kernel_details"] = details
    preparing = vendor_column(vendor.get("step_trace_time"), "Preparing")
    frame = pd.DataFrame({"step": step_id, "start": ts, "end": ts + dur})
    frame = frame[frame["step"] >= 0]
    steps = schema.empty(schema.STEP_COLUMNS)
    if len(frame):
        g = frame.groupby("step")
        first, last = g["start"].min(), g["end"].max()
        lead = (preparing.reindex(first.index).fillna(0.0) * 1000).round().astype(np.int64)
        steps = pd.DataFrame({"rank": rank, "step": first.index.to_numpy(), "start_ns": (first - lead).to_numpy(),
                              "end_ns": last.to_numpy()})
    missing = "trace_view.json"
    return {
        "rank": rank, "events": events, "steps": steps, "memory": memory_record(out / "memory_record.csv", rank, notes),
        "counters": l2_cache(out / "l2_cache.csv", metrics, rank),
        "kernel_metrics": metrics.assign(rank=rank),
        "vendor": vendor,
        "note": (f"no {missing}: breakdown from kernel_details.csv and the HCCL op times; step wall time is the "
                 "device window (+ Preparing from step_trace_time.csv); no host lanes, DataLoader, sync or "
                 "host-op views"),
        "sources": {"breakdown": "kernel_details.csv (compute tasks and HCCL ops, Step Id)",
                    "timeline": "kernel_details.csv (device lanes only)",
                    "wall": "device window" + (" + step_trace_time.csv Preparing" if len(preparing) else "")},
    }


def read_step_trace_rank(rank_dir: Path, rank: int, notes: ReadNotes | None = None) -> dict[str, Any]:
    """Only step_trace_time.csv: torch_npu's own breakdown, kept as it is and marked as such;
    rows no profiler writes (a part longer than its Stage, a step listed twice) left out and
    counted in ``notes``, as where the tasks are read too."""
    out = rank_dir / OUTPUT
    path = out / "step_trace_time.csv"
    header, rows = step_trace_rows(path)
    notes = notes if notes is not None else ReadNotes()
    table = good_step_trace(pd.DataFrame(rows, columns=header), notes, path)
    if rows and table.empty:
        raise TraceError(path, f"none of its {len(rows)} step rows is one a profiler writes (each has a part longer "
                               "than its Stage, or lists a step twice)")
    vendor = VendorTables(out, {"step_trace_time": table})
    step = pd.to_numeric(table["Step"])
    stage = pd.to_numeric(table.get("Stage", 0), errors="coerce").fillna(0.0)
    prep = pd.to_numeric(table.get("Preparing", 0), errors="coerce").fillna(0.0)
    wall_ns = ((stage + prep) * 1000).round().astype(np.int64).to_numpy()
    start = np.concatenate([[0], np.cumsum(wall_ns)[:-1]]) if len(wall_ns) else wall_ns
    steps = pd.DataFrame({"rank": rank, "step": step.astype(np.int64).to_numpy(), "start_ns": start,
                          "end_ns": start + wall_ns})
    return {
        "rank": rank, "events": schema.empty(schema.EVENT_COLUMNS), "steps": steps,
        "counters": schema.empty(schema.COUNTER_COLUMNS), "kernel_metrics": schema.empty(schema.KERNEL_METRIC_COLUMNS),
        "memory": memory_record(out / "memory_record.csv", rank, notes), "vendor": vendor,
        "note": ("only step_trace_time.csv: the breakdown is torch_npu's own (not recomputed); no timeline, "
                 "kernel, host-op or sync views"),
        "sources": {"breakdown": "step_trace_time.csv (vendor)", "wall": "step_trace_time.csv Stage + Preparing"},
    }
