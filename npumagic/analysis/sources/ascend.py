"""Reader for torch_npu profiler output: ``*_ascend_pt`` directories with ``ASCEND_PROFILER_OUTPUT/``.

Device compute kernels come from ``kernel_details.csv`` (or, without it, from the ``Ascend
Hardware`` compute tasks in ``trace_view.json``); collectives from the ``HCCL`` group lanes;
host ops, DataLoader spans, ProfilerStep windows and CANN runtime calls from ``trace_view.json``.
The vendor's own derived tables (step_trace_time.csv, op_statistic.csv, ...) are kept in
``meta["vendor"]`` for cross-checks (read when first looked up), never used to compute
npumagic's own metrics.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
import re
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Iterator

import msgspec
import numpy as np
import pandas as pd

from ...errors import TraceError
from .. import schema
from ._columns import US_LIMIT, categorical, decimal_us_to_ns_checked, small_int, step_ids, to_int, to_ns, to_ns_checked
from . import ascend_db
from ._counters import chrome_counters
from ._kineto_decode import AscendEvent
from ._stream import EventStream
from ._notes import ReadNotes, reading
from ._stray import stray_remark, within, without_stray_device_events
from .kineto import DATALOADER_PREFIX, STEP_NAME

log = logging.getLogger(__name__)

OUTPUT = "ASCEND_PROFILER_OUTPUT"
COMPUTE_TASKS = frozenset({"AI_CORE", "AI_VECTOR_CORE", "AI_CPU", "MIX_AIC", "MIX_AIV", "DSA_SQE"})
MEMCPY_TASKS = frozenset({"PCIE_DMA_SQE", "SDMA_SQE"})
KERNEL_COLUMNS = ("Name", "Type", "Accelerator Core", "Start Time(us)", "Duration(us)")
# kernel_details.csv's Type / Accelerator Core values of a collective: older CANN wrote HCCL, newer
# COMMUNICATION (msprof-analyze 26.2.0: advisor/advisor_backend/common_func_advisor/constant.py:217
# CoreType.HCCL = "COMMUNICATION"; advisor/analyzer/schedule/fusible_ops/fusible_operator_checker.py:91
# check_hccl: task_type in ["COMMUNICATION", "HCCL"])
COMM_CORES = ("HCCL", "COMMUNICATION")


def _is_collective(raw: pd.DataFrame) -> np.ndarray:
    """The kernel_details.csv rows that are collectives, by their Type or Accelerator Core."""
    return (raw["Type"].isin(COMM_CORES) | raw["Accelerator Core"].isin(COMM_CORES)).to_numpy()
OPTIONAL_FILES = ("kernel_details.csv", "step_trace_time.csv", "op_statistic.csv", "communication.json",
                  "memory_record.csv", "operator_details.csv", "operator_memory.csv", "npu_module_mem.csv",
                  "api_statistic.csv", "communication_matrix.json")
VENDOR_CSVS = ("step_trace_time.csv", "op_statistic.csv", "operator_details.csv", "operator_memory.csv",
               "npu_module_mem.csv", "api_statistic.csv")


class VendorTables(Mapping):
    """One rank's tables as torch_npu wrote them (name -> frame): those given, and the vendor CSVs
    present in ``out``, each read on first lookup. Nothing of npumagic's own reads them, so a job
    of many ranks does not pay for parsing every rank's operator_details.csv."""

    def __init__(self, out: Path, tables: dict[str, Any] | None = None, notes: ReadNotes | None = None) -> None:
        self._paths = {n.removesuffix(".csv"): out / n for n in VENDOR_CSVS if (out / n).is_file()}
        self._tables = dict(tables or {})
        if notes is not None and "step_trace_time" in self._paths and "step_trace_time" not in self._tables:
            # read now (it is small): its bad rows are said with the rank's other notes
            path = self._paths["step_trace_time"]
            self._tables["step_trace_time"] = _good_step_trace(_read_csv(path), notes, path)

    def __getitem__(self, name: str) -> Any:
        if name not in self._tables:
            if name not in self._paths:
                raise KeyError(name)
            self._tables[name] = _read_csv(self._paths[name])
        return self._tables[name]

    def __setitem__(self, name: str, table: Any) -> None:
        self._tables[name] = table

    def __iter__(self) -> Iterator[str]:
        return iter({**dict.fromkeys(self._paths), **dict.fromkeys(self._tables)})

    def __len__(self) -> int:
        return len(set(self._paths) | set(self._tables))


def _good_step_trace(table: pd.DataFrame, notes: ReadNotes, path: Path) -> pd.DataFrame:
    """step_trace_time.csv without the rows no profiler writes, each counted in ``notes``: a
    negative time, a Computing, Communication(Not Overlapped) or Free longer than the step's Stage,
    a step listed twice (an exact repeat is left out; differing rows of one step all are, as
    neither can be told right)."""
    if table.empty or "Step" not in table:
        return table
    values = table.apply(pd.to_numeric, errors="coerce")
    times = values[[c for c in STEP_TRACE_COLUMNS if c in values]]
    stage = values["Stage"] if "Stage" in values else pd.Series(np.inf, index=values.index)
    parts = values[[c for c in ("Computing", "Communication(Not Overlapped)", "Free") if c in values]]
    repeat = table.duplicated(keep="first")
    clash = values["Step"].duplicated(keep=False) & ~table.duplicated(keep=False)
    good = notes.count(path, len(table), "rows", negative_time=(times < -1).any(axis=1).to_numpy(),  # -1 us: rounding
                       longer_than_its_Stage=parts.gt(stage + 1, axis=0).any(axis=1).to_numpy(),
                       repeated_row=repeat.to_numpy(), step_listed_twice_with_different_figures=clash.to_numpy())
    return table[good].reset_index(drop=True)


# torch_npu's raw data of a rank it never parsed: PROF_<id>_<time>_<tag>/ (CANN) beside FRAMEWORK/
# (torch_npu 2.14.0 profiler/analysis/prof_common_func/_path_manager.py:21-30, get_cann_path)
RAW_DIR = re.compile(r"^PROF_\d+_\d+_[0-9a-zA-Z]+")


def raw_only(path: Path) -> list[Path]:
    """The ``*_ascend_pt`` directories at or directly below ``path`` that hold torch_npu's raw
    data (``PROF_*``) but no ``ASCEND_PROFILER_OUTPUT``: captures whose export failed or was skipped."""
    path = Path(path)
    if not path.is_dir():
        return []
    candidates = [path] if path.name.endswith("_ascend_pt") else sorted(
        (p for p in path.iterdir() if p.is_dir() and p.name.endswith("_ascend_pt")), key=_natural)
    return [p for p in candidates if not (p / OUTPUT).is_dir()
            and any(c.is_dir() and RAW_DIR.match(c.name) for c in p.iterdir())]


def offline_parse_command(path: Path) -> str:
    """The command that parses ``path``'s raw torch_npu data where torch_npu is installed: its
    offline analysis, ``analyse(profiler_path, max_process_number, export_type)``, which takes
    one ``*_ascend_pt`` or a folder of them (torch_npu 2.14.0 profiler/profiler.py:389)."""
    return f"python -c \"from torch_npu.profiler.profiler import analyse; analyse({str(path)!r})\""


def never_parsed(paths: list[Path], where: Path) -> str:
    """What to say of ranks that hold only raw data, with the command that parses them."""
    import importlib.util

    names = ", ".join(p.name for p in paths[:5]) + (" ..." if len(paths) > 5 else "")
    how = (" (torch_npu imports here: npumagic.parse_raw runs it)"
           if importlib.util.find_spec("torch_npu") is not None else " on a machine with torch_npu and CANN")
    return (f"{names} {'holds' if len(paths) == 1 else 'hold'} only torch_npu's raw data (PROF_*), never parsed "
            f"(the export failed or was skipped): parse it with torch_npu's offline analysis{how}, "
            f"{offline_parse_command(where)}, then read {where} again")


def rank_dirs(path: Path) -> list[Path]:
    """The torch_npu rank directories at or directly below ``path`` (empty when none), in natural
    order (rank2 before rank10: the order unlabelled ranks are numbered in)."""
    if (path / OUTPUT).is_dir():
        return [path]
    found = [p for p in sorted(path.iterdir(), key=_natural) if p.is_dir() and (p / OUTPUT).is_dir()]
    empty = [p.name for p in sorted(path.iterdir(), key=_natural)
             if p.is_dir() and p.name.endswith("_ascend_pt") and not (p / OUTPUT).is_dir()]
    raw = raw_only(path) if found else []
    if raw:
        warnings.warn(f"{path}: {never_parsed(raw, path)}; until then they are left out")
        empty = [name for name in empty if name not in {p.name for p in raw}]
    if found and empty:  # torch_npu writes ASCEND_PROFILER_OUTPUT when it parses a rank: not done there
        warnings.warn(f"{path}: {', '.join(empty[:5])}{' ...' if len(empty) > 5 else ''} "
                      f"{'has' if len(empty) == 1 else 'have'} no {OUTPUT} (not parsed by torch_npu?) and "
                      f"{'is' if len(empty) == 1 else 'are'} left out")
    if not found:
        found = [p.parent for p in sorted(path.glob(f"*/*/{OUTPUT}"), key=lambda p: _natural(p.parent)) if p.is_dir()]
    return found


def _natural(path: Path) -> list:
    return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", str(path))]


def warn_renumbered(paths: list[Path], ids: list[int]) -> None:
    """Say that ranks whose profiler_info ids repeat are numbered in directory order instead."""
    repeated = sorted({r for r in ids if ids.count(r) > 1})
    warnings.warn(f"{paths[0].parent}: rank ids {repeated} appear in more than one rank's profiler_info: every rank is "
                  f"numbered by its directory's place instead (0 to {len(ids) - 1}, in natural name order)",
                  stacklevel=4)


def read(paths: list[Path], progress=None) -> schema.Trace:
    """Read one or more ``*_ascend_pt`` rank directories into one Trace.

    Each rank is read from what it holds (see :func:`read_rank_parts`); a rank that cannot be
    read at all is left out with a warning naming what it holds and what would be needed, as
    long as another rank can be read.
    """
    parts, unreadable = [], {}
    notes = ReadNotes()
    for rank_dir in paths:
        try:
            parts.append(read_rank_parts(rank_dir, notes))
        except TraceError as exc:
            if len(paths) == 1:
                raise
            unreadable[str(rank_dir)] = str(exc)
            warnings.warn(f"{exc} (this rank is left out; the others are analysed)", stacklevel=3)
        if progress is not None:
            progress.update(1)
    if not parts:
        raise TraceError(paths[0].parent, "no rank could be read: " + "; ".join(unreadable.values()))
    ranks = [p["rank"] for p in parts]
    if len(set(ranks)) != len(ranks):  # unlabelled ranks: number them in directory order
        warn_renumbered(paths, ranks)
        for i, p in enumerate(parts):
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
    return schema.finish(events, cat("steps"), cat("memory"), cat("comm"), meta, cat("links"), cat("matrix"),
                         counters=cat("counters"), kernel_metrics=cat("kernel_metrics"))


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
    info_path, info = _profiler_info(rank_dir)
    rank = _rank_id(info_path, info.get("rank_id"), rank_dir)
    settings = _object(info.get("config", {}), info_path, "config")
    metadata_path = rank_dir / "profiler_metadata.json"
    metadata = _json(metadata_path)
    environment = _object(metadata.get("ENV_VARIABLES", {}), metadata_path, "ENV_VARIABLES")
    groups = _object(metadata.get("parallel_group_info", {}), metadata_path, "parallel_group_info")
    db = ascend_db.find_db(out)
    has_text = any((out / f).is_file() for f in TEXT_TABLES)
    if db is not None and (not has_text or _export_type(info) == "db"):
        parts = ascend_db.read_rank(db, rank, notes)
        _leave_out_stray(parts, db, notes)
        parts.update(settings=settings, note="", sources={
            "breakdown": f"{db.name}: TASK, COMPUTE_TASK_INFO, COMMUNICATION_OP, STEP_TIME",
            "timeline": db.name, "links": f"{db.name}: COMMUNICATION_TASK_INFO"})
        parts["parallel_groups"] = parts["parallel_groups"] or groups
        return parts
    if (out / "trace_view.json").is_file():
        try:
            parts = _read_text_rank(rank_dir, rank, notes)
        except TraceError as exc:  # a truncated or damaged trace_view.json: read the rank as without it
            if Path(exc.path).name != "trace_view.json" or not (out / "kernel_details.csv").is_file():
                raise
            with reading(out / "kernel_details.csv"):
                parts = _read_csv_rank(rank_dir, rank, notes)
            parts["note"] = f"trace_view.json unreadable ({exc.problem[:120]}), so read with " + parts["note"]
    elif (out / "kernel_details.csv").is_file():
        with reading(out / "kernel_details.csv"):
            parts = _read_csv_rank(rank_dir, rank, notes)
    elif (out / "step_trace_time.csv").is_file():
        with reading(out / "step_trace_time.csv"):
            parts = _read_step_trace_rank(rank_dir, rank)
    else:
        raise TraceError(out, _unreadable(out))
    _leave_out_stray(parts, out, notes)
    parts.update(settings=settings, environment=environment, parallel_groups=groups, device_name="")
    with reading(out / "communication.json"):
        comm, links, matrix = _communication(out, parts["rank"], notes)
    parts.update(comm=comm, links=links, matrix=matrix)
    if len(links):
        parts["sources"]["links"] = "communication.json (each link's own transit time)"
    return parts


def _leave_out_stray(parts: dict[str, Any], where: Path, notes: ReadNotes) -> None:
    """Device events stamped outside the capture (a clock glitch) left out with their kernel
    metrics and counter samples, and said so."""
    parts["events"], stray, window = without_stray_device_events(parts["events"])
    if stray:
        for table in ("kernel_metrics", "counters"):
            parts[table] = within(parts[table], window)
        notes.remark(where, stray_remark(stray))


def _export_type(info: dict[str, Any]) -> str:
    config = info.get("config", {})
    experimental = config.get("experimental_config", {}) if isinstance(config, dict) else {}
    kind = experimental.get("_export_type", "") if isinstance(experimental, dict) else ""
    kind = kind[0] if isinstance(kind, list) and kind else kind
    return str(kind).lower()


def _unreadable(out: Path) -> str:
    held = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
    what = f"it holds {', '.join(held[:8])}{' ...' if len(held) > 8 else ''}" if held else "it is empty"
    return (f"nothing npumagic can read ({what}); a torch_npu rank needs trace_view.json (text export), "
            "kernel_details.csv (device tasks), step_trace_time.csv (the breakdown alone) or "
            "ascend_pytorch_profiler_N.db (export_type=db)")


def _read_text_rank(rank_dir: Path, rank: int, notes: ReadNotes) -> dict[str, Any]:
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
        events = _trace_events(raw_events, trace_path, notes)
        hccl_tasks = _hccl_tasks(raw_events)
    kernel_path = out / "kernel_details.csv"
    note = ""
    kernels = metrics = details = None
    if kernel_path.is_file():
        with reading(kernel_path):
            kernels, metrics, details = _kernel_details(kernel_path, events, notes)
        if kernels.empty:  # plausible: an export with no device kernels
            notes.remark(kernel_path, "no kernel rows; using the Ascend Hardware tasks of trace_view.json")
            kernels = None
    if kernels is not None:
        events = pd.concat([events[events["kind"] != "kernel"], kernels], ignore_index=True)
    elif not kernel_path.is_file():
        note = ("no kernel_details.csv: kernels from the Ascend Hardware tasks of trace_view.json "
                "(no core types, shapes or AI Core metrics)")
    events["rank"] = rank
    steps = _steps(events, rank, notes, trace_path)
    if steps.empty:
        warnings.warn(f"{trace_path}: no ProfilerStep# events; the whole capture is treated as one step "
                      "(call prof.step() in the training loop)", stacklevel=4)
    vendor = VendorTables(out, notes=notes)
    if details is not None:
        vendor["kernel_details"] = details
    counters = pd.concat([chrome_counters(samples, _process_names(raw_events), rank, 0),
                          _l2_cache(out / "l2_cache.csv", metrics, rank)], ignore_index=True)
    if len(hccl_tasks):
        vendor["hccl_tasks"] = hccl_tasks
    device = _device_info(rank_dir)
    if device:
        vendor["device_info"] = device
    return {
        "rank": rank,
        "events": events,
        "steps": steps,
        "memory": _memory(out / "memory_record.csv", rank, notes),
        "counters": counters,
        "kernel_metrics": (metrics if metrics is not None else schema.empty(schema.KERNEL_METRIC_COLUMNS)).assign(
            rank=rank),
        "vendor": vendor,
        "note": note,
        "sources": {"breakdown": "kernel_details.csv + trace_view.json (HCCL lanes, ProfilerStep#)",
                    "timeline": "trace_view.json"},
    }


def _read_csv_rank(rank_dir: Path, rank: int, notes: ReadNotes) -> dict[str, Any]:
    """Without trace_view.json: device kernels and HCCL ops from kernel_details.csv, steps from its
    Step Id column (each step's device window; its host start from step_trace_time.csv's Preparing)."""
    out = rank_dir / OUTPUT
    raw = _read_csv(out / "kernel_details.csv", KERNEL_COLUMNS)
    empty = pd.DataFrame({"ts_ns": pd.Series(dtype=np.int64), "kind": pd.Series(dtype=object),
                          "stream": pd.Series(dtype=np.int64), "correlation": pd.Series(dtype=np.int64)})
    kernels, metrics, details = _kernel_details(out / "kernel_details.csv", empty, notes)  # counts the bad rows
    ts, ts_ok = decimal_us_to_ns_checked(raw["Start Time(us)"])
    dur, dur_ok = decimal_us_to_ns_checked(raw["Duration(us)"])
    good = (ts_ok & dur_ok & (dur >= 0) & (ts >= 0) & (raw["Name"] != "Name").to_numpy()
            & ~raw.duplicated(keep="first").to_numpy())  # the rows _kernel_details counted as bad
    raw, ts, dur = raw[good].reset_index(drop=True), ts[good], dur[good]
    hccl = _is_collective(raw)
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
    preparing = _vendor_column(vendor.get("step_trace_time"), "Preparing")
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
        "rank": rank, "events": events, "steps": steps, "memory": _memory(out / "memory_record.csv", rank, notes),
        "counters": _l2_cache(out / "l2_cache.csv", metrics, rank),
        "kernel_metrics": metrics.assign(rank=rank),
        "vendor": vendor,
        "note": (f"no {missing}: breakdown from kernel_details.csv and the HCCL op times; step wall time is the "
                 "device window (+ Preparing from step_trace_time.csv); no host lanes, DataLoader, sync or "
                 "host-op views"),
        "sources": {"breakdown": "kernel_details.csv (compute tasks and HCCL ops, Step Id)",
                    "timeline": "kernel_details.csv (device lanes only)",
                    "wall": "device window" + (" + step_trace_time.csv Preparing" if len(preparing) else "")},
    }


def _vendor_column(table: pd.DataFrame | None, column: str) -> pd.Series:
    if table is None or column not in table or "Step" not in table:
        return pd.Series(dtype=float)
    steps = pd.to_numeric(table["Step"], errors="coerce")
    values = pd.to_numeric(table[column], errors="coerce")
    ok = steps.notna() & values.notna()
    return pd.Series(values[ok].to_numpy(), index=steps[ok].astype(np.int64).to_numpy())


STEP_TRACE_COLUMNS = {"Computing": "computing_us", "Communication(Not Overlapped)": "comm_not_overlapped_us",
                      "Overlapped": "overlapped_us", "Communication": "communication_us", "Free": "free_us",
                      "Stage": "stage_us", "Preparing": "preparing_us"}


STEP_TRACE_REQUIRED = ("Step", "Computing", "Free")
STEP_TRACE_NUMBERS = ("Computing", "Communication(Not Overlapped)", "Overlapped", "Communication", "Free", "Stage",
                      "Bubble", "Communication(Not Overlapped and Exclude Receive)", "Preparing")


def step_trace_rows(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    """step_trace_time.csv's header and rows (text, stripped), each row checked: a step number (empty, as torch_npu
    writes it for a capture without steps: step 0, the whole capture) and finite times (empty: 0);
    anything else is a TraceError naming the line, never a silent 0."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceError(path, f"not a readable CSV ({exc})") from None
    lines = [line for line in csv.reader(io.StringIO(text), skipinitialspace=True) if line]
    header = [c.strip() for c in lines[0]] if lines else []
    lacking = [c for c in STEP_TRACE_REQUIRED if c not in header]
    if lacking:
        raise TraceError(path, f"missing columns {lacking}; expected at least {list(STEP_TRACE_REQUIRED)}")
    numbers = [c for c in header if c in STEP_TRACE_NUMBERS]
    rows = []
    for number, line in enumerate(lines[1:], start=2):
        if len(line) < len(header):
            raise TraceError(path, f"line {number} has {len(line)} fields; the header has {len(header)}")
        row = dict(zip(header, (v.strip() for v in line)))
        row["Step"] = str(small_int(row["Step"], path, f"line {number}: Step"))
        for column in numbers:
            value = row[column]
            try:
                ok = value == "" or -1 <= float(value) <= US_LIMIT  # NaN fails both; -1 us: rounding
            except ValueError:
                ok = False
            if not ok:
                raise TraceError(path, f"line {number}: {column} is {value[:40]!r}; expected a time in us "
                                       f"from 0 to {US_LIMIT:.1e} (a duration)")
        rows.append(row)
    return header, rows


def _read_step_trace_rank(rank_dir: Path, rank: int) -> dict[str, Any]:
    """Only step_trace_time.csv: torch_npu's own breakdown, kept as it is and marked as such."""
    out = rank_dir / OUTPUT
    header, rows = step_trace_rows(out / "step_trace_time.csv")
    table = pd.DataFrame(rows, columns=header)
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
        "memory": _memory(out / "memory_record.csv", rank, ReadNotes()), "vendor": vendor,
        "note": ("only step_trace_time.csv: the breakdown is torch_npu's own (not recomputed); no timeline, "
                 "kernel, host-op or sync views"),
        "sources": {"breakdown": "step_trace_time.csv (vendor)", "wall": "step_trace_time.csv Stage + Preparing"},
    }


def _device_info(rank_dir: Path) -> dict[str, Any]:
    """The chip's core counts and rated AI Core clock from CANN's ``PROF_*/device_*/info.json.N``
    (``DeviceInfo``: ai_core_num, aiv_num, aic_frequency), where the raw data was kept."""
    for path in sorted(rank_dir.glob("PROF_*/device_*/info.json.*")):
        if path.name.endswith(".done"):
            continue
        for info in _json(path).get("DeviceInfo") or []:
            if isinstance(info, dict) and info.get("ai_core_num"):
                return {k: info[k] for k in ("ai_core_num", "aiv_num", "aic_frequency") if k in info}
    return {}


def _rank_from_name(rank_dir: Path) -> int:
    m = re.search(r"rank(\d+)", rank_dir.name)
    return int(m.group(1)) if m else 0


def _profiler_info(rank_dir: Path) -> tuple[Path, dict[str, Any]]:
    for path in sorted(rank_dir.glob("profiler_info*.json")):
        return path, _json(path)
    return rank_dir / "profiler_info.json", {}


def _rank_id(path: Path, value: Any, rank_dir: Path) -> int:
    """profiler_info's rank_id; -1 (torch_npu's "not distributed") or absent: from the folder name."""
    if value is None or value in (-1, "-1"):
        return _rank_from_name(rank_dir)
    return small_int(value, path, "rank_id")


def _object(value: Any, path: Path, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TraceError(path, f"{what} is a {type(value).__name__}; expected a JSON object")
    return value


def _json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        raw = path.read_bytes()
        try:  # msgspec: 3x faster than json on the many small files of a many-rank job
            data = msgspec.json.decode(raw.removeprefix(b"\xef\xbb\xbf"))
        except msgspec.DecodeError:  # json also takes NaN and Infinity (Python's json.dump writes them)
            data = json.loads(raw.decode("utf-8-sig"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TraceError(path, f"not valid JSON ({exc})") from None
    except RecursionError:
        raise TraceError(path, "JSON nested too deeply to be torch_npu output") from None
    return _object(data, path, "the document")


def _read_csv(path: Path, required: tuple[str, ...] = (), notes: ReadNotes | None = None) -> pd.DataFrame:
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False, skipinitialspace=True, encoding="utf-8-sig",
                            encoding_errors="replace")  # one stray byte costs its cell, not the rank
        ragged = not isinstance(frame.index, pd.RangeIndex)  # pandas took a longer first row's cells as the index
    except pd.errors.ParserError as exc:
        if not re.search(r"Expected \d+ fields in line \d+, saw \d+", str(exc)):
            raise TraceError(path, f"not a readable CSV ({exc})") from None
        ragged = True
    except (pd.errors.EmptyDataError, UnicodeDecodeError, OSError) as exc:
        raise TraceError(path, f"not a readable CSV ({exc})") from None
    if ragged:  # a row with more fields than the header shifts every cell after it: leave it out
        frame = _read_ragged_csv(path, notes)
    frame.columns = [str(c).strip() for c in frame.columns]
    if any("\ufffd" in c for c in frame.columns):
        raise TraceError(path, "not a readable CSV (its header holds bytes that are no UTF-8: a binary file?)")
    duplicates = [c for c in frame.columns if re.fullmatch(r".+\.\d+", c) and c.rsplit(".", 1)[0] in frame.columns]
    if duplicates and notes is not None:  # pandas renamed the second 'Name' to 'Name.1'
        notes.remark(path, ", ".join(f"duplicate column {c.rsplit('.', 1)[0]!r}" for c in duplicates)
                     + ": the first is used")
    lacking = [c for c in required if c not in frame.columns]
    if lacking:
        raise TraceError(path, f"missing columns {lacking}; expected at least {list(required)}")
    if len(frame) and not _ends_a_line(path):  # torch_npu ends every row: the file was cut inside its last
        frame = frame.iloc[:-1]
        if notes is not None:
            notes.count(path, 1, "rows", cut_short_where_the_file_ends=np.ones(1, dtype=bool))
    # trailing whitespace ("...643.212\t"): one pass over every cell, not a pandas string method per column
    cells, odd = _strip(frame.to_numpy(dtype=object))  # odd: the cell held bytes that are no UTF-8
    replaced = int(odd.astype(bool).sum())
    if replaced and notes is not None:
        notes.remark(path, f"{replaced} cell{'s' if replaced > 1 else ''} held bytes that are no UTF-8 (shown as \ufffd; "
                           "a number there is skipped as text)")
    # one dtype for the whole block (every column was read as text): 6x faster than astype per column
    dtypes = frame.dtypes.unique()
    stripped = pd.DataFrame(cells, index=frame.index, columns=frame.columns, dtype=dtypes[0] if len(dtypes) == 1 else None)
    return stripped if len(dtypes) <= 1 else stripped.astype(frame.dtypes.to_dict())


def _read_ragged_csv(path: Path, notes: ReadNotes | None) -> pd.DataFrame:
    """A CSV some of whose rows have more fields than its header, read row by row (only such a
    damaged file comes here): those rows are left out and counted, the others kept whole."""
    with path.open(newline="", encoding="utf-8-sig", errors="replace") as fh:
        header, *rows = list(csv.reader(fh, skipinitialspace=True))
    longer = np.array([len(r) > len(header) for r in rows], dtype=bool)
    if notes is not None and longer.any():  # the rows kept are counted where they are read
        notes.count(path, int(longer.sum()), "rows", more_fields_than_the_header=np.ones(int(longer.sum()), bool))
    kept = [r + [""] * (len(header) - len(r)) for r, bad in zip(rows, longer) if not bad and r]
    return pd.DataFrame(kept, columns=header, dtype=object) if kept else pd.DataFrame(columns=header, dtype=object)


def _ends_a_line(path: Path) -> bool:
    with path.open("rb") as fh:
        fh.seek(-1, 2)
        return fh.read(1) in (b"\n", b"\r")


_strip = np.frompyfunc(lambda v: (v.strip(), "\ufffd" in v) if isinstance(v, str) else (v, False), 1, 2)


def _number(col: pd.Series) -> pd.Series:
    return pd.to_numeric(col.replace({"N/A": None, "": None}), errors="coerce")


def _process_names(raw) -> dict[Any, str]:
    return {e.pid: str(e.args.name) for e in raw if e.ph == "M" and e.name == "process_name" and e.args is not None}


def _l2_cache(path: Path, metrics: pd.DataFrame | None, rank: int) -> pd.DataFrame:
    """l2_cache.csv (per-task L2 hit and victim rates, ``--l2-cache``) as counters at each task's
    start, matched to the kernel metrics by (stream, task id), or else by the n-th task of the
    same name (level 0 writes no task ids)."""
    if not path.is_file() or metrics is None or metrics.empty:
        return schema.empty(schema.COUNTER_COLUMNS)
    l2 = _read_csv(path, ("Op Name", "Hit Rate", "Victim Rate"))
    kernels = metrics.sort_values("ts_ns", kind="stable")
    if {"Stream Id", "Task Id"} <= set(l2) and (kernels["task_id"] >= 0).any():
        key = ["stream", "task_id"]
        l2 = l2.assign(stream=to_int(l2["Stream Id"]), task_id=to_int(l2["Task Id"]))
    else:
        key = ["name", "nth"]
        l2 = l2.assign(name=l2["Op Name"], nth=l2.groupby("Op Name").cumcount())
        kernels = kernels.assign(name=kernels["name"].astype(str))
        kernels = kernels.assign(nth=kernels.groupby("name").cumcount())
    start = kernels.drop_duplicates(key).set_index(key)["ts_ns"]
    ts = start.reindex(pd.MultiIndex.from_frame(l2[key]))
    l2 = l2.assign(ts_ns=ts.to_numpy())[ts.notna().to_numpy()]
    frames = []
    for column, name in (("Hit Rate", "L2 Cache/Hit Rate"), ("Victim Rate", "L2 Cache/Victim Rate")):
        value = _number(l2[column])
        ok = value.notna()
        frames.append(pd.DataFrame({"rank": rank, "device": 0, "group": "L2 Cache", "name": name, "unit": "ratio",
                                    "ts_ns": l2.loc[ok, "ts_ns"].astype(np.int64), "value": value[ok]}))
    return pd.concat(frames, ignore_index=True)


def _trace_events(raw, trace_path: Path, notes: ReadNotes) -> pd.DataFrame:
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
        elif proc == "Python GC":  # torch_npu's gc_detect_threshold: one "GC" span per collection
            kind = "annotation"
        else:
            kind = None
        if kind is not None:
            picked.append((e, kind, proc))
    ts, ts_ok = to_ns_checked([p[0].ts for p in picked])
    dur, dur_ok = to_ns_checked([p[0].dur for p in picked])
    good = notes.count(trace_path, len(picked), "events", bad_timestamp=~ts_ok, bad_duration=~dur_ok,
                       negative_duration=dur < 0, negative_timestamp=ts < 0)
    if not good.all():
        picked = [p for p, g in zip(picked, good) if g]
        ts, dur = ts[good], dur[good]
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
        "ts_ns": ts,
        "dur_ns": dur,
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


HCCL_TASK_COLUMNS = ["op", "ts_ns", "dur_ns", "task_type", "size_bytes", "transport", "link_type", "plane"]


def _hccl_tasks(raw) -> pd.DataFrame:
    """The HCCL plane tasks (Memcpy, Reduce_Inline, Notify_*) of a trace_view.json, each with the
    collective it belongs to (the latest ``hcom_*`` op started at or before it on the group lane),
    its size in bytes, transport (SDMA/RDMA/LOCAL) and link type (HCCS, PCIE, ON_CHIP, ...)."""
    process = {e.pid: str(e.args.name) for e in raw if e.ph == "M" and e.name == "process_name" and e.args is not None}
    thread = {(e.pid, e.tid): str(e.args.name) for e in raw
              if e.ph == "M" and e.name == "thread_name" and e.args is not None}
    ops, tasks = [], []
    for e in raw:
        if e.ph != "X" or process.get(e.pid) != "HCCL":
            continue
        lane = thread.get((e.pid, e.tid), "")
        if "Communication" in lane:
            ops.append((e.ts, e.name))
        elif e.args is not None and e.args.hccl_task_type is not None:
            a = e.args
            tasks.append((e.ts, e.dur, str(a.hccl_task_type), a.size_bytes, str(a.transport_type or ""),
                          str(a.link_type or ""), lane))
    if not tasks or not ops:
        return pd.DataFrame(columns=HCCL_TASK_COLUMNS)
    op_ts = to_ns([t for t, _ in ops])
    order = np.argsort(op_ts, kind="stable")
    op_ts, op_names = op_ts[order], np.array([n for _, n in ops], dtype=object)[order]
    ts = to_ns([t[0] for t in tasks])
    owner = np.searchsorted(op_ts, ts, side="right") - 1
    frame = pd.DataFrame({
        "op": np.where(owner >= 0, op_names[np.clip(owner, 0, None)], ""),
        "ts_ns": ts,
        "dur_ns": to_ns([t[1] for t in tasks]),
        "task_type": [t[2] for t in tasks],
        "size_bytes": pd.to_numeric(pd.Series([t[3] for t in tasks], dtype=object), errors="coerce").fillna(0)
                        .astype(np.int64).to_numpy(),
        "transport": [t[4] for t in tasks],
        "link_type": [t[5] for t in tasks],
        "plane": [t[6] for t in tasks],
    })
    return frame[owner >= 0].reset_index(drop=True)[HCCL_TASK_COLUMNS]


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


# kernel_details.csv column -> its name in schema.KERNEL_METRIC_COLUMNS (the only place these
# columns are read by torch_npu's names)
KERNEL_METRICS = {
    "Name": "name", "Type": "type", "Accelerator Core": "core", "Task ID": "task_id", "Block Dim": "block_dim",
    "Mix Block Dim": "mix_block_dim", "OP State": "op_state", "Input Shapes": "input_shapes",
    "Output Shapes": "output_shapes", "Input Data Types": "input_dtypes", "Output Data Types": "output_dtypes",
    "Input Formats": "input_formats", "Output Formats": "output_formats", "aicore_time(us)": "aicore_time_us",
    "aic_mte2_time(us)": "aic_mte2_time_us", "aic_fixpipe_time(us)": "aic_fixpipe_time_us",
    "aiv_mte2_time(us)": "aiv_mte2_time_us", "aiv_mte3_time(us)": "aiv_mte3_time_us",
    **{ratio: ratio for ratio in schema.AI_CORE_RATIOS},
}


def _kernel_metrics(raw: pd.DataFrame, ts: np.ndarray, dur: np.ndarray, stream: np.ndarray) -> pd.DataFrame:
    """kernel_details.csv rows in :data:`~npumagic.analysis.schema.KERNEL_METRIC_COLUMNS` (rank
    left to the caller): "N/A", blanks and the columns the file lacks become "" (text) or NaN / -1
    (numbers); shapes lose torch_npu's quotes."""
    out = {"ts_ns": ts, "dur_ns": dur, "stream": stream}
    for theirs, ours in KERNEL_METRICS.items():
        if theirs in raw:
            text = _unquoted(raw[theirs])
            dtype = schema.KERNEL_METRIC_COLUMNS[ours]
            out[ours] = (pd.to_numeric(text, errors="coerce") if dtype == "float64"
                         else to_int(text) if dtype == "int64" else pd.Categorical(text))
    return schema.coerce(pd.DataFrame(out), schema.KERNEL_METRIC_COLUMNS)


def _unquoted(column: pd.Series) -> np.ndarray:
    """A text column without torch_npu's quotes, "N/A" as "" and anything not text as NaN (as
    ``.str.strip('"').replace("N/A", "")`` gives; one pass, not two pandas string methods)."""
    return np.array([("" if (s := v.strip('"')) == "N/A" else s) if isinstance(v, str) else np.nan
                     for v in column.to_numpy(dtype=object)], dtype=object)


def kernel_metrics_from_details(raw: pd.DataFrame, rank: int) -> pd.DataFrame:
    """The kernel metrics of a summary stored before they were normalized, when the history kept
    kernel_details.csv's own columns (plus ts_ns and dur_ns) as ``details``."""
    text = raw.astype({c: str for c in raw.columns if c in KERNEL_METRICS and raw[c].dtype != object})
    stream = to_int(raw["Stream ID"]) if "Stream ID" in raw else np.full(len(raw), -1, np.int64)
    metrics = _kernel_metrics(text, raw["ts_ns"].to_numpy(np.int64), raw["dur_ns"].to_numpy(np.int64), stream)
    metrics["rank"] = rank
    return metrics


def _kernel_details(path: Path, events: pd.DataFrame,
                    notes: ReadNotes) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """kernel_details.csv's compute tasks (collectives are read from the HCCL lanes): as kernel
    events, as kernel metrics, and as read (kept in ``meta["vendor"]`` for reference)."""
    raw = _read_csv(path, KERNEL_COLUMNS, notes)
    ts, ts_ok = decimal_us_to_ns_checked(raw["Start Time(us)"])
    dur, dur_ok = decimal_us_to_ns_checked(raw["Duration(us)"])
    good = notes.count(path, len(raw), "rows", repeated_header=(raw["Name"] == "Name").to_numpy(),
                       text_or_out_of_range_Start_Time=~ts_ok, text_or_out_of_range_Duration=~dur_ok,
                       negative_Duration=dur < 0, negative_Start_Time=ts < 0,
                       # one task is one row: the same task twice (a concatenated export) would count twice
                       repeated_row=raw.duplicated(keep="first").to_numpy())
    keep = good & ~_is_collective(raw)  # collectives: HCCL lanes
    raw, ts, dur = raw[keep].reset_index(drop=True), ts[keep], dur[keep]
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
    return kernels, _kernel_metrics(raw, ts, dur, stream), raw.assign(ts_ns=ts, dur_ns=dur)


def _steps(events: pd.DataFrame, rank: int, notes: ReadNotes, path: Path) -> pd.DataFrame:
    marks = events[(events["kind"] == "annotation")]
    ids, too_big = step_ids(marks["name"], STEP_NAME.pattern)
    notes.skip(path, "step number out of range", int(too_big.sum()))
    marks = marks.loc[ids.index].assign(step=ids)
    if marks.empty:
        return schema.empty(schema.STEP_COLUMNS)
    marks = marks.sort_values("dur_ns").drop_duplicates("step", keep="last")
    return pd.DataFrame({"rank": rank, "step": marks["step"].to_numpy(), "start_ns": marks["ts_ns"].to_numpy(),
                         "end_ns": (marks["ts_ns"] + marks["dur_ns"]).to_numpy()})


def _memory(path: Path, rank: int, notes: ReadNotes) -> pd.DataFrame:
    if not path.is_file():
        return schema.empty(schema.MEMORY_COLUMNS)
    with reading(path):
        raw = _read_csv(path, ("Component", "Timestamp(us)", "Total Allocated(MB)", "Total Reserved(MB)"), notes)
        pta = raw[raw["Component"] == "PTA"]  # the PyTorch caching allocator's own view
        if pta.empty:
            pta = raw[raw["Total Allocated(MB)"] != ""]
        ts, ts_ok = decimal_us_to_ns_checked(pta["Timestamp(us)"])
        allocated, reserved = _number(pta["Total Allocated(MB)"]), _number(pta["Total Reserved(MB)"])
        text = lambda col, num: ((pta[col] != "") & (pta[col] != "N/A") & num.isna()).to_numpy()  # noqa: E731
        good = notes.count(path, len(pta), "rows", text_or_out_of_range_Timestamp=~ts_ok,
                           text_in_Total_Allocated=text("Total Allocated(MB)", allocated),
                           text_in_Total_Reserved=text("Total Reserved(MB)", reserved))
    mb = 1024.0 * 1024.0
    return pd.DataFrame({
        "rank": rank,
        "device": pta["Device Type"].to_numpy()[good] if "Device Type" in pta else "npu",
        "ts_ns": ts[good],
        "allocated_bytes": allocated.to_numpy()[good] * mb,
        "reserved_bytes": reserved.to_numpy()[good] * mb,
    })


def _communication(out: Path, rank: int, notes: ReadNotes | None = None) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
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
    """communication.json's rows (see :func:`_communication`): the calls' (none without
    ``calls``) and the links'. A call with a negative time or transit size (no profiler writes
    one) is left out with its links, counted in ``notes``."""
    data = _json(path)
    rows, link_rows, negative = [], [], []
    for step_key, kinds in data.items():
        step = _step_key(step_key, path)
        kinds = _object(kinds, path, repr(step_key))
        for group in ("collective", "p2p"):
            for op_key, op in _object(kinds.get(group) or {}, path, f"{step_key}.{group}").items():
                if op_key.startswith("Total") or not isinstance(op, dict):
                    continue
                name, _, comm_group = op_key.partition("@")
                where = f"{step_key}.{group}.{op_key}"
                t = _object(op.get("Communication Time Info", {}), path, f"{where}: Communication Time Info")
                bandwidth = _object(op.get("Communication Bandwidth Info", {}), path,
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
    data = _json(path)
    rows = []
    for step_key, kinds in data.items():
        step = _step_key(step_key, path)
        kinds = _object(kinds, path, repr(step_key))
        for group in ("collective", "p2p"):
            ops = _object(kinds.get(group) or {}, path, f"{step_key}.{group}")
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
