"""The CSV tables of torch_npu's text export, one reader a file.

kernel_details.csv gives the device kernels and their metrics (core type, shapes, AI Core
ratios); memory_record.csv the caching allocator's memory; l2_cache.csv the L2 hit and victim
rates of each task. The vendor's own derived tables (step_trace_time.csv, op_statistic.csv, ...)
are kept in ``meta["vendor"]`` for cross-checks (read when first looked up), never used to
compute npumagic's own metrics.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pandas as pd

from ....errors import TraceError
from ... import schema
from .._columns import US_LIMIT, decimal_us_to_ns_checked, small_int, to_int
from .._notes import ReadNotes, reading
from .files import read_csv
from .memory_csvs import MB, checked_sizes


KERNEL_COLUMNS = ("Name", "Type", "Accelerator Core", "Start Time(us)", "Duration(us)")


# kernel_details.csv's Type / Accelerator Core values of a collective: older CANN wrote HCCL, newer
# COMMUNICATION (msprof-analyze 26.2.0: advisor/advisor_backend/common_func_advisor/constant.py:217
# CoreType.HCCL = "COMMUNICATION"; advisor/analyzer/schedule/fusible_ops/fusible_operator_checker.py:91
# check_hccl: task_type in ["COMMUNICATION", "HCCL"])
COMM_CORES = ("HCCL", "COMMUNICATION")


def is_collective(raw: pd.DataFrame) -> np.ndarray:
    """The kernel_details.csv rows that are collectives, by their Type or Accelerator Core."""
    return (raw["Type"].isin(COMM_CORES) | raw["Accelerator Core"].isin(COMM_CORES)).to_numpy()


def kernel_details(path: Path, events: pd.DataFrame,
                   notes: ReadNotes) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """kernel_details.csv's compute tasks (collectives are read from the HCCL lanes): as kernel
    events, as kernel metrics, and as read (kept in ``meta["vendor"]`` for reference)."""
    raw = read_csv(path, KERNEL_COLUMNS, notes)
    ts, ts_ok = decimal_us_to_ns_checked(raw["Start Time(us)"])
    dur, dur_ok = decimal_us_to_ns_checked(raw["Duration(us)"])
    good = notes.count(path, len(raw), "rows", repeated_header=(raw["Name"] == "Name").to_numpy(),
                       text_or_out_of_range_Start_Time=~ts_ok, text_or_out_of_range_Duration=~dur_ok,
                       negative_Duration=dur < 0, negative_Start_Time=ts < 0,
                       # one task is one row: the same task twice (a concatenated export) would count twice
                       repeated_row=raw.duplicated(keep="first").to_numpy(),
                       Duration_longer_than_the_capture=_outlasting(ts, dur, ts_ok & dur_ok & (ts >= 0) & (dur >= 0)))
    keep = good & ~is_collective(raw)  # collectives: HCCL lanes
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


TASK_LIMIT_NS = 86_400 * 10**9  # a day: a task that long is no measurement (captures last seconds to minutes)


def _outlasting(ts: np.ndarray, dur: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """The rows whose task cannot have run that long: longer than a day, or (as the stray device
    events' bound, :mod:`.._stray`) longer than the capture the file's own start times span
    (at least :data:`~.._stray.SLACK_NS`) twice over plus all the other tasks' time together.
    The file alone judges: without trace_view.json there are no host events to bound the
    capture, and one task of 1e12 µs beside one other is as impossible as beside a thousand."""
    from .._stray import SLACK_NS

    out = valid & (dur > TASK_LIMIT_NS)
    if valid.sum() >= 2:
        capture = max(float(SLACK_NS), float(ts[valid].max() - ts[valid].min()))
        others = float(dur[valid].astype(np.float64).sum()) - dur.astype(np.float64)  # float: a sum past int64
        out |= valid & (dur > others + 2 * capture)
    return out


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


def l2_cache(path: Path, metrics: pd.DataFrame | None, rank: int) -> pd.DataFrame:
    """l2_cache.csv (per-task L2 hit and victim rates, ``--l2-cache``) as counters at each task's
    start, matched to the kernel metrics by (stream, task id), or else by the n-th task of the
    same name (level 0 writes no task ids)."""
    if not path.is_file() or metrics is None or metrics.empty:
        return schema.empty(schema.COUNTER_COLUMNS)
    l2 = read_csv(path, ("Op Name", "Hit Rate", "Victim Rate"))
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


def memory_record(path: Path, rank: int, notes: ReadNotes) -> pd.DataFrame:
    if not path.is_file():
        return schema.empty(schema.MEMORY_COLUMNS)
    with reading(path):
        raw = read_csv(path, ("Component", "Timestamp(us)", "Total Allocated(MB)", "Total Reserved(MB)"), notes)
        pta = raw[raw["Component"] == "PTA"]  # the PyTorch caching allocator's own view
        if pta.empty:
            pta = raw[raw["Total Allocated(MB)"] != ""]
        ts, ts_ok = decimal_us_to_ns_checked(pta["Timestamp(us)"])
        # text, negative or absurd sizes: as memory_csvs skips them for the memory view
        allocated, bad_a = checked_sizes(pta, "Total Allocated(MB)", MB)
        reserved, bad_r = checked_sizes(pta, "Total Reserved(MB)", MB)
        good = notes.count(path, len(pta), "rows", text_or_out_of_range_Timestamp=~ts_ok, **bad_a, **bad_r)
    return pd.DataFrame({
        "rank": rank,
        "device": pta["Device Type"].to_numpy()[good] if "Device Type" in pta else "npu",
        "ts_ns": ts[good],
        "allocated_bytes": allocated[good],
        "reserved_bytes": reserved[good],
    })


def _number(col: pd.Series) -> pd.Series:
    return pd.to_numeric(col.replace({"N/A": None, "": None}), errors="coerce")


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
            self._tables["step_trace_time"] = good_step_trace(read_csv(path), notes, path)

    def __getitem__(self, name: str) -> Any:
        if name not in self._tables:
            if name not in self._paths:
                raise KeyError(name)
            self._tables[name] = read_csv(self._paths[name])
        return self._tables[name]

    def __setitem__(self, name: str, table: Any) -> None:
        self._tables[name] = table

    def __iter__(self) -> Iterator[str]:
        return iter({**dict.fromkeys(self._paths), **dict.fromkeys(self._tables)})

    def __len__(self) -> int:
        return len(set(self._paths) | set(self._tables))


def good_step_trace(table: pd.DataFrame, notes: ReadNotes, path: Path) -> pd.DataFrame:
    """step_trace_time.csv without the rows no profiler writes, each counted in ``notes``: a
    negative time, a Computing, Communication(Not Overlapped) or Free longer than the step's Stage,
    a step listed twice (an exact repeat is left out; differing rows of one step all are, as
    neither can be told right)."""
    if table.empty or "Step" not in table:
        return table
    values = table.apply(pd.to_numeric, errors="coerce")
    times = values[[c for c in STEP_TRACE_TIMES if c in values]]
    stage = values["Stage"] if "Stage" in values else pd.Series(np.inf, index=values.index)
    parts = values[[c for c in ("Computing", "Communication(Not Overlapped)", "Free") if c in values]]
    repeat = table.duplicated(keep="first")
    clash = values["Step"].duplicated(keep=False) & ~table.duplicated(keep=False)
    good = notes.count(path, len(table), "rows", negative_time=(times < -1).any(axis=1).to_numpy(),  # -1 us: rounding
                       longer_than_its_Stage=parts.gt(stage + 1, axis=0).any(axis=1).to_numpy(),
                       repeated_row=repeat.to_numpy(), step_listed_twice_with_different_figures=clash.to_numpy())
    return table[good].reset_index(drop=True)


# the step_trace_time.csv times a row must not hold negative
STEP_TRACE_TIMES = ("Computing", "Communication(Not Overlapped)", "Overlapped", "Communication", "Free", "Stage",
                    "Preparing")


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


def vendor_column(table: pd.DataFrame | None, column: str) -> pd.Series:
    if table is None or column not in table or "Step" not in table:
        return pd.Series(dtype=float)
    steps = pd.to_numeric(table["Step"], errors="coerce")
    values = pd.to_numeric(table[column], errors="coerce")
    ok = steps.notna() & values.notna()
    return pd.Series(values[ok].to_numpy(), index=steps[ok].astype(np.int64).to_numpy())
