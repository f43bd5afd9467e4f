"""A run as a Chrome Trace Event JSON file that Perfetto (ui.perfetto.dev, trace_processor) and
chrome://tracing open: every event of the parsed trace (Kineto's and torch_npu's alike, from
the run's tables, not a copy of the profiler's file) as a slice of its rank's thread or stream,
the launch -> device work links as flows (on torch_npu also its task queue's Enqueue -> Dequeue), the device memory as counters, and npumagic's own
tracks per rank: the steps, the device's idle gaps with their cause, the blocking syncs, the
waits for a slower rank, the memory peak and the findings.

The JSON is written as it is made, in chunks (msgspec's JSON encoder), so a trace of millions of events is never
held as one document. Times are µs from the trace's first event (``otherData.origin_ns`` gives
that instant in the trace's own clock), so a float keeps them to the ns."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
import msgspec
import pandas as pd

from ..analysis.marks import GAP, KINDS, PEAK, marks as find_marks, of_finding
from ..analysis.schema import DEVICE_WORK, LAUNCH_KINDS, Trace

CHUNK = 50_000  # events serialised at a time
_json = msgspec.json.Encoder().encode  # msgspec, a dependency already: as fast as orjson, which is none
NPUMAGIC = "npumagic"  # the process of each rank holding npumagic's own tracks
STEPS, FINDINGS = "steps", "findings"
# npumagic's tracks of a rank, in the order they are listed (a mark kind's track is named after it)
TRACKS = (STEPS, GAP + "s", *(k for k in KINDS if k != GAP), FINDINGS)


@dataclass
class Exported:
    """What was written: ``slices`` (the trace's events), ``steps``, ``marks`` (by kind),
    ``findings``, ``flows`` (launch -> device work pairs), ``queue_flows`` (Enqueue -> Dequeue
    pairs), ``counters`` (memory samples)."""

    path: str
    slices: int = 0
    steps: int = 0
    marks: dict = field(default_factory=dict)
    findings: int = 0
    flows: int = 0
    queue_flows: int = 0  # torch_npu: Enqueue -> Dequeue of its task queue
    counters: int = 0

    def as_dict(self) -> dict:
        return {"path": self.path, "slices": self.slices, "steps": self.steps, "marks": dict(self.marks),
                "findings": self.findings, "flows": self.flows, "queue_flows": self.queue_flows,
                "counters": self.counters}


def write_perfetto(trace: Trace, path: str | Path, findings: Iterable = (), title: str = "") -> Exported:
    """Write ``trace`` (with ``findings``, Finding objects placed at their largest mark) to
    ``path`` as Chrome Trace Event JSON; return what was written."""
    from ..safeio import write_atomic_chunks

    done = Exported(str(path))
    write_atomic_chunks(path, _document(trace, list(findings), title, done))
    return done


def _document(trace: Trace, findings: list, title: str, done: Exported) -> Iterator[bytes]:
    ev = trace.events
    origin = int(min(ev["ts_ns"].min() if len(ev) else 0, trace.steps["start_ns"].min() if len(trace.steps) else 0,
                     trace.memory["ts_ns"].min() if len(trace.memory) else np.iinfo(np.int64).max))
    ids = _Ids(ev)
    other = {"producer": "npumagic", "title": title, "origin_ns": origin, "backend": trace.meta.backend,
             "path": trace.meta.path}
    yield b'{"displayTimeUnit":"ms","otherData":' + _json(other) + b',"traceEvents":[\n'
    table = find_marks(trace)
    ranks = sorted(set(ev["rank"].unique().tolist()) | set(trace.steps["rank"].unique().tolist())
                   | set(table["rank"].unique().tolist()))
    parts = itertools.chain([ids.names(ranks)], _slices(ev, ids, origin, done),
                            (f(*a) for f, a in ((_flows, (ev, ids, origin, done)), (_steps, (trace.steps, ids, origin, done)),
                                                (_marks, (table, ids, origin, done)),
                                                (_findings, (findings, table, trace.steps, ids, origin, done)),
                                                (_counters, (trace.memory, ids, origin, done)))))
    first = True
    for items in parts:  # one chunk at a time: the slices' list is made, written and dropped
        if items:
            yield (b"" if first else b",\n") + _json(items)[1:-1].replace(b"},{\"ph\"", b"},\n{\"ph\"")
            first = False
    yield b"\n]}\n"


def _us(ns, origin: int):
    """ns of the trace's clock as µs from ``origin`` (floats: a ns is 0.001)."""
    return (np.asarray(ns, dtype=np.int64) - origin) / 1e3


class _Ids:
    """The pid of each (rank, process) and tid of each lane: a lane ``Python/Thread 7`` is the
    thread ``Thread 7`` of the process ``rank 0: Python``; npumagic's tracks are the threads of
    ``rank 0: npumagic``."""

    def __init__(self, ev: pd.DataFrame) -> None:
        lanes = ev["lane"].cat.categories.astype(str) if len(ev) else pd.Index([], dtype=object)
        self.lane_names = np.asarray(lanes, dtype=object)
        self.pids: dict[tuple[int, str], int] = {}
        self.tids: dict[tuple[int, str], int] = {}  # (pid, thread name) -> tid
        pairs = ev[["rank", "lane"]].drop_duplicates() if len(ev) else pd.DataFrame(columns=["rank", "lane"])
        self.lane_tid: dict[tuple[int, int], tuple[int, int]] = {}  # (rank, lane code) -> (pid, tid)
        for rank, code in zip(pairs["rank"].to_numpy(), pairs["lane"].cat.codes.to_numpy() if len(pairs) else []):
            process, _, thread = str(self.lane_names[code]).rpartition("/")
            self.lane_tid[(int(rank), int(code))] = self.track(int(rank), process or "host", thread)

    def pid(self, rank: int, process: str) -> int:
        return self.pids.setdefault((rank, process), len(self.pids) + 1)

    def track(self, rank: int, process: str, thread: str) -> tuple[int, int]:
        pid = self.pid(rank, process)
        return pid, self.tids.setdefault((pid, thread), len(self.tids) + 1)

    def ours(self, rank: int, track: str) -> tuple[int, int]:
        return self.track(rank, NPUMAGIC, track)

    def of_rows(self, ranks: np.ndarray, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(pid, tid) arrays of events by their rank and lane code."""
        keys = list(self.lane_tid)
        table = np.array([self.lane_tid[k] for k in keys], dtype=np.int64).reshape(-1, 2)
        packed = np.array([r * (len(self.lane_names) + 1) + c for r, c in keys], dtype=np.int64)
        order = np.argsort(packed)
        at = order[np.searchsorted(packed[order], ranks * (len(self.lane_names) + 1) + codes)]
        return table[at, 0], table[at, 1]

    def names(self, ranks: list[int]) -> list[dict]:
        """The metadata events naming every process and thread (npumagic's tracks made first)."""
        for rank in ranks:
            for track in TRACKS:
                self.ours(int(rank), track)
        out = []
        for (rank, process), pid in self.pids.items():
            out.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                        "args": {"name": f"rank {rank}: {process}"}})
            out.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                        "args": {"sort_index": rank * 1000 + (0 if process == NPUMAGIC else pid)}})
        for (pid, thread), tid in self.tids.items():
            out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": thread}})
            out.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": tid}})
        return out


def _slices(ev: pd.DataFrame, ids: _Ids, origin: int, done: Exported) -> Iterator[list[dict]]:
    """Every event as a complete ("X") slice, in time order (a parent before its children)."""
    if not len(ev):
        return
    ts, dur = ev["ts_ns"].to_numpy(), np.maximum(ev["dur_ns"].to_numpy(), 0)
    order = np.lexsort((-dur, ts))
    names = np.asarray(ev["name"].cat.categories.astype(str), dtype=object)
    kinds = np.asarray(ev["kind"].cat.categories.astype(str), dtype=object)
    columns = {c: (ev[c].cat.codes.to_numpy(), np.asarray(ev[c].cat.categories.astype(str), dtype=object))
               for c in ("shapes", "source")}
    for a in range(0, order.size, CHUNK):
        rows = order[a:a + CHUNK]
        pids, tids = ids.of_rows(ev["rank"].to_numpy()[rows], ev["lane"].cat.codes.to_numpy()[rows])
        step, corr = ev["step"].to_numpy()[rows].tolist(), ev["correlation"].to_numpy()[rows].tolist()
        extra = {c: [v if k >= 0 and v else "" for k, v in zip(codes[rows], cats[np.maximum(codes[rows], 0)])]
                 for c, (codes, cats) in columns.items()} if len(names) else {}
        items = []
        for k, (name, kind, t, d, pid, tid, s, c) in enumerate(zip(
                names[ev["name"].cat.codes.to_numpy()[rows]], kinds[ev["kind"].cat.codes.to_numpy()[rows]],
                _us(ts[rows], origin).tolist(), (dur[rows] / 1e3).tolist(), pids.tolist(), tids.tolist(), step, corr)):
            args = {"step": s}
            if c >= 0:
                args["correlation"] = c
            for col in ("shapes", "source"):
                if extra[col][k]:
                    args[col] = extra[col][k]
            items.append({"ph": "X", "name": name, "cat": kind, "ts": t, "dur": d, "pid": pid, "tid": tid,
                          "args": args})
        done.slices += len(items)
        yield items


def _flows(ev: pd.DataFrame, ids: _Ids, origin: int, done: Exported) -> list[dict]:
    """A flow from each launch (a host call with a correlation id) to the device work it started,
    and on torch_npu from each Enqueue of the task queue to its Dequeue (the same correlation id),
    which runs the launch on a worker thread."""
    if not len(ev):
        return []
    corr, rank, host = ev["correlation"].to_numpy(), ev["rank"].to_numpy(), ev["device"].to_numpy() < 0
    names = ev["name"].astype(str)
    enqueue, dequeue = (names == "Enqueue").to_numpy(), names.str.startswith("Dequeue").to_numpy()
    launch = host & ev["kind"].isin(LAUNCH_KINDS).to_numpy() & (corr >= 0) & ~enqueue & ~dequeue
    work = ~host & ev["kind"].isin(DEVICE_WORK).to_numpy() & (corr >= 0)
    out: list[dict] = []
    done.flows = _pairs(ev, ids, origin, launch, work, "launch", 0, out)
    done.queue_flows = _pairs(ev, ids, origin, host & enqueue & (corr >= 0), host & dequeue & (corr >= 0), "task queue",
                              done.flows, out)
    return out


def _pairs(ev: pd.DataFrame, ids: _Ids, origin: int, start: np.ndarray, finish: np.ndarray, kind: str, first_id: int,
           out: list[dict]) -> int:
    """Flow events ("s" at the first of each (rank, correlation) of ``start``, "f" at that of
    ``finish``) appended to ``out``, ids from ``first_id``; how many pairs."""
    corr, rank = ev["correlation"].to_numpy(), ev["rank"].to_numpy()
    key = lambda m: pd.Series(np.flatnonzero(m), index=pd.MultiIndex.from_arrays([rank[m], corr[m]]))  # noqa: E731
    starts, ends = key(start), key(finish)
    starts, ends = starts[~starts.index.duplicated()], ends[~ends.index.duplicated()]
    both = starts.index.intersection(ends.index)
    if not len(both):
        return 0
    codes, ts = ev["lane"].cat.codes.to_numpy(), ev["ts_ns"].to_numpy()
    for side, rows, extra in (("s", starts.loc[both].to_numpy(), {}), ("f", ends.loc[both].to_numpy(), {"bp": "e"})):
        pids, tids = ids.of_rows(rank[rows], codes[rows])
        for n, (t, pid, tid) in enumerate(zip(_us(ts[rows], origin).tolist(), pids.tolist(), tids.tolist())):
            out.append({"ph": side, "name": kind, "cat": kind, "id": first_id + n, "ts": t, "pid": pid, "tid": tid,
                        **extra})
    return int(len(both))


def _steps(steps: pd.DataFrame, ids: _Ids, origin: int, done: Exported) -> list[dict]:
    out = []
    for r in steps.itertuples():
        pid, tid = ids.ours(int(r.rank), STEPS)
        out.append({"ph": "X", "name": f"step {int(r.step)}", "cat": "npumagic.step", "ts": float(_us(r.start_ns, origin)),
                    "dur": (int(r.end_ns) - int(r.start_ns)) / 1e3, "pid": pid, "tid": tid,
                    "args": {"step": int(r.step), "rank": int(r.rank)}})
    done.steps = len(out)
    return out


def _track_of(kind: str) -> str:
    return GAP + "s" if kind == GAP else kind


def _marks(table: pd.DataFrame, ids: _Ids, origin: int, done: Exported) -> list[dict]:
    """Each mark a slice of its kind's track (the memory peak an instant)."""
    out = []
    for r in table.itertuples():
        pid, tid = ids.ours(int(r.rank), _track_of(r.kind))
        event = {"name": r.label, "cat": f"npumagic.{r.rule}", "ts": float(_us(r.start_ns, origin)), "pid": pid,
                 "tid": tid, "args": {"finding": r.rule, "kind": r.kind}}
        if r.kind == PEAK:
            event.update(ph="i", s="t")
        else:
            event.update(ph="X", dur=(int(r.end_ns) - int(r.start_ns)) / 1e3)
        out.append(event)
        done.marks[r.kind] = done.marks.get(r.kind, 0) + 1
    return out


def _findings(findings: list, table: pd.DataFrame, steps: pd.DataFrame, ids: _Ids, origin: int,
              done: Exported) -> list[dict]:
    """Each finding an instant on its rank's findings track: at its largest mark, else at the first step."""
    out = []
    first_rank = int(steps["rank"].min()) if len(steps) else int(table["rank"].min()) if len(table) else 0
    for f in findings:
        mine = of_finding(table, f)
        if len(mine):
            rank, ts = int(mine["rank"].iat[0]), int(mine["start_ns"].iat[0])
        else:
            ranks = list(getattr(f, "ranks", ()) or ()) or [first_rank]
            own = steps[steps["rank"] == ranks[0]]
            rank, ts = int(ranks[0]), int(own["start_ns"].min()) if len(own) else origin
        pid, tid = ids.ours(rank, FINDINGS)
        out.append({"ph": "i", "s": "t", "name": f"{f.category}: {f.title}", "cat": f"npumagic.{f.category}",
                    "ts": float(_us(ts, origin)), "pid": pid, "tid": tid,
                    "args": {"rule": f.rule, "severity": f.severity, "impact": round(float(f.impact), 4),
                             "fix": f.fix, "where": f.where, "marks": int(len(mine))}})
    done.findings = len(out)
    return out


def _counters(memory: pd.DataFrame, ids: _Ids, origin: int, done: Exported) -> list[dict]:
    """Each device's allocated memory (MiB) as a counter of its rank's npumagic process."""
    out = []
    if memory is None or memory.empty:
        return out
    for (rank, device), part in memory.groupby(["rank", memory["device"].astype(str)], observed=True, sort=True):
        pid, _ = ids.ours(int(rank), STEPS)
        part = part.sort_values("ts_ns", kind="stable")
        name = f"{device} allocated MiB"
        for t, v in zip(_us(part["ts_ns"].to_numpy(), origin).tolist(), (part["allocated_bytes"] / 2**20).tolist()):
            if v == v:  # NaN is no JSON number
                out.append({"ph": "C", "name": name, "ts": t, "pid": pid, "tid": 0, "args": {"MiB": round(v, 3)}})
    done.counters = len(out)
    return out
