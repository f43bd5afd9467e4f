"""Reader for torch_npu's db export (``export_type=db``): ``ASCEND_PROFILER_OUTPUT/
ascend_pytorch_profiler_N.db``, one SQLite file per rank, in the same normalized tables as the
text export.

Table meanings follow torch_npu's own db parsers (``prof_db_parse/``): device tasks are ``TASK``
rows; compute kernels are the tasks named in ``COMPUTE_TASK_INFO``; collectives are
``COMMUNICATION_OP`` rows (their device stream from the ``TASK`` rows of the same connection),
busy while their own HCCL tasks run (:func:`_comm_busy`);
the HCCL plane tasks of ``COMMUNICATION_TASK_INFO`` carry each transfer's size, ranks, transport
and link type; ``STEP_TIME`` holds the host ``ProfilerStep#`` windows; ``PYTORCH_API`` and
``CANN_API`` the host lanes; every name is an id into ``STRING_IDS``. The files are opened
read-only (``file:...?mode=ro``), so a user's export is never written to.

``analysis.db`` (written beside it) holds torch_npu's derived tables; only its
``CommAnalyzerTime`` (wait and synchronisation time of each collective, the db twin of
communication.json's "Communication Time Info") is used, and ``StepTraceTime`` is kept in
``meta["vendor"]`` for cross-checks.
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ....errors import TraceError
from ... import schema
from .._columns import US_LIMIT, to_int
from .._db_counters import db_counters
from .._notes import ReadNotes
from ..kineto import DATALOADER_PREFIX, STEP_NAME

DB_PATTERN = "ascend_pytorch_profiler*.db"
# CANN_API.type -> the prefix torch_npu's text export gives these calls on the CANN lane
_API_PREFIX = {5000: "Runtime@", 5500: "Hccl@", 10000: "Node@", 15000: "Model@", 20000: "AscendCL@"}
# PYTORCH_API.type: 50001 op, 50002 queue (enqueue/dequeue), 50003 python function, 50004 mstx
_TORCH_KIND = {50001: "host_op", 50002: "runtime", 50003: "python", 50004: "annotation"}
MEMCPY_TASKS = frozenset({"MEMCPY_ASYNC", "PCIE_DMA_SQE", "SDMA_SQE"})
LOCAL_LINKS = frozenset({"ON_CHIP", "N/A", "INVALID_TYPE", "RESERVED"})
# COMPUTE_TASK_INFO's text columns (STRING_IDS ids) -> their schema.KERNEL_METRIC_COLUMNS names
TASK_TEXT = {"inputShapes": "input_shapes", "inputDataTypes": "input_dtypes", "inputFormats": "input_formats",
             "outputShapes": "output_shapes", "outputDataTypes": "output_dtypes", "outputFormats": "output_formats"}
# TASK_PMU_INFO metrics -> (their KERNEL_METRIC_COLUMNS names, scale): its times are in ns (aic_mte2_time /
# aic_total_time is aic_mte2_ratio), the text export's in us
PMU_METRICS = {**{ratio: (ratio, 1.0) for ratio in schema.AI_CORE_RATIOS},
               "aic_total_time": ("aicore_time_us", 1e-3), "aic_mte2_time": ("aic_mte2_time_us", 1e-3),
               "aic_fixpipe_time": ("aic_fixpipe_time_us", 1e-3), "aiv_mte2_time": ("aiv_mte2_time_us", 1e-3),
               "aiv_mte3_time": ("aiv_mte3_time_us", 1e-3)}


def find_db(out: Path) -> Path | None:
    """The ``ascend_pytorch_profiler*.db`` in an ``ASCEND_PROFILER_OUTPUT`` folder, if any."""
    found = sorted(out.glob(DB_PATTERN))
    return found[0] if found else None


def connect(path: Path) -> sqlite3.Connection:
    """Open ``path`` read-only: never creates, locks for writing, or journals the user's file."""
    uri = f"{path.resolve().as_uri()}?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True)
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as exc:
        raise TraceError(path, f"not a readable SQLite database ({exc}); expected torch_npu's db export") from None
    return conn


class _Db:
    """One opened profiler db: table checks, queries as DataFrames, STRING_IDS lookups."""

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self.conn, self.path = conn, path
        self.tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        self._strings: pd.Series | None = None

    def has(self, *tables: str) -> bool:
        return all(t in self.tables for t in tables)

    def columns(self, table: str) -> set[str]:
        return {r[1] for r in self.conn.execute(f"PRAGMA table_info({table})")} if self.has(table) else set()

    def query(self, sql: str) -> pd.DataFrame:
        try:
            return pd.read_sql_query(sql, self.conn)
        except (sqlite3.DatabaseError, pd.errors.DatabaseError) as exc:
            raise TraceError(self.path, f"query failed ({exc}); the tables do not match torch_npu's db export") from None

    def strings(self, ids: pd.Series) -> pd.Series:
        """``STRING_IDS`` values of ``ids`` ("" where absent)."""
        if self._strings is None:
            table = self.query("SELECT id, value FROM STRING_IDS") if self.has("STRING_IDS") else pd.DataFrame(
                {"id": [], "value": []})
            self._strings = pd.Series(table["value"].astype(str).to_numpy(), index=table["id"].astype(np.int64))
        codes = pd.to_numeric(ids, errors="coerce").fillna(-1).astype(np.int64)
        return pd.Series(self._strings.reindex(codes.to_numpy()).fillna("").to_numpy(), index=ids.index, dtype=object)

    def enum(self, table: str) -> dict[int, str]:
        if not self.has(table):
            return {}
        return dict(self.conn.execute(f"SELECT id, name FROM {table}").fetchall())

    def meta_value(self, name: str) -> Any:
        if not self.has("META_DATA"):
            return None
        row = self.conn.execute("SELECT value FROM META_DATA WHERE name = ?", (name,)).fetchone()
        if row is None:
            return None
        try:
            return json.loads(row[0])
        except (TypeError, json.JSONDecodeError):
            return row[0]


REQUIRED = ("TASK", "STRING_IDS")


def read_rank(db_path: Path, rank: int, notes: ReadNotes | None = None) -> dict[str, Any]:
    """Read one rank's ``ascend_pytorch_profiler_N.db`` into the reader's per-rank parts
    (events, steps, memory, comm, links, matrix, vendor tables, environment). Rows whose times
    no profiler writes (an end before the start, past the int64 nanosecond range) are skipped
    and counted in ``notes``."""
    try:
        return _read_rank(db_path, rank, notes if notes is not None else ReadNotes())
    except TraceError:
        raise
    except (ValueError, TypeError, OverflowError, KeyError, sqlite3.Error, pd.errors.DatabaseError) as exc:
        # text where torch_npu writes integers, NULL times, bytes that are no UTF-8, ...
        raise TraceError(db_path, f"holds values torch_npu does not write ({type(exc).__name__}: "
                                  f"{str(exc)[:200]})") from None


def _read_rank(db_path: Path, rank: int, notes: ReadNotes) -> dict[str, Any]:
    with closing(connect(db_path)) as conn:
        db = _Db(conn, db_path)
        lacking = [t for t in REQUIRED if not db.has(t)]
        if lacking:
            raise TraceError(db_path, f"lacks the tables {lacking}; expected torch_npu's db export "
                                      f"(TASK, COMPUTE_TASK_INFO, COMMUNICATION_OP, STRING_IDS, ...)")
        device_rank = rank
        if db.has("RANK_DEVICE_MAP"):
            row = conn.execute("SELECT rankId FROM RANK_DEVICE_MAP").fetchone()
            if row is not None and row[0] is not None and 0 <= int(row[0]) < 2**31:
                device_rank = int(row[0])
        kernels, metrics = _compute_tasks(db)
        good = _good_times(kernels, notes, db_path, "TASK")
        kernels, metrics = kernels[good], metrics[good]
        comm_events = _comm_ops(db)
        if comm_events.empty:
            _refuse_tasks_without_collectives(db)
        comm_events = comm_events[_good_times(comm_events, notes, db_path, "COMMUNICATION_OP")]
        comm_busy = _comm_busy(db, comm_events)
        host = [_torch_api(db), _cann_api(db)]
        host = [h[_good_times(h, notes, db_path, table)] for h, table in zip(host, ("PYTORCH_API", "CANN_API"))]
        copies = _memcpy_tasks(db)
        events = pd.concat([*host, kernels, copies[_good_times(copies, notes, db_path, "TASK")], comm_busy],
                           ignore_index=True)
        events["rank"] = device_rank
        steps = _steps(db, events, device_rank, notes, db_path)
        links, matrix = _links(db, steps, device_rank)
        comm = _comm_table(db, comm_events, steps, device_rank, links)
        vendor = _analysis_tables(db_path.parent)
        device = db.query("SELECT name FROM NPU_INFO") if db.has("NPU_INFO") else pd.DataFrame()
        return {
            "rank": device_rank,
            "events": events,
            "steps": steps,
            "memory": _memory(db, device_rank),
            "comm": comm,
            "links": links,
            "matrix": matrix,
            "counters": db_counters(conn, device_rank),
            "kernel_metrics": metrics.assign(rank=device_rank),
            "vendor": vendor,
            "environment": db.meta_value("ENV_VARIABLES") or {},
            "parallel_groups": db.meta_value("parallel_group_info") or {},
            "device_name": str(device["name"].iat[0]) if len(device) else "",
        }


NS_LIMIT = int(US_LIMIT) * 1000  # past it, nanoseconds leave int64 when added


def _good_times(frame: pd.DataFrame, notes: ReadNotes, path: Path, table: str) -> np.ndarray:
    """The rows of ``frame`` (ts_ns, dur_ns) whose times a profiler writes; the others counted."""
    if frame.empty:
        return np.ones(len(frame), dtype=bool)
    ts, dur = frame["ts_ns"].to_numpy(), frame["dur_ns"].to_numpy()
    return notes.count(f"{path} {table}", len(frame), "rows", end_before_start=dur < 0,
                       time_out_of_range=(ts < 0) | (ts > NS_LIMIT - np.maximum(dur, 0)))


def _lane(prefix: str, global_tid: pd.Series) -> list[str]:
    tid = pd.to_numeric(global_tid, errors="coerce").fillna(0).astype(np.int64) & 0xFFFFFFFF
    return [f"{prefix}/Thread {t}" for t in tid]


def _host(name: pd.Series, kind, start, end, lane, correlation, shapes="", source="") -> pd.DataFrame:
    start = pd.to_numeric(start, errors="coerce").fillna(0).astype(np.int64).to_numpy()
    end = pd.to_numeric(end, errors="coerce").fillna(0).astype(np.int64).to_numpy()
    return pd.DataFrame({"name": name.to_numpy(), "kind": kind, "ts_ns": start, "dur_ns": end - start,
                         "lane": lane, "stream": -1, "device": -1, "correlation": correlation, "shapes": shapes,
                         "source": source, "core": "cpu", "type": name.to_numpy()})


def _torch_api(db: _Db) -> pd.DataFrame:
    if not db.has("PYTORCH_API"):
        return pd.DataFrame()
    # startNs/endNs are TEXT in torch_npu's schema: cast in SQL so no digit is lost to float64
    api = db.query("SELECT CAST(startNs AS INTEGER) AS s, CAST(endNs AS INTEGER) AS e, globalTid, connectionId, "
                   "name, inputShapes, type FROM PYTORCH_API")
    name = db.strings(api["name"])
    kind = api["type"].map(_TORCH_KIND).fillna("host_op").to_numpy(dtype=object)
    kind = np.where(name.str.match(STEP_NAME.pattern), "annotation", kind)
    kind = np.where(name.str.startswith(DATALOADER_PREFIX), "dataloader", kind)
    shapes = db.strings(api["inputShapes"]) if api["inputShapes"].notna().any() else ""
    # PYTORCH_API.connectionId is an id into CONNECTION_IDS, whose connectionId matches TASK's
    correlation = np.full(len(api), -1, dtype=np.int64)
    if db.has("CONNECTION_IDS"):
        links = db.query("SELECT id, MIN(connectionId) AS c FROM CONNECTION_IDS GROUP BY id").set_index("id")["c"]
        ids = pd.to_numeric(api["connectionId"], errors="coerce")
        correlation = links.reindex(ids.to_numpy()).fillna(-1).astype(np.int64).to_numpy()
    return _host(name, kind, api["s"], api["e"], _lane("Python", api["globalTid"]), correlation, shapes)


def _cann_api(db: _Db) -> pd.DataFrame:
    if not db.has("CANN_API"):
        return pd.DataFrame()
    api = db.query("SELECT startNs, endNs, type, globalTid, connectionId, name FROM CANN_API")
    name = db.strings(api["name"])
    name = api["type"].map(_API_PREFIX).fillna("").astype(str) + name
    kind = np.where(name.str.contains("Synchronize", regex=False), "sync", "runtime")
    return _host(name, kind, api["startNs"], api["endNs"], _lane("CANN", api["globalTid"]),
                 pd.to_numeric(api["connectionId"], errors="coerce").fillna(-1).astype(np.int64).to_numpy())


def _device(frame: pd.DataFrame, name: pd.Series, kind: str, core, type_) -> pd.DataFrame:
    stream = frame["streamId"].astype(np.int64).to_numpy()
    return pd.DataFrame({
        "name": name.to_numpy(), "kind": kind, "ts_ns": frame["startNs"].astype(np.int64).to_numpy(),
        "dur_ns": (frame["endNs"] - frame["startNs"]).astype(np.int64).to_numpy(),  # < 0: skipped by _good_times
        "lane": [f"Ascend Hardware/Stream {s}" for s in stream], "stream": stream,
        "device": frame["deviceId"].astype(np.int64).to_numpy(),
        "correlation": frame["connectionId"].fillna(-1).astype(np.int64).to_numpy(),
        "shapes": frame.get("shapes", ""), "source": "", "core": core, "type": type_,
    })


def _compute_tasks(db: _Db) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Compute kernels (TASK rows named in COMPUTE_TASK_INFO) as events and as kernel metrics
    (:data:`~npumagic.analysis.schema.KERNEL_METRIC_COLUMNS`, with the PMU metrics of TASK_PMU_INFO)."""
    if not db.has("COMPUTE_TASK_INFO"):
        return pd.DataFrame(), schema.empty(schema.KERNEL_METRIC_COLUMNS)
    texts = [c for c in TASK_TEXT if c in db.columns("COMPUTE_TASK_INFO")]
    raw = db.query("SELECT t.startNs, t.endNs, t.deviceId, t.connectionId, t.streamId, t.taskId, t.globalTaskId, "
                   "c.name, c.taskType, c.opType, c.blockDim, c.mixBlockDim"
                   + "".join(f", c.{c}" for c in texts)
                   + " FROM COMPUTE_TASK_INFO AS c JOIN TASK AS t ON c.globalTaskId = t.globalTaskId")
    name = db.strings(raw["name"])
    core = db.strings(raw["taskType"])
    op_type = db.strings(raw["opType"])
    op_type = op_type.where(op_type.ne("") & op_type.ne("N/A"), name.str.replace(r"_?\d+$", "", regex=True))
    shapes = db.strings(raw["inputShapes"]) if "inputShapes" in raw else ""
    kernels = _device(raw.assign(shapes=shapes), name, "kernel", core.to_numpy(), op_type.to_numpy())
    metrics = pd.DataFrame({
        "ts_ns": kernels["ts_ns"].to_numpy(), "dur_ns": kernels["dur_ns"].to_numpy(), "name": name.to_numpy(),
        "type": op_type.to_numpy(), "core": core.to_numpy(), "stream": kernels["stream"].to_numpy(),
        "task_id": to_int(raw["taskId"]),
        "block_dim": pd.to_numeric(raw["blockDim"], errors="coerce").to_numpy(dtype=float),
        "mix_block_dim": pd.to_numeric(raw["mixBlockDim"], errors="coerce").to_numpy(dtype=float),
        # as the text reader: "" where N/A, shapes without torch_npu's quotes
        **{TASK_TEXT[c]: db.strings(raw[c]).str.strip('"').replace("N/A", "").to_numpy() for c in texts},
    })
    if db.has("TASK_PMU_INFO"):
        pmu = db.query("SELECT globalTaskId, name, value FROM TASK_PMU_INFO")
        pmu["metric"] = db.strings(pmu["name"])
        pmu = pmu[pmu["metric"].isin(PMU_METRICS)]
        if len(pmu):
            wide = pmu.drop_duplicates(["globalTaskId", "metric"]).pivot(index="globalTaskId", columns="metric",
                                                                          values="value")
            wide = wide.reindex(raw["globalTaskId"].to_numpy())
            for metric in wide.columns:
                ours, scale = PMU_METRICS[metric]
                metrics[ours] = pd.to_numeric(wide[metric], errors="coerce").to_numpy(dtype=float) * scale
    return kernels, metrics


def _memcpy_tasks(db: _Db) -> pd.DataFrame:
    # Host<->device copies: TASK rows of a copy type that no collective or kernel owns.
    task = db.query("SELECT t.startNs, t.endNs, t.deviceId, t.connectionId, t.streamId, t.taskType, t.globalTaskId "
                    "FROM TASK AS t")
    task["type"] = db.strings(task["taskType"])
    owned = set()
    for table in ("COMPUTE_TASK_INFO", "COMMUNICATION_TASK_INFO"):
        if db.has(table):
            owned |= set(db.query(f"SELECT globalTaskId FROM {table}")["globalTaskId"])
    copies = task[task["type"].isin(MEMCPY_TASKS) & ~task["globalTaskId"].isin(owned)]
    return _device(copies, copies["type"], "memcpy", "", copies["type"].to_numpy())


def _refuse_tasks_without_collectives(db: _Db) -> None:
    """HCCL tasks with no collective to time them would read as a job that never communicated:
    its communication time would count as free time."""
    if not db.has("COMMUNICATION_TASK_INFO"):
        return
    tasks = db.conn.execute("SELECT COUNT(*) FROM COMMUNICATION_TASK_INFO").fetchone()[0]
    if tasks:
        raise TraceError(db.path, f"COMMUNICATION_TASK_INFO lists {tasks} communication tasks but COMMUNICATION_OP "
                                  "no collective: the export is incomplete (torch_npu writes both); export it again")


def _comm_busy(db: _Db, ops: pd.DataFrame) -> pd.DataFrame:
    """The collectives as device time: the union of each COMMUNICATION_OP's own HCCL tasks (TASK
    joined with COMMUNICATION_TASK_INFO on globalTaskId), one event a stretch; an op without
    tasks keeps its span. An op's span runs from its first task to its last, and can hold time
    in which none of its tasks runs (the device waits, not communicates): analysis.db's
    StepTraceTime of the 2024 export (msinsight_2024/db_level0) is the task union exactly (rank
    0: 38,033.569 us of communication; the op spans 38,522.184 us, 1.0% of the step more).
    torch_npu 2.14.0 computes it from the op spans (prof_view/prof_db_parse/
    _trace_step_time_db_parser.py, _init_task_info_from_db: ``FROM COMMUNICATION_OP``); on
    exports where the two differ so little (db/level1: 0.08 ms, 0.06% of the step) either reads."""
    if ops.empty or not db.has("COMMUNICATION_TASK_INFO"):
        return ops
    tasks = db.query("SELECT c.opId AS op_id, t.startNs AS s, t.endNs AS e FROM COMMUNICATION_TASK_INFO AS c "
                     "JOIN TASK AS t ON c.globalTaskId = t.globalTaskId")
    tasks = tasks[tasks["op_id"].isin(ops["op_id"]) & (tasks["e"] >= tasks["s"])]
    if tasks.empty:
        return ops
    tasks = tasks.sort_values(["op_id", "s"], kind="stable")
    op, start, end = (tasks[c].to_numpy(np.int64) for c in ("op_id", "s", "e"))
    reach = pd.Series(end).groupby(op).cummax().to_numpy()  # the furthest end so far within the op
    new = np.ones(len(op), dtype=bool)
    new[1:] = (op[1:] != op[:-1]) | (start[1:] > reach[:-1])
    piece = np.cumsum(new) - 1
    pieces = pd.DataFrame({"op_id": op[new], "ts_ns": start[new],
                           "end": pd.Series(end).groupby(piece).max().to_numpy()})
    covered = ops[ops["op_id"].isin(pieces["op_id"])]
    spans = covered.drop(columns=["ts_ns", "dur_ns"]).merge(pieces, on="op_id", how="inner", sort=False)
    spans["dur_ns"] = spans.pop("end") - spans["ts_ns"]
    return pd.concat([ops[~ops["op_id"].isin(pieces["op_id"])], spans[ops.columns]], ignore_index=True)


def _comm_ops(db: _Db) -> pd.DataFrame:
    if not db.has("COMMUNICATION_OP"):
        return pd.DataFrame()
    ops = db.query("SELECT c.opName, c.startNs, c.endNs, c.connectionId, c.groupName, c.opId, "
                   "MIN(t.streamId) AS streamId, MIN(t.deviceId) AS deviceId "
                   "FROM COMMUNICATION_OP AS c LEFT JOIN TASK AS t ON t.connectionId = c.connectionId "
                   "GROUP BY c.opId")
    ops["deviceId"] = ops["deviceId"].fillna(0)
    ops["streamId"] = ops["streamId"].fillna(-1)
    name = db.strings(ops["opName"])
    events = _device(ops, name, "comm", "", name.to_numpy())
    events["lane"] = [f"HCCL/Group {g} Communication" for g in db.strings(ops["groupName"])]
    events["op_id"] = ops["opId"].to_numpy()
    events["group_name"] = db.strings(ops["groupName"]).to_numpy()
    return events


def _steps(db: _Db, events: pd.DataFrame, rank: int, notes: ReadNotes, path: Path) -> pd.DataFrame:
    if db.has("STEP_TIME"):
        raw = db.query("SELECT id, startNs, endNs FROM STEP_TIME")
        ids = pd.to_numeric(raw["id"].astype(str).str.extract(r"(\d+)$")[0], errors="coerce")
        raw = raw[ids.notna()]
        if len(raw):
            steps = pd.DataFrame({"rank": rank, "step": ids.dropna().astype(np.int64).to_numpy(),
                                  "start_ns": raw["startNs"].astype(np.int64).to_numpy(),
                                  "end_ns": raw["endNs"].astype(np.int64).to_numpy()})
            repeated = steps["step"][steps["step"].duplicated()]
            if len(repeated):
                raise TraceError(path, f"STEP_TIME lists step {int(repeated.iat[0])} more than once: its steps "
                                       "cannot be told apart")
            good = _good_times(steps.assign(ts_ns=steps["start_ns"], dur_ns=steps["end_ns"] - steps["start_ns"]),
                               notes, path, "STEP_TIME")
            return steps[good].reset_index(drop=True)
    marks = events[events["kind"] == "annotation"]
    ids = marks["name"].astype(str).str.extract(STEP_NAME)[0]
    marks = marks[ids.notna()]
    if marks.empty:
        return schema.empty(schema.STEP_COLUMNS)
    return pd.DataFrame({"rank": rank, "step": ids.dropna().astype(np.int64).to_numpy(),
                         "start_ns": marks["ts_ns"].to_numpy(), "end_ns": (marks["ts_ns"] + marks["dur_ns"]).to_numpy()})


def _step_of(ts: np.ndarray, steps: pd.DataFrame) -> np.ndarray:
    if steps.empty:
        return np.full(len(ts), -1, dtype=np.int64)
    ordered = steps.sort_values("start_ns")
    idx = np.searchsorted(ordered["start_ns"].to_numpy(), ts, side="right") - 1
    return np.where(idx >= 0, ordered["step"].to_numpy()[np.clip(idx, 0, None)], -1)


def _analysis_time(out: Path) -> pd.DataFrame:
    path = out / "analysis.db"
    if not path.is_file():
        return pd.DataFrame()
    with closing(connect(path)) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "CommAnalyzerTime" not in tables:
            return pd.DataFrame()
        return pd.read_sql_query("SELECT hccl_op_name, group_name, wait_time, synchronization_time, transit_time "
                                 "FROM CommAnalyzerTime", conn)


def _comm_table(db: _Db, ops: pd.DataFrame, steps: pd.DataFrame, rank: int, links: pd.DataFrame) -> pd.DataFrame:
    if ops.empty:
        return schema.empty(schema.COMM_COLUMNS)
    name = ops["name"].astype(str)
    p2p = name.str.lower().str.match(r"hcom_(send|receive|batchsendrecv)")
    frame = pd.DataFrame({
        "rank": rank, "step": _step_of(ops["ts_ns"].to_numpy(), steps), "op": name.to_numpy(),
        "group": np.where(p2p, "p2p", "collective"), "ts_ns": ops["ts_ns"].to_numpy(),
        "elapsed_us": ops["dur_ns"].to_numpy() / 1000.0, "group_name": ops["group_name"].to_numpy(),
    })
    timing = _analysis_time(db.path.parent)
    if len(timing):  # wait/sync as torch_npu derived them (same figures as communication.json)
        # analysis.db names the group by its hash, the profiler db by its comm name: match on the
        # op name, which HCCL numbers uniquely within a rank's capture
        timing = timing.drop_duplicates("hccl_op_name").set_index("hccl_op_name")
        for ours, theirs in (("wait_us", "wait_time"), ("sync_us", "synchronization_time"),
                             ("transit_us", "transit_time")):
            frame[ours] = pd.to_numeric(timing[theirs], errors="coerce").reindex(frame["op"]).to_numpy() * 1000.0
    if len(links):
        physical = links[~links["link_type"].isin(["SDMA", "RDMA"])]
        best = (physical if len(physical) else links).sort_values("transit_mb", ascending=False)
        best = best.drop_duplicates("op").set_index("op")
        frame["transit_mb"] = best["transit_mb"].reindex(frame["op"]).to_numpy()
        frame["bandwidth_gbps"] = best["bandwidth_gbps"].reindex(frame["op"]).to_numpy()
        frame["link"] = best["link_type"].reindex(frame["op"]).fillna("").to_numpy()
    return frame.drop(columns="group_name")


def _links(db: _Db, steps: pd.DataFrame, rank: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Each collective's transfers by link type and by (src, dst) pair, from the HCCL plane tasks.

    A link's transit time is the summed duration of its own transfer tasks (size > 0), so its
    bandwidth is size / its own time, as torch_npu's "Communication Bandwidth Info" and
    msprof-analyze compute it. HCCS, PCIE, SIO, ... are the physical links of the SDMA transport;
    the SDMA row aggregates them (on-chip copies excluded), RDMA is the inter-node transport.
    """
    empty = schema.empty(schema.LINK_COLUMNS), schema.empty(schema.MATRIX_COLUMNS)
    if not db.has("COMMUNICATION_TASK_INFO"):
        return empty
    raw = db.query("SELECT c.name, c.groupName, c.srcRank, c.dstRank, c.transportType, c.linkType, c.size, "
                   "t.startNs, t.endNs FROM COMMUNICATION_TASK_INFO AS c "
                   "JOIN TASK AS t ON t.globalTaskId = c.globalTaskId WHERE c.size > 0")
    if raw.empty:
        return empty
    transport = raw["transportType"].map(db.enum("ENUM_HCCL_TRANSPORT_TYPE")).fillna("")
    link = raw["linkType"].map(db.enum("ENUM_HCCL_LINK_TYPE")).fillna("")
    raw = raw.assign(op=db.strings(raw["name"]), group=db.strings(raw["groupName"]), transport=transport,
                     link_type=link, mb=raw["size"].astype(float) / 1e6,
                     ms=(raw["endNs"] - raw["startNs"]).clip(lower=0).astype(float) / 1e6,
                     step=_step_of(raw["startNs"].to_numpy(), steps))
    remote = raw[(raw["transport"] != "LOCAL") & ~raw["link_type"].isin(LOCAL_LINKS)]
    per_link = remote[remote["transport"] == "SDMA"].groupby(["step", "op", "group", "link_type"], as_index=False)
    sdma = remote[remote["transport"] == "SDMA"].assign(link_type="SDMA")
    rdma = remote[remote["transport"] == "RDMA"].assign(link_type="RDMA")
    parts = [per_link[["mb", "ms"]].sum()]
    for frame in (sdma, rdma):
        if len(frame):
            parts.append(frame.groupby(["step", "op", "group", "link_type"], as_index=False)[["mb", "ms"]].sum())
    links = pd.concat(parts, ignore_index=True)
    links = pd.DataFrame({"rank": rank, "step": links["step"], "op": links["op"], "group": links["group"],
                          "link_type": links["link_type"], "transit_mb": links["mb"], "transit_ms": links["ms"],
                          "bandwidth_gbps": _ratio(links["mb"], links["ms"])})
    # a task without a destination (dstRank 0xFFFFFFFF: an in-place reduce) stays on its own rank
    raw["dstRank"] = raw["dstRank"].where(raw["dstRank"].between(0, 2**31 - 1), raw["srcRank"])
    local = raw["transport"].eq("LOCAL") | raw["srcRank"].eq(raw["dstRank"])
    pairs = raw.assign(link_type=np.where(local, "LOCAL", raw["link_type"].where(raw["transport"] != "RDMA", "RDMA")))
    valid = pairs["srcRank"].between(0, 2**31 - 1)
    matrix = pairs[valid].groupby(["step", "op", "group", "srcRank", "dstRank", "link_type"], as_index=False)[
        ["mb", "ms"]].sum()
    matrix = pd.DataFrame({"rank": rank, "step": matrix["step"], "op": matrix["op"], "group": matrix["group"],
                           "src_rank": matrix["srcRank"], "dst_rank": matrix["dstRank"],
                           "link_type": matrix["link_type"], "transit_mb": matrix["mb"], "transit_ms": matrix["ms"],
                           "bandwidth_gbps": _ratio(matrix["mb"], matrix["ms"])})
    return links, matrix


def _ratio(mb: pd.Series, ms: pd.Series) -> np.ndarray:
    # MB / ms = GB/s (decimal units, as torch_npu reports bandwidth)
    mb, ms = mb.to_numpy(dtype=float), ms.to_numpy(dtype=float)
    return np.divide(mb, ms, out=np.full(len(mb), np.nan), where=ms > 0)


def _memory(db: _Db, rank: int) -> pd.DataFrame:
    if not db.has("MEMORY_RECORD"):
        return schema.empty(schema.MEMORY_COLUMNS)
    raw = db.query("SELECT component, timestamp, totalAllocated, totalReserved, deviceId FROM MEMORY_RECORD")
    component = db.strings(raw["component"])
    pta = raw[component == "PTA"]  # the PyTorch caching allocator's own view, as the text reader keeps
    if pta.empty:
        pta = raw
    device = pd.to_numeric(pta["deviceId"], errors="coerce").fillna(-1).astype(np.int64)
    return pd.DataFrame({
        "rank": rank,
        "device": [f"NPU:{d}" if d >= 0 else "CPU" for d in device],
        "ts_ns": pta["timestamp"].astype(np.int64).to_numpy(),
        "allocated_bytes": pta["totalAllocated"].astype(float).to_numpy(),
        "reserved_bytes": pta["totalReserved"].astype(float).to_numpy(),
    })


def _analysis_tables(out: Path) -> dict[str, pd.DataFrame]:
    """torch_npu's own derived tables in analysis.db, kept for cross-checks only."""
    path = out / "analysis.db"
    if not path.is_file():
        return {}
    with closing(connect(path)) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        names = {"StepTraceTime": "step_trace_time", "CommAnalyzerBandwidth": "comm_bandwidth",
                 "CommAnalyzerMatrix": "comm_matrix", "CommAnalyzerTime": "comm_time"}
        found = {ours: pd.read_sql_query(f"SELECT * FROM {table}", conn)
                 for table, ours in names.items() if table in tables}
    if "step_trace_time" in found:  # in step_trace_time.csv's words, so both are checked alike
        found["step_trace_time"] = found["step_trace_time"].rename(columns=STEP_TRACE_NAMES)
    return found


# analysis.db StepTraceTime's columns -> step_trace_time.csv's (torch_npu 2.14.0
# prof_view/prof_db_parse/_trace_step_time_db_parser.py writes the same figures in this order)
STEP_TRACE_NAMES = {"step": "Step", "computing": "Computing", "communication_not_overlapped": "Communication(Not Overlapped)",
                    "overlapped": "Overlapped", "communication": "Communication", "free": "Free", "stage": "Stage",
                    "bubble": "Bubble", "preparing": "Preparing",
                    "communication_not_overlapped_and_exclude_receive":
                        "Communication(Not Overlapped and Exclude Receive)"}
