"""The critical path of one step of one rank: the chain of host operators, launches, kernels and
syncs that sets the step's length, and what bounds each stretch of it.

Modelled as HolisticTraceAnalysis' critical path (``hta/analyzers/critical_path_analysis.py``):
a node at each start and end of a host operator, runtime call and device task; edges for the
host thread's sequence (each operator's nested children in order), the launch delay (runtime call
start -> its kernel's start, when the stream was empty at launch), the kernel itself, the gap to
the previous kernel on its stream (when it was queued behind it), and the sync wait (the last
device task before a blocking call returns -> the call's end, of no weight: the host's time inside
a blocking call is waiting, not work). The longest path by edge weight is the critical path.

Two differences from HTA, both off with ``like_hta=True`` (the mode its figures are checked in):
the host's time between a thread's top-level operators (Python between ops) counts as host work
(HTA gives it no weight, so its path can be far shorter than the step), and a blocking call
(cudaDeviceSynchronize, cudaStreamSynchronize, cudaEventSynchronize, cudaMemcpy, and any host
call the reader calls a sync, as torch_npu's AscendCL@aclrtSynchronizeStream) waits for the
device's last task before its return even where the trace has no CUDA sync record (HTA adds sync
edges from those records only, so without them its path never waits on the device).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .schema import kind_in

# The calls whose time on the host is waiting (HTA's BLOCKING_SYNC_CALLS): no host weight inside
BLOCKING = frozenset({"cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventQuery", "cudaEventSynchronize",
                      "cudaMemcpy", "cudaMemcpyAsync", "aclrtSynchronizeDevice", "aclrtSynchronizeStream"})
# Those that wait for the device to drain, where the trace has no sync record to say on what
WAITS = frozenset({"cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaMemcpy",
                   "aclrtSynchronizeDevice", "aclrtSynchronizeStream"})
_NEVER = -(1 << 62)  # an edge's weight in a walk that must not take it
HOST_KINDS = ("host_op", "runtime", "sync", "dataloader")
HTA_HOST_KINDS = ("host_op", "runtime", "sync")  # HTA's cpu_op, cuda_runtime and cuda_driver
DEVICE_KINDS = ("kernel", "memcpy", "comm")
# Segment kinds; the first five carry weight (the path's length), the last two none
COUNTED = ("cpu_bound", "host_gap", "launch_delay", "gpu_compute_bound", "gpu_communication_bound",
           "gpu_memcpy", "kernel_gap")
UNCOUNTED = ("sync_wait", "sync")
SEGMENT_COLUMNS = ["start_ns", "end_ns", "weight_ns", "kind", "name", "lane"]

_END, _HOST, _START = 0, 1, 2  # tie order at one timestamp: device ends, host nodes, device starts


@dataclass(frozen=True)
class CriticalPath:
    """One step's critical path.

    ``segments``: one row per edge of the path, in time order; start_ns/end_ns (int64 ns, each
    segment starts where the one before ends), weight_ns (what it adds to the path's length: its
    span, or 0 for ``sync_wait``/``sync`` and, with ``like_hta``, ``host_gap``), kind (one of
    :data:`COUNTED` or :data:`UNCOUNTED`), name (the innermost host operator, or the kernel),
    lane. ``start_ns``/``end_ns``: the step's window."""

    step: int
    start_ns: int
    end_ns: int
    segments: pd.DataFrame

    @property
    def length_ns(self) -> int:
        """The path's length: the sum of its weights (ns)."""
        return int(self.segments["weight_ns"].sum())

    @property
    def span_ns(self) -> int:
        """From the path's first node to its last (ns): its length plus what it waits unweighted."""
        return int(self.segments["end_ns"].iat[-1] - self.segments["start_ns"].iat[0]) if len(self.segments) else 0

    def totals(self) -> pd.Series:
        """The path's weight by segment kind (ns), every kind listed."""
        return self.segments.groupby("kind", observed=True)["weight_ns"].sum().reindex(
            list(COUNTED + UNCOUNTED), fill_value=0).astype("int64")


def critical_path(events: pd.DataFrame, steps: pd.DataFrame, step: int | None = None, *,
                  like_hta: bool = False, rank: int | None = None) -> CriticalPath:
    """The critical path of one step.

    Parameters
    ----------
    events, steps : a Trace's tables (schema.EVENT_COLUMNS, STEP_COLUMNS).
    step : the step id; the rank's first step when None (as HTA's ``instance_id=None``).
    rank : the rank whose step it is; the first in ``steps`` when None.
    like_hta : weigh as HTA 0.5.0 does (see the module's docstring).

    The step's host events are those starting inside its window (ProfilerStep's start to end,
    durations above zero); its device tasks those launched by them.
    """
    if steps.empty:
        raise ValueError("critical path: the trace has no steps")
    rank = int(steps["rank"].iat[0]) if rank is None else rank
    steps = steps[steps["rank"] == rank]
    if steps.empty:
        raise ValueError(f"critical path: no steps of rank {rank}")
    chosen = steps.iloc[0] if step is None else steps[steps["step"] == step].squeeze(axis=0)
    if isinstance(chosen, pd.DataFrame):
        raise ValueError(f"critical path: no step {step}; steps: {steps['step'].tolist()}")
    start, end = int(chosen["start_ns"]), int(chosen["end_ns"])
    events = events[events["rank"].to_numpy() == rank]
    graph = _Graph(events, start, end, like_hta)
    return CriticalPath(int(chosen["step"]), start, end, graph.longest_path())


@dataclass(frozen=True)
class Removal:
    """What a fix takes out of a step, for :func:`replay`. ``host``: a mask over the events' rows,
    the host calls that go, with the calls nested in them and the device tasks they launch (a
    ``.item()`` takes its copy and its sync with it); ``python``: the host's time between a
    thread's top-level operators goes; ``only_time``: the host calls take no time but launch and
    wait as recorded (a host infinitely fast)."""

    host: np.ndarray | None = None
    python: bool = False
    only_time: bool = False


def replay(events: pd.DataFrame, steps: pd.DataFrame, step: int, removals: list[Removal], *,
           rank: int | None = None) -> tuple[int, list[int]]:
    """The step's critical-path length (ns) and its length without each of ``removals``: the
    step's dependencies replayed with what each removes taking no time, everything else as
    recorded (kernels, launch delays, the device's own gaps). What a fix can save is what the
    path loses, not the length of what it removes: a host wait removed while the device still
    computes shortens the step only by what the device then has left to wait. A device task
    starts no sooner than the task before it on its stream ends, as when it was recorded."""
    rank = int(steps["rank"].iat[0]) if rank is None else rank
    chosen = steps[(steps["rank"] == rank) & (steps["step"] == step)]
    if chosen.empty:
        raise ValueError(f"critical path: no step {step} of rank {rank}")
    keep = events["rank"].to_numpy() == rank
    graph = step_graph(events[keep], int(chosen["start_ns"].iat[0]), int(chosen["end_ns"].iat[0]))
    return graph.length(graph.without(Removal(), keep)), [graph.length(graph.without(r, keep)) for r in removals]


def step_graph(events: pd.DataFrame, start: int, end: int) -> "_Graph":
    """The dependency graph of one rank's events between ``start`` and ``end`` (ns), weighed as
    npumagic weighs a critical path (not like HTA), for replays of it."""
    return _Graph(events, start, end, like_hta=False)


class _Graph:
    """The step's nodes and edges as arrays; ``longest_path`` walks them once in time order."""

    def __init__(self, events: pd.DataFrame, start: int, end: int, like_hta: bool) -> None:
        ts, dur = events["ts_ns"].to_numpy(), events["dur_ns"].to_numpy()
        kinds = events["kind"]
        kind = kinds.to_numpy()
        on_host = kind_in(kinds, HTA_HOST_KINDS if like_hta else HOST_KINDS) & (events["stream"].to_numpy() < 0)
        host = np.flatnonzero(on_host & (ts >= start) & (ts <= end) & (dur > 0))
        self.name_column = events["name"]
        self.lanes, self.lane_column = events["lane"].to_numpy(), events["lane"]
        corr = events["correlation"].to_numpy()
        # a device task belongs to the step when its launch does (the launch is a runtime call)
        launches = host[kind_in(kinds, ("runtime", "sync"))[host] & (corr[host] >= 0)]
        launch_of = pd.Series(launches, index=corr[launches])
        launch_of = launch_of[~launch_of.index.duplicated()]
        device = np.flatnonzero(kind_in(kinds, DEVICE_KINDS) & (dur > 0))
        runtime = launch_of.reindex(corr[device]).to_numpy()
        keep = ~np.isnan(runtime)
        device, runtime = device[keep], runtime[keep].astype(np.int64)

        self.ts, self.dur, self.kind = ts, dur, kind
        self.host, self.device = host, device
        self.node_ev, self.node_ts, self.node_start, self.node_group, self.node_seq = [], [], [], [], []
        self.src, self.dst, self.weight, self.edge_kind, self.edge_ev = [], [], [], [], []
        host_start = self._host_chains(like_hta)
        self._device_chains(runtime, host_start, events["stream"].to_numpy(), like_hta)
        self._syncs(events, like_hta)

    @functools.cached_property
    def names(self) -> np.ndarray:
        """Each event's name (an object array, made where a name is read out)."""
        return self.name_column.to_numpy()

    def _named(self, names) -> np.ndarray:
        """Whether each event's name is one of ``names`` (judged once per distinct name)."""
        return _names_where(self.name_column, lambda index: index.isin(list(names)))

    # -- nodes and edges -------------------------------------------------------------------
    def _add_nodes(self, ev: np.ndarray, ts: np.ndarray, is_start: np.ndarray, group: np.ndarray | int,
                   seq: np.ndarray | int = 0) -> np.ndarray:
        first = sum(len(a) for a in self.node_ev)
        self.node_ev.append(ev)
        self.node_ts.append(ts)
        self.node_start.append(is_start)
        self.node_group.append(np.broadcast_to(group, len(ev)))
        self.node_seq.append(np.broadcast_to(seq, len(ev)))
        return np.arange(first, first + len(ev))

    def _add_edges(self, src: np.ndarray, dst: np.ndarray, weight: np.ndarray, kind: np.ndarray | str,
                   ev: np.ndarray) -> None:
        self.src.append(src)
        self.dst.append(dst)
        self.weight.append(weight)
        self.edge_kind.append(np.broadcast_to(np.asarray(kind, dtype=object), len(src)))
        self.edge_ev.append(ev)

    def _host_chains(self, like_hta: bool) -> np.ndarray:
        """Each host thread's operators in call-stack order (a depth-first walk of their nesting,
        as time order gives it: ends before starts at one instant, outer starts first, inner ends
        first). Returns the node of each host event's start, by position in ``host``."""
        ev = self.host
        n = len(ev)
        # one chain per thread: torch_npu puts a thread's CANN calls in a lane of their own
        # ("CANN/Thread 7" beside "Python/Thread 7"), nested in its operators all the same
        lane = self.thread = self._threads(ev)  # by position in ``host``
        begin, finish = self.ts[ev], self.ts[ev] + self.dur[ev]
        is_start = np.r_[np.ones(n, bool), np.zeros(n, bool)]
        at = np.r_[begin, finish]
        tie = np.r_[-finish, -begin]  # outer starts first; inner ends first
        pos = np.r_[np.arange(n), np.arange(n)]
        order = np.lexsort((np.where(is_start, pos, -pos), tie, is_start, at, np.r_[lane, lane]))
        is_start, at, pos = is_start[order], at[order], pos[order]
        nodes = self._add_nodes(ev[pos], at, is_start, _HOST, np.arange(2 * n))
        start_node = np.empty(n, np.int64)
        start_node[pos[is_start]] = nodes[is_start]
        if n < 2:
            return start_node
        depth = np.cumsum(np.where(is_start, 1, -1))  # lanes are contiguous and each returns to 0
        lanes = np.r_[lane, lane][order]
        # the innermost operator open after each node: itself after its start, else the one it returns to
        opened = pd.Series(np.where(is_start, ev[pos], -1).astype(float)).where(is_start)
        inner = opened.groupby([lanes, depth]).ffill().fillna(-1).to_numpy().astype(np.int64)
        inner[(depth == 0)] = -1
        same = lanes[1:] == lanes[:-1]
        src, dst = nodes[:-1][same], nodes[1:][same]
        span = np.diff(at)[same]
        gap = (depth[:-1] == 0)[same]  # from a top-level operator's end to the next one's start
        blocked = ~is_start[1:][same] & self._blocking(ev[pos[1:]][same], like_hta)
        kind = np.where(gap, "host_gap", np.where(blocked, "sync_wait", "cpu_bound"))
        weight = np.where(blocked | (gap & like_hta), 0, span)
        self._add_edges(src, dst, weight, kind, inner[:-1][same])
        return start_node

    def _threads(self, ev: np.ndarray) -> np.ndarray:
        """The thread of each host event, a code: torch_npu's "CANN/Thread 7" and "Python/Thread 7"
        are one thread (split once per lane name where the lanes are categorical)."""
        lanes = self.lane_column
        if isinstance(lanes.dtype, pd.CategoricalDtype):
            names, codes = lanes.cat.categories, lanes.cat.codes.to_numpy()[ev]
        else:
            codes, names = pd.factorize(pd.Series(self.lanes[ev]))
        thread = pd.Series(names, dtype=str).str.rsplit("/Thread ", n=1).str[-1]
        return pd.Categorical(thread).codes.astype(np.int64)[codes]

    def _blocking(self, ev: np.ndarray, like_hta: bool) -> np.ndarray:
        """Whether each event is a call the host waits in: HTA's list, and with npumagic's own
        weights every host call the reader calls a sync (torch_npu's AscendCL@aclrtSynchronize*)."""
        named = self._named(BLOCKING)[ev]
        return named if like_hta else named | (self.kind[ev] == "sync")

    def _device_chains(self, runtime: np.ndarray, host_start: np.ndarray, streams: np.ndarray, like_hta: bool) -> None:
        """Each device task, and what it waited for: its launch when its stream was empty at launch
        (the previous task had ended), else the previous task on its stream; with npumagic's own
        weights, another stream's task that ended after both and before it started (a stream waiting
        on an event: a collective's result, a side stream's copy; HTA draws these from CUDA's Stream
        Wait Event records, which most traces lack and torch_npu's never have)."""
        ev = self.device
        stream = streams[ev]
        order = np.lexsort((self.ts[ev], stream))
        ev, stream, runtime = ev[order], stream[order], runtime[order]
        self.device, self.device_stream, self.device_launch = ev, stream, runtime
        begin, finish = self.ts[ev], self.ts[ev] + self.dur[ev]
        starts = self._add_nodes(ev, begin, np.ones(len(ev), bool), _START)
        ends = self._add_nodes(ev, finish, np.zeros(len(ev), bool), _END)
        self.device_end = ends
        kind = np.where(self.kind[ev] == "comm", "gpu_communication_bound",
                        np.where(self.kind[ev] == "memcpy", "gpu_memcpy", "gpu_compute_bound"))
        is_comm = _names_where(self.name_column, lambda index: index.str.contains("nccl", case=False))[ev]
        kind[is_comm & (kind == "gpu_compute_bound")] = "gpu_communication_bound"
        self._add_edges(starts, ends, finish - begin, kind, ev)
        first = np.r_[True, stream[1:] != stream[:-1]]
        prev_end = np.r_[np.iinfo(np.int64).min, finish[:-1]]
        prev_end[first] = np.iinfo(np.int64).min
        launched = self.ts[runtime]
        pos = pd.Index(self.host).get_indexer(runtime)
        waits, on = (np.zeros(len(ev), bool), np.zeros(len(ev), np.int64)) if like_hta else \
            self._waited_on(stream, begin, finish, np.maximum(launched, prev_end))
        launch = ((prev_end < launched) | (prev_end > begin)) & (launched <= begin) & ~waits
        self._add_edges(host_start[pos[launch]], starts[launch], begin[launch] - launched[launch],
                        "launch_delay", ev[launch])
        queued = ~launch & ~first & (prev_end <= begin) & ~waits
        self._add_edges(ends[np.flatnonzero(queued) - 1], starts[queued], begin[queued] - prev_end[queued],
                        "kernel_gap", ev[np.flatnonzero(queued) - 1])
        self._add_edges(ends[on[waits]], starts[waits], begin[waits] - finish[on[waits]], "kernel_gap", ev[on[waits]])
        # a stream runs its tasks in order: binding only once a replay moves a launch earlier than
        # the task before it ends (left out of the recorded path, weight -1; see :meth:`without`)
        after = np.flatnonzero(~first & ~queued)  # a queued task has its kernel_gap edge from the one before
        self._add_edges(ends[after - 1], starts[after], np.full(len(after), -1, np.int64), "stream_order", ev[after])

    @staticmethod
    def _waited_on(stream: np.ndarray, begin: np.ndarray, finish: np.ndarray, ready: np.ndarray):
        """(whether each task waited on another stream, the position of the task it waited for):
        the last task to end before it started, where that is on another stream and ended after
        the task was ready (launched, and the one before it on its stream done)."""
        order = np.argsort(finish, kind="stable")
        last = np.searchsorted(finish[order], begin, side="right") - 1
        on = order[np.maximum(last, 0)]
        return (last >= 0) & (stream[on] != stream) & (finish[on] > ready), on

    def _syncs(self, events: pd.DataFrame, like_hta: bool) -> None:
        """A blocking call returns after the device task it waited for: the last one on the synced
        stream (all streams for a context or device sync) that ended before the call returned."""
        host = self.host
        call_end = self.ts[host] + self.dur[host]
        corr = events["correlation"].to_numpy()
        kind, stream = self.kind, events["stream"].to_numpy()
        in_host = np.zeros(len(kind), bool)
        in_host[host] = True
        records = np.flatnonzero((kind == "sync") & ((stream >= 0) | ~in_host))
        record_names = pd.Series(self.names[records]).astype(str)
        on = record_names.isin(["Stream Sync", "Context Sync"]).to_numpy()
        record_stream = pd.Series(np.where(record_names == "Stream Sync", stream[records], -1),
                                  index=corr[records])[on]
        record_stream = record_stream[~record_stream.index.duplicated()]
        synced = record_stream.reindex(corr[host]).to_numpy()  # NaN: no record; -1: every stream
        has_record = ~np.isnan(synced)
        waits = has_record if like_hta else has_record | self._named(WAITS)[host] | (kind[host] == "sync")
        end_nodes = self._end_nodes()
        for s in np.unique(np.where(has_record, synced, -1)[waits]):
            which = waits & (np.where(has_record, synced, -1) == s)
            tasks = slice(None) if s < 0 else self.device_stream == s
            finish = (self.ts + self.dur)[self.device][tasks]
            ends = self.device_end[tasks]
            order = np.argsort(finish, kind="stable")
            last = np.searchsorted(finish[order], call_end[which], side="right") - 1
            ok = last >= 0
            self._add_edges(ends[order[last[ok]]], end_nodes[np.flatnonzero(which)[ok]], np.zeros(ok.sum(), np.int64),
                            "sync", host[np.flatnonzero(which)[ok]])

    def _end_nodes(self) -> np.ndarray:
        """The node of each host event's end, by position in ``host``."""
        ev, is_start = self.node_ev[0], self.node_start[0]
        out = np.empty(len(self.host), np.int64)
        out[pd.Index(self.host).get_indexer(ev[~is_start])] = np.flatnonzero(~is_start)
        return out

    # -- the longest path ------------------------------------------------------------------
    def _arrays(self):
        """Nodes in time order and edges in the order of their ends' nodes (built once)."""
        if not hasattr(self, "_flat"):
            node_ts = np.concatenate(self.node_ts)
            rank = np.empty(len(node_ts), np.int64)
            rank[np.lexsort((np.concatenate(self.node_seq), np.concatenate(self.node_group), node_ts))] = \
                np.arange(len(node_ts))
            src, dst = np.concatenate(self.src), np.concatenate(self.dst)
            forward = rank[src] < rank[dst]  # a task the clocks put before its launch has no edge
            edges = np.flatnonzero(forward)[np.argsort(rank[dst[forward]], kind="stable")]
            self.node_order = rank  # each node's place in the walk (time order, ties as _END/_HOST/_START)
            self._flat = (node_ts, src, dst, np.concatenate(self.weight).astype(np.int64), edges,
                          np.concatenate(self.edge_kind), np.concatenate(self.edge_ev))
        return self._flat

    def _walk(self, weight: np.ndarray | None = None) -> tuple[list[int], list[int]]:
        """The longest path's length to each node and the edge it arrives by (-1: none); an
        edge of negative weight is left out."""
        node_ts, src, dst, recorded, edges, _, _ = self._arrays()
        weight = recorded if weight is None else weight
        edges = edges[weight[edges] >= 0]
        best = [0] * len(node_ts)
        via = [-1] * len(node_ts)
        for e, s, d, w in zip(edges.tolist(), src[edges].tolist(), dst[edges].tolist(), weight[edges].tolist()):
            length = best[s] + w
            if length > best[d]:
                best[d], via[d] = length, e
        return best, via

    def _best(self, weight: np.ndarray | None = None) -> list[int]:
        """The longest path's length to each node, as :meth:`_walk` finds it without the edges
        taken (a replay asks only for the length: twice as fast). An edge of negative weight
        weighs :data:`_NEVER` here, as no length is below 0 it is never taken."""
        node_ts, src, dst, recorded, edges, _, _ = self._arrays()
        if not hasattr(self, "_ends"):
            self._ends = (src[edges].tolist(), dst[edges].tolist())
        weight = (recorded if weight is None else weight)[edges]
        best = [0] * len(node_ts)
        for s, d, w in zip(*self._ends, np.where(weight >= 0, weight, _NEVER).tolist()):
            length = best[s] + w
            if length > best[d]:
                best[d] = length
        return best

    def edges_in_order(self, weight: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The edges a walk takes with ``weight`` (those of weight >= 0), in the order it takes
        them: (source node, end node, weight, the end node's place in the walk)."""
        _, src, dst, _, edges, _, _ = self._arrays()
        edges = edges[weight[edges] >= 0]
        return src[edges], dst[edges], weight[edges], self.node_order[dst[edges]]

    def collectives(self) -> pd.DataFrame:
        """The step's communication kernels: their edge (start -> end node), event row, name and
        recorded start, end and duration (ns), in time order."""
        node_ts, src, dst, recorded, _, kind, ev = self._arrays()
        edge = np.flatnonzero(kind == "gpu_communication_bound")
        return pd.DataFrame({"edge": edge, "ev": ev[edge], "name": pd.Series(self.names[ev[edge]]).astype(str).to_numpy(),
                             "start_node": src[edge], "end_node": dst[edge], "start_ns": node_ts[src[edge]],
                             "end_ns": node_ts[dst[edge]], "dur_ns": recorded[edge]}).sort_values(
            ["start_ns", "edge"], kind="stable", ignore_index=True)

    def length(self, weight: np.ndarray | None = None) -> int:
        """The longest path's length (ns), with ``weight`` in place of the recorded edges' weights."""
        if not self.node_ev or sum(len(a) for a in self.src) == 0:
            return 0
        return max(self._best(weight))

    def without(self, removal: Removal, rows: np.ndarray) -> np.ndarray:
        """The edges' weights with ``removal``'s calls and Python taking no time (``rows``: the
        mask that chose this rank's events, to read ``removal.host`` through); a sync on a
        removed call is left out (-1)."""
        node_ts, src, dst, recorded, _, kind, ev = self._arrays()
        edges = self._edges_by_role()
        weight = recorded.copy()
        weight[edges["stream_order"]] = 0
        if removal.python:
            weight[edges["host_gap"]] = 0
        if removal.host is None:
            return weight
        gone = self.host[np.asarray(removal.host)[rows][self.host]]
        covered = self._covered(gone)
        at = edges["on_host"]
        weight[at[covered(ev[at], node_ts[src[at]], node_ts[dst[at]])]] = 0
        if removal.only_time:
            return weight
        launched, calls = edges["launched"], edges["launched_by"]
        begin = self.ts[calls]
        weight[launched[covered(calls, begin, begin + self.dur[calls])]] = 0
        syncs = edges["sync"]
        begin = self.ts[ev[syncs]]
        weight[syncs[covered(ev[syncs], begin, begin + self.dur[ev[syncs]])]] = -1
        return weight

    def _edges_by_role(self) -> dict[str, np.ndarray]:
        """The edges a replay reweighs, by role (made once per graph): stream order, Python
        between operators, a host call's own time, a device task's (with the call that launched
        it), a sync."""
        if not hasattr(self, "_roles"):
            _, _, _, _, _, kind, ev = self._arrays()
            codes, names = pd.factorize(kind)
            named = {n: codes == i for i, n in enumerate(names)}
            none = np.zeros(len(kind), bool)
            launched = np.flatnonzero(sum((named.get(k, none) for k in (
                "launch_delay", "gpu_compute_bound", "gpu_communication_bound", "gpu_memcpy")), none))
            calls = pd.Series(self.device_launch, index=self.device).reindex(ev[launched]).to_numpy()
            known = ~np.isnan(calls)
            self._roles = {
                "stream_order": np.flatnonzero(named.get("stream_order", none)),
                "host_gap": np.flatnonzero(named.get("host_gap", none)),
                "on_host": np.flatnonzero((named.get("cpu_bound", none) | named.get("sync_wait", none)) & (ev >= 0)),
                "launched": launched[known], "launched_by": calls[known].astype(np.int64),
                "sync": np.flatnonzero(named.get("sync", none))}
        return self._roles

    def _covered(self, gone: np.ndarray):
        """A test of whether host events lie, on their own thread, inside the ``gone`` events
        (each thread's removed spans, nested or apart, by their start and running latest end)."""
        if not hasattr(self, "_host_position"):
            self._host_position = pd.Index(self.host)
        position = self._host_position
        base = int(self.ts[self.host].min()) if len(self.host) else 0
        shift = np.int64(1) << np.int64(44)  # 4.9 hours of ns: a thread's spans never reach the next's keys

        def key(ev: np.ndarray, at: np.ndarray) -> np.ndarray:
            pos = position.get_indexer(ev)
            return np.where(pos >= 0, self.thread[np.maximum(pos, 0)] * shift + (at - base), -1)

        starts = key(gone, self.ts[gone])
        order = np.argsort(starts, kind="stable")
        starts, ends = starts[order], np.maximum.accumulate(key(gone, self.ts[gone] + self.dur[gone])[order]) \
            if len(gone) else np.zeros(0, np.int64)

        def covered(ev: np.ndarray, begin: np.ndarray, finish: np.ndarray) -> np.ndarray:
            if not len(starts) or not len(ev):
                return np.zeros(len(ev), bool)
            first = key(ev, begin)
            last = np.searchsorted(starts, first, side="right") - 1
            return (first >= 0) & (last >= 0) & (ends[np.maximum(last, 0)] >= key(ev, finish))
        return covered

    def longest_path(self) -> pd.DataFrame:
        if not self.node_ev or sum(len(a) for a in self.src) == 0:
            return pd.DataFrame({c: pd.Series(dtype=t) for c, t in zip(
                SEGMENT_COLUMNS, ("int64", "int64", "int64", "object", "object", "object"))})
        node_ts, src, dst, weight, _, edge_kind, edge_ev = self._arrays()
        best, via = self._walk()
        path, node = [], int(np.argmax(best))
        while via[node] >= 0:
            path.append(via[node])
            node = int(src[via[node]])
        path = np.array(path[::-1], dtype=np.int64)
        path = path[node_ts[src[path]] < node_ts[dst[path]]]  # an instant adds nothing to read
        ev = edge_ev[path]
        return pd.DataFrame({
            "start_ns": node_ts[src[path]], "end_ns": node_ts[dst[path]], "weight_ns": weight[path],
            "kind": edge_kind[path].astype(object),
            "name": np.where(ev >= 0, pd.Series(self.names[np.maximum(ev, 0)]).astype(str).to_numpy(), ""),
            "lane": np.where(ev >= 0, pd.Series(self.lanes[np.maximum(ev, 0)]).astype(str).to_numpy(), ""),
        })[SEGMENT_COLUMNS]


def _names_where(names: pd.Series, test) -> np.ndarray:
    """``test`` (an Index of names -> bool array) of each row's name, False where it has none;
    judged once per distinct name where the column is categorical."""
    if isinstance(names.dtype, pd.CategoricalDtype):
        flags = np.asarray(test(pd.Index(names.cat.categories.astype(str))), dtype=bool)
        return np.r_[flags, False][names.array.codes]  # code -1 (no name) takes the last slot
    present = names.notna().to_numpy()
    out = np.zeros(len(names), dtype=bool)
    out[present] = np.asarray(test(pd.Index(names[present].astype(str))), dtype=bool)
    return out
