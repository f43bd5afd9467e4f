"""Reader for torch_npu profiler output: ``*_ascend_pt`` directories with ``ASCEND_PROFILER_OUTPUT/``.

Device compute kernels come from ``kernel_details.csv`` (or, without it, from the ``Ascend
Hardware`` compute tasks in ``trace_view.json``); collectives from the ``HCCL`` group lanes;
host ops, DataLoader spans, ProfilerStep windows and CANN runtime calls from ``trace_view.json``.
The vendor's own derived tables (step_trace_time.csv, op_statistic.csv, ...) are kept in
``meta["vendor"]`` for cross-checks, never used to compute npumagic's own metrics.
"""

from __future__ import annotations

import json
import logging
import re
import warnings
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from ...errors import TraceError
from .. import schema
from ._columns import categorical, decimal_us_to_ns, to_int, to_ns
from ._kineto_decode import decode_ascend_events
from .kineto import DATALOADER_PREFIX, STEP_NAME, decode_file

log = logging.getLogger(__name__)

OUTPUT = "ASCEND_PROFILER_OUTPUT"
COMPUTE_TASKS = frozenset({"AI_CORE", "AI_VECTOR_CORE", "AI_CPU", "MIX_AIC", "MIX_AIV", "DSA_SQE"})
MEMCPY_TASKS = frozenset({"PCIE_DMA_SQE", "SDMA_SQE"})
KERNEL_COLUMNS = ("Name", "Type", "Accelerator Core", "Start Time(us)", "Duration(us)")
OPTIONAL_FILES = ("kernel_details.csv", "step_trace_time.csv", "op_statistic.csv", "communication.json",
                  "memory_record.csv", "operator_details.csv", "operator_memory.csv", "npu_module_mem.csv",
                  "api_statistic.csv", "communication_matrix.json")
VENDOR_CSVS = ("step_trace_time.csv", "op_statistic.csv", "operator_details.csv", "operator_memory.csv",
               "npu_module_mem.csv", "api_statistic.csv")


def rank_dirs(path: Path) -> list[Path]:
    """The torch_npu rank directories at or directly below ``path`` (empty when none)."""
    if (path / OUTPUT).is_dir():
        return [path]
    found = [p for p in sorted(path.iterdir()) if p.is_dir() and (p / OUTPUT).is_dir()]
    if not found:
        found = [p.parent for p in sorted(path.glob(f"*/*/{OUTPUT}")) if p.is_dir()]
    return found


def read(paths: list[Path], progress=None) -> schema.Trace:
    """Read one or more ``*_ascend_pt`` rank directories into one Trace."""
    parts = []
    for rank_dir in paths:
        parts.append(_read_rank(rank_dir))
        if progress is not None:
            progress.update(1)
    ranks = [p["rank"] for p in parts]
    if len(set(ranks)) != len(ranks):  # unlabelled ranks: number them in directory order
        for i, p in enumerate(parts):
            p["rank"] = i
            for key in ("events", "steps", "memory", "comm"):
                p[key]["rank"] = i
    meta = {
        "backend": "npu",
        "format": "ascend",
        "path": str(paths[0].parent if len(paths) > 1 else paths[0]),
        "files": [str(p) for p in paths],
        "device_name": "Ascend NPU",
        "world_size": len(parts),
        "settings": parts[0]["settings"],
        "environment": parts[0]["environment"],
        "vendor": {p["rank"]: p["vendor"] for p in parts},
    }
    cat = lambda key: pd.concat([p[key] for p in parts], ignore_index=True)  # noqa: E731
    return schema.finish(cat("events"), cat("steps"), cat("memory"), cat("comm"), meta)


def _read_rank(rank_dir: Path) -> dict[str, Any]:
    out = rank_dir / OUTPUT
    trace_path = out / "trace_view.json"
    if not trace_path.is_file():
        if (out / "ascend_pytorch_profiler.db").exists() or list(out.glob("*.db")):
            raise TraceError(out, "holds only the db export; re-run with export_type=Text "
                                  "(torch_npu's default) so trace_view.json and the CSV files are written")
        raise TraceError(trace_path, "missing; a torch_npu text export writes ASCEND_PROFILER_OUTPUT/trace_view.json")
    missing = [f for f in OPTIONAL_FILES if not (out / f).is_file()]
    if missing:
        log.debug("%s lacks %s", out, ", ".join(missing))
    info = _profiler_info(rank_dir)
    rank = int(info.get("rank_id", _rank_from_name(rank_dir)))
    if rank < 0:
        rank = _rank_from_name(rank_dir)

    try:
        raw_events = decode_ascend_events(decode_file(trace_path).traceEvents)
    except msgspec.DecodeError as exc:
        raise TraceError(trace_path, f"an event does not match the trace_view.json format ({exc})") from None
    events = _trace_events(raw_events, trace_path)
    kernel_path = out / "kernel_details.csv"
    if kernel_path.is_file():
        kernels, details = _kernel_details(kernel_path, events)
        events = pd.concat([events[events["kind"] != "kernel"], kernels], ignore_index=True)
    else:
        warnings.warn(f"{out}: no kernel_details.csv; using the Ascend Hardware tasks of trace_view.json "
                      "(no core types, shapes or AI Core metrics)", stacklevel=3)
        details = None
    events["rank"] = rank
    steps = _steps(events, rank)
    if steps.empty:
        warnings.warn(f"{trace_path}: no ProfilerStep# events; the whole capture is treated as one step "
                      "(call prof.step() in the training loop)", stacklevel=3)
    vendor = {name.removesuffix(".csv"): _read_csv(out / name) for name in VENDOR_CSVS if (out / name).is_file()}
    if details is not None:
        vendor["kernel_details"] = details
    memory = _memory(out / "memory_record.csv", rank)
    comm = _communication(out / "communication.json", rank)
    return {
        "rank": rank,
        "events": events,
        "steps": steps,
        "memory": memory,
        "comm": comm,
        "vendor": vendor,
        "settings": info.get("config", {}),
        "environment": _json(rank_dir / "profiler_metadata.json").get("ENV_VARIABLES", {}),
    }


def _rank_from_name(rank_dir: Path) -> int:
    m = re.search(r"rank(\d+)", rank_dir.name)
    return int(m.group(1)) if m else 0


def _profiler_info(rank_dir: Path) -> dict[str, Any]:
    for path in sorted(rank_dir.glob("profiler_info*.json")):
        return _json(path)
    return {}


def _json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TraceError(path, f"not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise TraceError(path, "expected a JSON object")
    return data


def _read_csv(path: Path, required: tuple[str, ...] = ()) -> pd.DataFrame:
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False, skipinitialspace=True)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, OSError) as exc:
        raise TraceError(path, f"not a readable CSV ({exc})") from None
    frame.columns = [str(c).strip() for c in frame.columns]
    lacking = [c for c in required if c not in frame.columns]
    if lacking:
        raise TraceError(path, f"missing columns {lacking}; expected at least {list(required)}")
    return frame.apply(lambda col: col.str.strip())


def _number(col: pd.Series) -> pd.Series:
    return pd.to_numeric(col.replace({"N/A": None, "": None}), errors="coerce")


def _trace_events(raw, trace_path: Path) -> pd.DataFrame:
    process: dict[Any, str] = {}
    thread: dict[tuple[Any, Any], str] = {}
    for e in raw:
        if e.ph == "M" and e.args is not None:
            if e.name == "process_name":
                process[e.pid] = str(e.args.name)
            elif e.name == "thread_name":
                thread[(e.pid, e.tid)] = str(e.args.name)
    if not process:
        raise TraceError(trace_path, "no process_name metadata; expected a torch_npu trace_view.json")
    picked = []
    for e in raw:
        if e.ph != "X":
            continue
        proc = process.get(e.pid, "")
        if proc == "Python":
            kind = {"cpu_op": "host_op", "python_function": "python", "enqueue": "runtime",
                    "dequeue": "runtime"}.get(e.cat)
        elif proc == "CANN":
            kind = "runtime"
        elif proc == "Ascend Hardware":
            task = e.args.task_type if e.args is not None else None
            kind = "kernel" if task in COMPUTE_TASKS else "memcpy" if task in MEMCPY_TASKS else None
        elif proc == "HCCL":
            kind = "comm" if "Communication" in thread.get((e.pid, e.tid), "") else None
        else:
            kind = None
        if kind is not None:
            picked.append((e, kind, proc))
    events = [p[0] for p in picked]
    kind = np.array([p[1] for p in picked], dtype=object)
    proc = [p[2] for p in picked]
    name = pd.Series([e.name for e in events], dtype=object)
    kind = np.where(name.str.match(STEP_NAME.pattern), "annotation", kind)
    kind = np.where(name.str.startswith(DATALOADER_PREFIX), "dataloader", kind)
    kind = np.where(name.str.contains("Synchronize", regex=False) & (kind == "runtime"), "sync", kind)
    on_device = np.array([p in ("Ascend Hardware", "HCCL") for p in proc], dtype=bool)
    tids = [e.tid for e in events]
    lane = [f"{p}/{thread.get((e.pid, e.tid), f'Thread {e.tid}')}" for p, e in zip(proc, events)]
    args = [e.args for e in events]
    return pd.DataFrame({
        "name": name,
        "kind": kind,
        "ts_ns": to_ns([e.ts for e in events]),
        "dur_ns": to_ns([e.dur for e in events]),
        "lane": categorical(lane),
        "stream": np.where(on_device, to_int(tids), -1),
        "device": np.where(on_device, 0, -1),
        "correlation": to_int([(a.connection_id if a.connection_id is not None else a.correlation_id)
                               if a is not None else None for a in args]),
        "shapes": categorical([str(a.input_dims) if a is not None and a.input_dims else "" for a in args]),
        "source": categorical([_user_frame(a.call_stack) if a is not None else "" for a in args]),
        "core": np.where(on_device, "", "cpu"),
        "type": name.where(~on_device, ""),
    })


def _user_frame(stack: Any) -> str:
    """The innermost frame of a torch_npu 'Call stack' that is not inside a library."""
    if not isinstance(stack, str) or not stack:
        return ""
    for frame in stack.replace("\r", "").split(";\n"):
        frame = frame.strip()
        if frame and "site-packages" not in frame and "/lib/python" not in frame:
            return frame
    return ""


def _type_from_name(names: pd.Series) -> pd.Series:
    """Operator type of kernels whose Type column is N/A (level 0), as level 1 names it: an aclnn
    kernel (``aclnnAddmm_MatMulCommon_MatMulV2``) ends in its type; other names carry a generated
    instance number (``Conv2D1``, ``trans_TransData_7``, ``Conv2DBackpropFilter10_MemSet``)."""
    core = names.str.replace(r"(_\d+)+$", "", regex=True)
    last = core.str.rsplit("_", n=1).str[-1]
    kind = last.where(names.str.startswith("aclnn"), last.str.replace(r"\d+$", "", regex=True))
    return kind.where(kind != "", names)


def _kernel_details(path: Path, events: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    raw = _read_csv(path, KERNEL_COLUMNS)
    raw = raw[(raw["Type"] != "HCCL") & (raw["Accelerator Core"] != "HCCL")].reset_index(drop=True)  # collectives: HCCL lanes
    ts = decimal_us_to_ns(raw["Start Time(us)"])
    dur = decimal_us_to_ns(raw["Duration(us)"])
    # Stream and connection id come from the matching Ascend Hardware task (same start time).
    hw = events[events["kind"] == "kernel"].drop_duplicates("ts_ns").set_index("ts_ns")
    stream = hw["stream"].reindex(ts).fillna(-1).to_numpy(np.int64)
    if "Stream ID" in raw:
        stream = np.where(stream < 0, to_int(raw["Stream ID"]), stream)
    correlation = hw["correlation"].reindex(ts).fillna(-1).to_numpy(np.int64)
    kind_type = raw["Type"].replace({"N/A": ""})
    kernel_type = kind_type.where(kind_type != "", _type_from_name(raw["Name"]))
    shapes = raw["Input Shapes"].str.strip('"') if "Input Shapes" in raw else ""
    kernels = pd.DataFrame({
        "name": raw["Name"],
        "kind": "kernel",
        "ts_ns": ts,
        "dur_ns": dur,
        "lane": [f"Ascend Hardware/Stream {s}" for s in stream],
        "stream": stream,
        "device": 0,
        "correlation": correlation,
        "shapes": shapes,
        "core": raw["Accelerator Core"].replace({"N/A": ""}).to_numpy(),
        "type": kernel_type,
    })
    details = raw.assign(ts_ns=ts, dur_ns=dur)
    return kernels, details


def _steps(events: pd.DataFrame, rank: int) -> pd.DataFrame:
    marks = events[(events["kind"] == "annotation")]
    ids = marks["name"].astype(str).str.extract(STEP_NAME)[0]
    marks = marks[ids.notna()].assign(step=ids.dropna().astype(np.int64))
    if marks.empty:
        return schema.empty(schema.STEP_COLUMNS)
    marks = marks.sort_values("dur_ns").drop_duplicates("step", keep="last")
    return pd.DataFrame({"rank": rank, "step": marks["step"].to_numpy(), "start_ns": marks["ts_ns"].to_numpy(),
                         "end_ns": (marks["ts_ns"] + marks["dur_ns"]).to_numpy()})


def _memory(path: Path, rank: int) -> pd.DataFrame:
    if not path.is_file():
        return schema.empty(schema.MEMORY_COLUMNS)
    raw = _read_csv(path, ("Component", "Timestamp(us)", "Total Allocated(MB)", "Total Reserved(MB)"))
    pta = raw[raw["Component"] == "PTA"]  # the PyTorch caching allocator's own view
    if pta.empty:
        pta = raw[raw["Total Allocated(MB)"] != ""]
    mb = 1024.0 * 1024.0
    return pd.DataFrame({
        "rank": rank,
        "device": pta["Device Type"].to_numpy() if "Device Type" in pta else "npu",
        "ts_ns": decimal_us_to_ns(pta["Timestamp(us)"]),
        "allocated_bytes": _number(pta["Total Allocated(MB)"]).to_numpy() * mb,
        "reserved_bytes": _number(pta["Total Reserved(MB)"]).to_numpy() * mb,
    })


def _communication(path: Path, rank: int) -> pd.DataFrame:
    data = _json(path)
    rows = []
    for step_key, kinds in data.items():
        step = int(re.sub(r"\D", "", step_key) or -1)
        if not isinstance(kinds, dict):
            raise TraceError(path, f"expected an object per step under {step_key!r}")
        for group in ("collective", "p2p"):
            for op_key, op in (kinds.get(group) or {}).items():
                if op_key.startswith("Total") or not isinstance(op, dict):
                    continue
                t = op.get("Communication Time Info", {})
                links = {k: v for k, v in op.get("Communication Bandwidth Info", {}).items() if isinstance(v, dict)}
                # SDMA aggregates the on-chip links (HCCS/PCIE/SIO): prefer the physical link.
                physical = {k: v for k, v in links.items() if k != "SDMA"}
                best = max(physical.items() or links.items(), key=lambda kv: kv[1].get("Transit Size(MB)", 0) or 0,
                           default=("", {}))
                rows.append({
                    "rank": rank, "step": step, "op": op_key.split("@")[0], "group": group,
                    "ts_ns": int(round(float(t.get("Start Timestamp(us)", 0)) * 1000)),
                    "elapsed_us": float(t.get("Elapse Time(ms)", 0)) * 1000,
                    "wait_us": float(t.get("Wait Time(ms)", 0)) * 1000,
                    "sync_us": float(t.get("Synchronization Time(ms)", 0)) * 1000,
                    "transit_us": float(t.get("Transit Time(ms)", 0)) * 1000,
                    "transit_mb": float(best[1].get("Transit Size(MB)", 0) or 0),
                    "bandwidth_gbps": float(best[1].get("Bandwidth(GB/s)", 0) or 0),
                    "link": best[0],
                })
    return pd.DataFrame(rows) if rows else schema.empty(schema.COMM_COLUMNS)
