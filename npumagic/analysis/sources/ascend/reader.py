"""Reader for torch_npu profiler output: ``*_ascend_pt`` directories with ``ASCEND_PROFILER_OUTPUT/``.

Each rank is read from the richest export it holds (the text export by :mod:`.text`, the db
export by :mod:`.db`), its collectives from communication*.json; ranks whose ids repeat are
numbered in directory order, and their tables and meta joined into one Trace.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ....errors import TraceError
from ... import schema
from ...collectives import is_comm_kernel
from .._notes import ReadNotes, reading
from .._stray import stray_remark, within, without_stray_device_events
from . import db, text
from .communication import communication_tables
from .discover import OUTPUT, export_type, profiler_info, rank_id, rank_numbers, read_each_rank
from .files import json_object, read_json


def read(paths: list[Path], progress=None) -> schema.Trace:
    """Read one or more ``*_ascend_pt`` rank directories into one Trace.

    Each rank is read from what it holds (see :func:`read_rank_parts`); a rank that cannot be
    read at all is left out with a warning naming what it holds and what would be needed, as
    long as another rank can be read.
    """
    notes = ReadNotes()
    parts, unreadable = read_each_rank(paths, lambda rank_dir: read_rank_parts(rank_dir, notes), progress)
    ranks = [p["rank"] for p in parts]
    numbers = rank_numbers(paths, ranks)
    if numbers != ranks:
        for i, p in zip(numbers, parts):
            p["rank"] = i
            for key in RANK_TABLES:
                p[key]["rank"] = i
    for p in parts:
        if p["note"]:
            warnings.warn(f"rank {p['rank']}: {p['note']}", stacklevel=3)
    meta = merge_meta(paths, [_rank_meta(p) for p in parts], unreadable, notes.as_meta())
    notes.warn()
    cat = lambda key: pd.concat([p[key] for p in parts], ignore_index=True)  # noqa: E731
    # a step-only rank's empty table has finish's "step" column, which the other ranks' lack
    events = cat("events").drop(columns="step", errors="ignore")
    return schema.finish(events, cat("steps"), memory=cat("memory"), comm=cat("comm"), meta=meta, links=cat("links"),
                         matrix=cat("matrix"), counters=cat("counters"), kernel_metrics=cat("kernel_metrics"))


DEVICE_NAME = "Ascend NPU"  # when no rank says which


def _rank_meta(part: dict[str, Any]) -> dict[str, Any]:
    r = part["rank"]
    return {"device_name": part.get("device_name") or DEVICE_NAME, "settings": part["settings"],
            "environment": part["environment"], "vendor": {r: part["vendor"]}, "sources": {r: part["sources"]},
            "notes": {r: part["note"]} if part["note"] else {},
            "parallel_groups": {r: part["parallel_groups"]} if part["parallel_groups"] else {}}


def merge_meta(paths: list[Path], metas: list[dict[str, Any]], unreadable: dict[str, str] | None = None,
               bad_rows: dict | None = None) -> dict[str, Any]:
    """The meta of the job made of the rank directories ``paths`` from each rank's own meta (in
    directory order, as :func:`read` gives it for one rank): what :func:`read` gives for all."""
    devices = [m["device_name"] for m in metas if m.get("device_name", DEVICE_NAME) != DEVICE_NAME]
    merged = lambda key: {k: v for m in metas for k, v in (m.get(key) or {}).items()}  # noqa: E731
    return {
        "backend": "npu",
        "format": "ascend",
        "path": str(paths[0].parent if len(paths) > 1 else paths[0]),
        "files": [str(p) for p in paths],
        "device_name": devices[0] if devices else DEVICE_NAME,
        "world_size": len(metas),
        "settings": metas[0]["settings"],
        "environment": metas[0]["environment"],
        "vendor": merged("vendor"),
        "sources": merged("sources"),
        "notes": merged("notes"),
        "parallel_groups": merged("parallel_groups"),
        "unreadable": {**merged("unreadable"), **(unreadable or {})},
        "bad_rows": merged("bad_rows") if bad_rows is None else bad_rows,
    }


RANK_TABLES = ("events", "steps", "memory", "comm", "links", "matrix", "counters", "kernel_metrics")


TEXT_TABLES = ("trace_view.json", "kernel_details.csv", "step_trace_time.csv")


def read_rank_parts(rank_dir: Path, notes: ReadNotes | None = None) -> dict[str, Any]:
    """One rank directory, read from the richest output it holds (a pure function of the path).

    In order: the text export with trace_view.json (every view); the CSVs without it
    (kernel_details.csv and communication*.json: the breakdown from the device tasks, a
    timeline without host lanes); step_trace_time.csv alone (torch_npu's own breakdown, marked
    as the vendor's); the db export (ascend_pytorch_profiler_N.db). ``note`` says what was
    missing and which views are unavailable; ``sources`` where each figure comes from. Bad
    rows go to ``notes`` (one warning for the whole read).
    """
    notes = notes if notes is not None else ReadNotes()
    out = rank_dir / OUTPUT
    info_path, info = profiler_info(rank_dir)
    rank = rank_id(info_path, info.get("rank_id"), rank_dir)
    settings = json_object(info.get("config", {}), info_path, "config")
    metadata_path = rank_dir / "profiler_metadata.json"
    metadata = read_json(metadata_path)
    environment = json_object(metadata.get("ENV_VARIABLES", {}), metadata_path, "ENV_VARIABLES")
    groups = json_object(metadata.get("parallel_group_info", {}), metadata_path, "parallel_group_info")
    db_path = db.find_db(out)
    has_text = any((out / f).is_file() for f in TEXT_TABLES)
    if db_path is not None and (not has_text or export_type(info) == "db"):
        parts = db.read_rank(db_path, rank, notes)
        _leave_out_stray(parts, db_path, notes)
        parts["events"] = communicating_kernels(parts["events"])
        parts.update(settings=settings, note="", sources={
            "breakdown": f"{db_path.name}: TASK, COMPUTE_TASK_INFO, COMMUNICATION_OP, STEP_TIME",
            "timeline": db_path.name, "links": f"{db_path.name}: COMMUNICATION_TASK_INFO"})
        parts["parallel_groups"] = parts["parallel_groups"] or groups
        return parts
    if (out / "trace_view.json").is_file():
        try:
            parts = text.read_rank(rank_dir, rank, notes)
        except TraceError as exc:  # a truncated or damaged trace_view.json: read the rank as without it
            if Path(exc.path).name != "trace_view.json" or not (out / "kernel_details.csv").is_file():
                raise
            with reading(out / "kernel_details.csv"):
                parts = text.read_csv_rank(rank_dir, rank, notes)
            parts["note"] = f"trace_view.json unreadable ({exc.problem[:120]}), so read with " + parts["note"]
    elif (out / "kernel_details.csv").is_file():
        with reading(out / "kernel_details.csv"):
            parts = text.read_csv_rank(rank_dir, rank, notes)
    elif (out / "step_trace_time.csv").is_file():
        with reading(out / "step_trace_time.csv"):
            parts = text.read_step_trace_rank(rank_dir, rank, notes)
    else:
        raise TraceError(out, _unreadable(out))
    _leave_out_stray(parts, out, notes)
    parts["events"] = communicating_kernels(parts["events"])
    parts.update(settings=settings, environment=environment, parallel_groups=groups, device_name="")
    with reading(out / "communication.json"):
        comm, links, matrix = communication_tables(out, parts["rank"], notes)
    parts.update(comm=comm, links=links, matrix=matrix)
    if len(links):
        parts["sources"]["links"] = "communication.json (each link's own transit time)"
    return parts


def communicating_kernels(events: pd.DataFrame) -> pd.DataFrame:
    """``events`` with the device kernels that are HCCL's own work counted as communication
    (:func:`~npumagic.analysis.collectives.is_comm_kernel`: the AIV kernels aiv_all_reduce_* and
    the hcom_* tasks of an AIV-mode collective, sk_allreduce_mesh_*, LCCL's kernel_aivec,
    MoeDistributeDispatch/Combine), whatever core kernel_details.csv or the task type gives them
    (AI_VECTOR_CORE, MIX_AIV, MIX_AIC). Their collective's window is communication already, as
    msprof-analyze counts it (HCCL lanes, COMMUNICATION_OP); torch_npu's step_trace_time.csv may
    count the kernels as computing too, overlapped with it. MC2 (a matmul fused with its
    collective: MatmulAllReduce, AllGatherMatmul, MatmulReduceScatter) stays computing, as
    msprof-analyze keeps it. :func:`~npumagic.analysis.breakdown.vendor_rule` undoes this to check
    the figures against step_trace_time.csv."""
    if events.empty:
        return events
    kernel = (events["kind"] == "kernel").to_numpy()
    comm = np.zeros(len(events), dtype=bool)
    comm[kernel] = is_comm_kernel(events["name"][kernel])
    if not comm.any():
        return events
    return events.assign(kind=np.where(comm, "comm", events["kind"].to_numpy(dtype=object)))


def _leave_out_stray(parts: dict[str, Any], where: Path, notes: ReadNotes) -> None:
    """Device events stamped outside the capture (a clock glitch) left out with their kernel
    metrics and counter samples, and said so."""
    parts["events"], stray, window = without_stray_device_events(parts["events"])
    if stray:
        for table in ("kernel_metrics", "counters"):
            parts[table] = within(parts[table], window)
        notes.remark(where, stray_remark(stray))


def _unreadable(out: Path) -> str:
    held = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
    what = f"it holds {', '.join(held[:8])}{' ...' if len(held) > 8 else ''}" if held else "it is empty"
    return (f"nothing npumagic can read ({what}); a torch_npu rank needs trace_view.json (text export), "
            "kernel_details.csv (device tasks), step_trace_time.csv (the breakdown alone) or "
            "ascend_pytorch_profiler_N.db (export_type=db)")
