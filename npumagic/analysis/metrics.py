"""Trace -> Summary: per-step time breakdown, utilisation, top kernels and host ops, syncs,
communication, memory and per-rank comparison. Vectorised pandas/numpy throughout.

The device-time model, one definition for every device backend (CUDA, ROCm, torch_npu):
device work belongs to the step whose host launched it (:func:`~.schema.assign_steps`); the
step's window runs from its first device activity to the next step's first, so windows tile
the device timeline (:func:`device_windows`); inside its window, ``computing`` is the union of
compute kernels, ``communication`` of collectives, ``memcpy`` of copies and memsets, ``busy``
of all device activity, ``idle = wall - busy``; so ``computing <= busy <= wall`` always.
``stage``, ``free`` and ``preparing`` keep torch_npu's step_trace_time.csv definitions (the
span of the step's own compute and collective tasks, the time in it doing neither, and host
step start to its first task). Host-side measures (``dataloader``, ``sync``) are host time in
the host step. On the CPU backend the "device" is the CPU and the window is the host step:
computing is the union of operator time outside DataLoader waits, idle the rest.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from . import counters as hw
from .intervals import Spans
from .schema import Trace
from .temporal import TEMPORAL_COLUMNS, rank_temporal

STEP_COLUMNS = ["step", "start_us", "wall_us", "computing_us", "communication_us", "comm_not_overlapped_us",
                "overlapped_us", "free_us", "preparing_us", "dataloader_us", "memcpy_us", "sync_us", "busy_us", "idle_us",
                "stage_us", "device_util"]
KERNEL_COLUMNS = ["name", "type", "core", "count", "total_us", "mean_us", "min_us", "max_us", "share", "shapes"]
HOST_OP_COLUMNS = ["name", "count", "total_us", "mean_us", "max_us", "share"]
SYNC_COLUMNS = ["name", "count", "total_us", "per_step", "source"]
COMM_COLUMNS = ["op", "count", "elapsed_us", "wait_us", "wait_ratio", "sync_ratio", "transit_mb", "bandwidth_gbps", "link"]
RANK_COLUMNS = ["rank", "steps", "step_median_us", "computing_us", "communication_us", "comm_not_overlapped_us",
                "free_us", "dataloader_us", "device_util", "slowest", "dp", "pp", "tp", "stage"]
LINK_COLUMNS = ["rank", "op", "group", "link_type", "transit_mb", "transit_ms", "bandwidth_gbps"]
MEMORY_COLUMNS = ["device", "peak_allocated_bytes", "peak_reserved_bytes", "capacity_bytes"]
RULE_TABLES = ("hccl_tasks", "device_info")  # vendor tables the advice rules read
SYNC_HOST_OPS = frozenset({"aten::_local_scalar_dense", "aten::item"})
AIC_RATIO_COLUMNS = ("aic_mac_ratio", "aic_scalar_ratio", "aic_mte1_ratio", "aic_mte2_ratio", "aic_fixpipe_ratio",
                     "aiv_vec_ratio", "aiv_scalar_ratio", "aiv_mte2_ratio", "aiv_mte3_ratio")


@dataclass(frozen=True)
class Summary:
    """What one rank of a run spent its time on. Times are microseconds.

    Attributes
    ----------
    steps : one row per step, columns :data:`STEP_COLUMNS`.
    kernels : device kernels by total time, :data:`KERNEL_COLUMNS`; on the CPU backend the
        operators by self time (duration minus their children's).
    host_ops : host operators by total (inclusive) time, :data:`HOST_OP_COLUMNS`.
    syncs : host-device synchronisations, :data:`SYNC_COLUMNS`.
    comm : collectives by operation, :data:`COMM_COLUMNS`.
    memory : peaks per device, :data:`MEMORY_COLUMNS`; ``memory_timeline`` the raw samples.
    ranks : one row per rank when the trace holds several, :data:`RANK_COLUMNS` (dp/pp/tp: the
        rank's index in its data/pipeline/tensor parallel group, stage = pp, where the profiler
        metadata names the groups; -1 elsewhere).
    links : every collective's transfers by link type, :data:`LINK_COLUMNS`, each with its own
        transit time (bandwidth = transit_mb / transit_ms, GB/s), for every rank.
    matrix : transfers by (source rank, destination rank), for every rank (see
        :func:`npumagic.analysis.cluster.communication_matrix`).
    temporal : one row per rank, HolisticTraceAnalysis's temporal breakdown of device time
        (:data:`~npumagic.analysis.temporal.TEMPORAL_COLUMNS`); empty without device activity.
    meta : backend, device name, rank, source path; ``sources`` (where each figure comes from)
        and ``note`` (what a partial export lacks).
    hardware : per-step device counters (HBM, LLC, AI Core frequency), see
        :func:`npumagic.analysis.counters.hardware_table`; empty when none were recorded.
    l2 : L2 cache hit/victim rates per operator type (:func:`~npumagic.analysis.counters.l2_table`).
    frequency_drops : operators run at a reduced AI Core frequency
        (:func:`~npumagic.analysis.counters.frequency_drops`).
    host : per-step host CPU (process, cell thread, DataLoader workers, cores) from npumagic's
        psutil samples (:func:`~npumagic.analysis.counters.host_table`); empty without them.
    """

    steps: pd.DataFrame
    kernels: pd.DataFrame
    host_ops: pd.DataFrame
    syncs: pd.DataFrame
    comm: pd.DataFrame
    memory: pd.DataFrame
    memory_timeline: pd.DataFrame
    ranks: pd.DataFrame
    meta: dict[str, Any] = field(default_factory=dict)
    per_rank: dict[int, "Summary"] = field(default_factory=dict, repr=False, compare=False)
    details: pd.DataFrame | None = field(default=None, repr=False, compare=False)  # torch_npu kernel_details
    links: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=LINK_COLUMNS), repr=False, compare=False)
    matrix: pd.DataFrame = field(default_factory=pd.DataFrame, repr=False, compare=False)
    hardware: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=hw.HARDWARE_COLUMNS), repr=False,
                                   compare=False)
    l2: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=hw.L2_COLUMNS), repr=False, compare=False)
    frequency_drops: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=hw.FREQ_OP_COLUMNS),
                                          repr=False, compare=False)
    host: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=hw.HOST_COLUMNS), repr=False,
                               compare=False)
    temporal: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=TEMPORAL_COLUMNS), repr=False,
                                   compare=False)
    # for the advice rules: the rank's events without Python stack frames (not stored in the history:
    # too large; a reloaded run's host-side rules stay silent) and the small vendor tables they read
    events: pd.DataFrame | None = field(default=None, repr=False, compare=False, metadata={"persist": False})
    vendor: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    # -- headline numbers -------------------------------------------------------------------
    @property
    def step_stats(self) -> dict[str, float]:
        """Step wall time: mean, median, p90, std and coefficient of variation (us)."""
        wall = self.steps["wall_us"].to_numpy(dtype=float)
        if wall.size == 0:
            return {"n": 0, "mean_us": np.nan, "median_us": np.nan, "p90_us": np.nan, "std_us": np.nan, "cv": np.nan}
        std = float(wall.std(ddof=1)) if wall.size > 1 else 0.0
        return {"n": int(wall.size), "mean_us": float(wall.mean()), "median_us": float(np.median(wall)),
                "p90_us": float(np.percentile(wall, 90)), "std_us": std,
                "cv": std / float(wall.mean()) if wall.mean() > 0 else np.nan}

    @property
    def comm_matrix(self) -> pd.DataFrame:
        """Source rank x destination rank bandwidth (GB/s) over the capture, from ``matrix``
        (see :func:`npumagic.analysis.cluster.communication_matrix`)."""
        from .cluster import communication_matrix

        return communication_matrix(self.matrix)

    @property
    def total_wall_us(self) -> float:
        return float(self.steps["wall_us"].sum())

    def share(self, column: str) -> float:
        """``column``'s share of the total step wall time (0..1)."""
        total = self.total_wall_us
        return float(self.steps[column].sum()) / total if total > 0 else float("nan")

    @property
    def device_util(self) -> float:
        return self.share("busy_us")

    @property
    def headline(self) -> dict[str, float]:
        s = self.step_stats
        return {"steps": s["n"], "step_median_us": s["median_us"], "step_p90_us": s["p90_us"], "step_cv": s["cv"],
                "device_util": self.device_util, "computing_share": self.share("computing_us"),
                "communication_share": self.share("comm_not_overlapped_us"),
                "free_share": self.share("free_us"), "dataloader_share": self.share("dataloader_us"),
                "sync_share": self.share("sync_us"),
                "syncs_per_step": float(self.syncs["per_step"].sum()) if len(self.syncs) else 0.0,
                **self._counter_headline()}

    def _counter_headline(self) -> dict[str, float]:
        """Means over the steps of the hardware and host figures that were recorded."""
        out = {}
        for table, columns in ((self.hardware, ("hbm_gbps", "llc_hit_rate", "aicore_freq_mhz")),
                               (self.host, ("process_cpu_pct", "main_thread_cpu_pct", "worker_cpu_pct_mean",
                                            "cores_busy_pct", "rss_bytes"))):
            for column in columns:
                if len(table) and table[column].notna().any():
                    out[column if table is self.hardware else f"host_{column}"] = float(table[column].mean())
        if len(self.host):
            out["host_workers"] = float(self.host["workers"].max())
        return out

    # -- display (built by npumagic.render.text) ---------------------------------------------
    def __str__(self) -> str:
        from ..render.text import summary_text

        return summary_text(self)

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(str(self) if not cycle else "Summary(...)")

    def _repr_html_(self) -> str:
        from ..render.text import summary_html

        return summary_html(self)


# -- public entry --------------------------------------------------------------------------
def summarize(trace: Trace, rank: int | None = None) -> Summary:
    """Compute the :class:`Summary` of one rank of ``trace`` (default: the lowest rank),
    with every rank's summary in ``.per_rank`` and their comparison in ``.ranks``.

    Parameters
    ----------
    trace : a normalized Trace (see :mod:`npumagic.analysis.schema`).
    rank : the rank to describe; must be one of ``trace.ranks``.
    """
    ranks = trace.ranks or [0]
    if rank is not None and rank not in ranks:
        raise ValueError(f"rank {rank} not in trace; ranks: {ranks}")
    per_rank = {r: _summarize_rank(trace, r) for r in ranks}
    return combine(per_rank, rank)


def combine(per_rank: dict[int, Summary], rank: int | None = None) -> Summary:
    """The Summary of a job from its ranks' own Summaries: ``rank``'s tables (default: the lowest
    rank), the rank comparison in ``.ranks`` and every rank's links and matrix. Only per-rank
    summaries are needed, so ranks can be summarised apart (e.g. on Dask workers)."""
    ranks = sorted(per_rank)
    table = _rank_table(per_rank)
    chosen = per_rank[rank if rank is not None else ranks[0]]
    links = pd.concat([per_rank[r].links for r in ranks], ignore_index=True)
    matrix = pd.concat([per_rank[r].matrix for r in ranks], ignore_index=True)
    temporal = pd.concat([per_rank[r].temporal for r in ranks], ignore_index=True).reindex(columns=TEMPORAL_COLUMNS)
    return dataclasses.replace(chosen, ranks=table, per_rank=per_rank, links=links, matrix=matrix, temporal=temporal)


def _summarize_rank(trace: Trace, rank: int) -> Summary:
    mine = trace.for_rank(rank)
    ev = mine.events
    steps = mine.steps.sort_values("start_ns")
    on_device = ev["device"].to_numpy() >= 0
    backend = trace.meta.get("backend", "cpu")
    device_mode = bool(on_device.any())
    sources = trace.meta.get("sources", {}).get(rank, {})
    vendor = trace.meta.get("vendor", {}).get(rank, {})
    if str(sources.get("breakdown", "")).endswith("(vendor)"):  # only step_trace_time.csv was there
        step_table = _vendor_step_table(vendor.get("step_trace_time"), steps)
        device_mode = True
    else:
        step_table = _step_table(ev, steps, device_mode)
    total_wall = float(step_table["wall_us"].sum())
    in_steps = ev[ev["step"] >= 0]
    kernels = _kernel_table(in_steps, device_mode, total_wall, trace.meta.get("vendor", {}).get(rank, {}))
    meta = {k: v for k, v in trace.meta.items() if k != "vendor"}
    loaders = in_steps.loc[in_steps["kind"] == "dataloader", "name"].astype(str)
    meta.update(rank=rank, device_mode=device_mode, backend=backend,
                dataloader_iter=loaders.mode().iat[0] if len(loaders) else "",
                sources=sources, note=trace.meta.get("notes", {}).get(rank, ""),
                parallel=parallel_indices(trace.meta.get("parallel_groups", {}).get(rank, {}), rank))
    for key in ("notes", "parallel_groups"):
        meta.pop(key, None)
    details = vendor.get("kernel_details")
    links = mine.links
    counters = mine.counters
    device_kernels = in_steps[(in_steps["kind"] == "kernel") & (in_steps["device"] >= 0)]
    return Summary(
        steps=step_table,
        kernels=kernels,
        host_ops=_host_op_table(in_steps, total_wall),
        syncs=_sync_table(in_steps, max(len(steps), 1)),
        comm=_comm_table(mine.comm, in_steps, links),
        memory=_memory_table(mine.memory, trace.meta),
        memory_timeline=mine.memory.reset_index(drop=True),
        ranks=pd.DataFrame(columns=RANK_COLUMNS),
        meta=meta,
        details=details,
        links=links[LINK_COLUMNS].reset_index(drop=True),
        matrix=mine.matrix.reset_index(drop=True),
        hardware=hw.hardware_table(counters[counters["device"] >= 0], steps, trace.meta.get("hbm_peak_bytes_per_s"),
                                   trace.meta.get("aicore_nominal_mhz")),
        l2=hw.l2_table(counters, device_kernels),
        frequency_drops=hw.frequency_drops(counters, device_kernels, trace.meta.get("aicore_nominal_mhz")),
        host=hw.host_table(counters, steps),
        temporal=rank_temporal(ev, steps, rank, rank in trace.meta.get("steps_inferred", [])),
        events=ev[ev["kind"] != "python"],
        vendor={k: v for k, v in vendor.items() if k in RULE_TABLES},
    )


PARALLEL_KINDS = ("dp", "pp", "tp")


def parallel_indices(groups: dict[str, Any], rank: int) -> dict[str, int]:
    """dp/pp/tp index of ``rank`` from torch_npu's ``parallel_group_info`` (profiler_metadata.json
    or the db's META_DATA): ``{comm_name: {group_name, group_rank, global_ranks}}``. A group
    whose name starts with dp, pp or tp (Megatron/MindSpeed's names: "dp", "dp_cp", "pp", "tp",
    ...) gives the rank's index in it; stage is the pipeline index."""
    found: dict[str, int] = {}
    for info in (groups or {}).values():
        if not isinstance(info, dict):
            continue
        name = str(info.get("group_name", "")).lower()
        kind = next((k for k in PARALLEL_KINDS if name == k or name.startswith(k + "_") or name.startswith(k + "-")),
                    None)
        if kind is None or (kind in found and name != kind):
            continue
        members = [int(r) for r in info.get("global_ranks", []) if str(r).lstrip("-").isdigit()]
        index = info.get("group_rank")
        if index is None and rank in members:
            index = members.index(rank)
        if index is not None:
            found[kind] = int(index)
    if "pp" in found:
        found["stage"] = found["pp"]
    return found


def _vendor_step_table(table: pd.DataFrame | None, steps: pd.DataFrame) -> pd.DataFrame:
    """The step table of a rank that holds only step_trace_time.csv: torch_npu's own figures."""
    if table is None or table.empty:
        return pd.DataFrame(columns=STEP_COLUMNS)
    v = table.apply(pd.to_numeric, errors="coerce")
    get = lambda c: v[c].fillna(0.0).to_numpy() if c in v else np.zeros(len(v))  # noqa: E731
    out = pd.DataFrame({
        "step": v["Step"].astype("Int64").to_numpy(dtype=np.int64),
        "start_us": (steps["start_ns"].to_numpy() - steps["start_ns"].min()) / 1000.0 if len(steps) == len(v)
        else np.zeros(len(v)),
        "computing_us": get("Computing"), "communication_us": get("Communication"),
        "comm_not_overlapped_us": get("Communication(Not Overlapped)"), "overlapped_us": get("Overlapped"),
        "free_us": get("Free"), "preparing_us": get("Preparing"), "stage_us": get("Stage"),
        "dataloader_us": np.nan, "sync_us": np.nan, "memcpy_us": np.nan,
    })
    out["wall_us"] = out["stage_us"] + out["preparing_us"]
    out["busy_us"] = out["computing_us"] + out["comm_not_overlapped_us"]
    out["idle_us"] = np.maximum(out["wall_us"] - out["busy_us"], 0.0)
    out["device_util"] = np.where(out["wall_us"] > 0, out["busy_us"] / out["wall_us"], np.nan)
    return out[STEP_COLUMNS]


def _spans(frame: pd.DataFrame) -> Spans:
    start = frame["ts_ns"].to_numpy()
    return Spans.union_of(start, start + frame["dur_ns"].to_numpy())


DEVICE_WORK = ("kernel", "comm", "memcpy")


def _step_table(ev: pd.DataFrame, steps: pd.DataFrame, device_mode: bool) -> pd.DataFrame:
    if steps.empty:
        return pd.DataFrame(columns=STEP_COLUMNS)
    kind = ev["kind"]
    dataloader = _spans(ev[kind == "dataloader"])
    syncs = _spans(ev[_is_host_sync(ev)])
    host_start = steps["start_ns"].to_numpy()
    host_end = steps["end_ns"].to_numpy()
    if device_mode:
        work = ev[kind.isin(DEVICE_WORK) & (ev["device"] >= 0)]
        compute, comm, memcpy = (_spans(work[work["kind"] == k]) for k in DEVICE_WORK)
        lo, hi = device_windows(work, steps)
        tasks = work[(work["kind"] != "memcpy") & (work["step"] >= 0)]
        ends = tasks["ts_ns"] + tasks["dur_ns"]
        first = tasks.groupby("step")["ts_ns"].min().reindex(steps["step"]).to_numpy()
        last = ends.groupby(tasks["step"]).max().reindex(steps["step"]).to_numpy()
        has_tasks = ~np.isnan(first)
        first = np.where(has_tasks, first, host_start).astype(np.int64)
        last = np.where(has_tasks, last, host_start).astype(np.int64)
        # torch_npu's step_trace_time columns: Stage spans the step's own compute and collective
        # tasks, Free is the time in it doing neither, Preparing the host step start to the first task
        stage = last - first
        free = stage - (compute | comm).covered(first, last)
        preparing = np.where(has_tasks, first - host_start, 0)
        busy_spans = compute | comm | memcpy
    else:
        lo, hi = host_start, host_end
        ops = ev[(kind == "host_op") & (ev["device"] < 0)]
        compute = _spans(ops) - dataloader
        comm = memcpy = Spans.empty()
        busy_spans = compute
        stage = hi - lo
        preparing = np.zeros(len(steps), dtype=np.int64)
        free = stage - compute.covered(lo, hi)
    computing = compute.covered(lo, hi)
    communication = comm.covered(lo, hi)
    overlapped = (compute & comm).covered(lo, hi)
    busy = busy_spans.covered(lo, hi)
    us = lambda a: np.asarray(a, dtype=np.float64) / 1000.0  # noqa: E731
    out = pd.DataFrame({
        "step": steps["step"].to_numpy(),
        "start_us": us(lo - lo.min()),
        "wall_us": us(hi - lo),
        "computing_us": us(computing),
        "communication_us": us(communication),
        "comm_not_overlapped_us": us(communication - overlapped),
        "overlapped_us": us(overlapped),
        "free_us": us(np.maximum(free, 0)),
        "preparing_us": us(preparing),
        "dataloader_us": us(dataloader.covered(host_start, host_end)),
        "memcpy_us": us(memcpy.covered(lo, hi)),
        "sync_us": us(syncs.covered(host_start, host_end)),
        "busy_us": us(busy),
        "idle_us": us(hi - lo - busy),
        "stage_us": us(stage),
    })
    out["device_util"] = np.where(out["wall_us"] > 0, out["busy_us"] / out["wall_us"], np.nan)
    return out[STEP_COLUMNS]


def device_windows(work: pd.DataFrame, steps: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Each step's device window ``[lo, hi)`` in ns, aligned with ``steps`` (sorted by start).

    The device window of step k runs from the first device activity launched in step k to the
    first of the next step that launched any, so windows tile the device timeline. At the ends
    of the capture there is no neighbouring step: the first window starts at the host step start
    (the host's preparation of the first step is part of it, as it is of every later window),
    or, while the device is still busy with work launched before the trace, when that is done,
    and at the latest at its own first activity; the last window ends at its last device
    activity (after it the host only stops the profiler). A step that launched no device work
    keeps its host window.

    Parameters
    ----------
    work : device events (kernels, collectives, copies) with ``step``, ``ts_ns``, ``dur_ns``.
    steps : the rank's steps with ``step``, ``start_ns``, ``end_ns``, sorted by ``start_ns``.
    """
    mine = work[work["step"] >= 0]
    g = mine.groupby("step")
    first = g["ts_ns"].min().reindex(steps["step"]).to_numpy()
    last = (mine["ts_ns"] + mine["dur_ns"]).groupby(mine["step"]).max().reindex(steps["step"]).to_numpy()
    lo, hi = steps["start_ns"].to_numpy().copy(), steps["end_ns"].to_numpy().copy()
    active = np.flatnonzero(~np.isnan(first))
    if active.size:
        starts = np.maximum.accumulate(first[active].astype(np.int64))  # windows tile: never step back
        backlog = work[(work["step"] < 0) & (work["ts_ns"] < starts[0])]
        backlog_end = int((backlog["ts_ns"] + backlog["dur_ns"]).max()) if len(backlog) else lo[active[0]]
        starts[0] = min(starts[0], max(lo[active[0]], backlog_end))
        lo[active] = starts
        hi[active] = np.append(starts[1:], np.int64(last[active[-1]]))
        hi[active] = np.maximum(hi[active], lo[active])
    return lo, hi


def self_time_ns(ops: pd.DataFrame) -> np.ndarray:
    """Each operator's own time: its duration minus that of its direct children on its thread.

    Vectorised: nesting depth from counts of starts and ends (ops on a thread nest properly),
    the parent is the latest earlier op one level up, and children's durations are summed per
    parent with bincount.
    """
    n = len(ops)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    lane = ops["lane"].cat.codes.to_numpy().astype(np.int64)
    start = ops["ts_ns"].to_numpy()
    dur = ops["dur_ns"].to_numpy()
    order = np.lexsort((-dur, start, lane))  # parents before children at equal starts
    lane, start, dur = lane[order], start[order], dur[order]
    end = start + dur
    # depth = ops of this lane still open when this one starts (opened earlier, not yet ended)
    lane_first = np.searchsorted(lane, lane, side="left")
    opened_before = np.arange(n) - lane_first
    end_key = np.lexsort((end, lane))
    sorted_end_lane, sorted_end = lane[end_key], end[end_key]
    closed = np.empty(n, dtype=np.int64)
    for code in np.unique(lane):  # per lane: a few threads
        sel = sorted_end_lane == code
        ends_here = sorted_end[sel]
        mine = lane == code
        closed[mine] = np.searchsorted(ends_here, start[mine], side="right")
    depth = opened_before - closed
    parent = np.full(n, -1, dtype=np.int64)
    position = np.arange(n)
    for d in range(1, int(depth.max()) + 1 if n else 1):
        up = position[depth == d - 1]
        here = position[depth == d]
        if here.size == 0 or up.size == 0:
            continue
        k = np.searchsorted(up, here, side="right") - 1
        ok = k >= 0
        candidate = up[np.maximum(k, 0)]
        ok &= lane[candidate] == lane[here]
        parent[here[ok]] = candidate[ok]
    child = np.bincount(parent[parent >= 0], weights=dur[parent >= 0], minlength=n)
    own = np.maximum(dur - child.astype(np.int64), 0)
    out = np.empty(n, dtype=np.int64)
    out[order] = own
    return out


def _kernel_table(ev: pd.DataFrame, device_mode: bool, total_wall_us: float, vendor: dict) -> pd.DataFrame:
    if device_mode:
        kernels = ev[ev["kind"] == "kernel"]
    else:  # on the CPU an operator's work is its self time (a leaf's is all of it)
        ops = ev[(ev["kind"] == "host_op") & (ev["device"] < 0)]
        kernels = ops.assign(dur_ns=self_time_ns(ops))
        kernels = kernels[kernels["dur_ns"] > 0]
    if kernels.empty:
        return pd.DataFrame(columns=KERNEL_COLUMNS)
    frame = kernels.assign(dur_us=kernels["dur_ns"] / 1000.0, name=kernels["name"].astype(str),
                           type=kernels["type"].astype(str), core=kernels["core"].astype(str),
                           shapes=kernels["shapes"].astype(str))
    grouped = frame.groupby(["name", "type", "core"], observed=True, sort=False)
    table = grouped["dur_us"].agg(count="count", total_us="sum", mean_us="mean", min_us="min", max_us="max").reset_index()
    table["shapes"] = grouped["shapes"].agg(lambda s: s.mode().iat[0] if len(s) else "").to_numpy()
    table["share"] = table["total_us"] / total_wall_us if total_wall_us > 0 else np.nan
    table = table.sort_values("total_us", ascending=False, kind="stable").reset_index(drop=True)
    details = vendor.get("kernel_details")
    extra = [c for c in AIC_RATIO_COLUMNS if details is not None and c in details]
    if extra:
        ratios = details[["Name"] + extra].copy()
        for c in extra:
            ratios[c] = pd.to_numeric(ratios[c].replace({"N/A": None}), errors="coerce")
        ratios = ratios.groupby("Name")[extra].mean()
        table = table.join(ratios, on="name")
    return table[KERNEL_COLUMNS + extra]


def kernel_types(kernels: pd.DataFrame) -> pd.DataFrame:
    """Kernels aggregated by operator type: type, core, count, total_us, mean_us, min_us, max_us."""
    if kernels.empty:
        return pd.DataFrame(columns=["type", "core", "count", "total_us", "mean_us", "min_us", "max_us"])
    g = kernels.groupby(["type", "core"], sort=False)
    out = g.agg(count=("count", "sum"), total_us=("total_us", "sum"), min_us=("min_us", "min"), max_us=("max_us", "max"))
    out["mean_us"] = out["total_us"] / out["count"]
    out = out.reset_index().sort_values("total_us", ascending=False, kind="stable").reset_index(drop=True)
    return out[["type", "core", "count", "total_us", "mean_us", "min_us", "max_us"]]


def _host_op_table(ev: pd.DataFrame, total_wall_us: float) -> pd.DataFrame:
    ops = ev[(ev["kind"] == "host_op") & (ev["device"] < 0)]
    if ops.empty:
        return pd.DataFrame(columns=HOST_OP_COLUMNS)
    frame = pd.DataFrame({"name": ops["name"].astype(str), "dur_us": ops["dur_ns"] / 1000.0})
    table = frame.groupby("name", sort=False)["dur_us"].agg(count="count", total_us="sum", mean_us="mean",
                                                             max_us="max").reset_index()
    table["share"] = table["total_us"] / total_wall_us if total_wall_us > 0 else np.nan
    return table.sort_values("total_us", ascending=False, kind="stable").reset_index(drop=True)[HOST_OP_COLUMNS]


def _is_host_sync(ev: pd.DataFrame) -> pd.Series:
    """Host calls that block until the device catches up (runtime syncs, ``.item()``)."""
    on_host = ev["device"] < 0
    return on_host & ((ev["kind"] == "sync") | ((ev["kind"] == "host_op") & ev["name"].astype(str).isin(SYNC_HOST_OPS)))


_LIBRARY_FRAME = re.compile(r"^<built-in|site-packages|/lib/python|^(?:torch|IPython|ipykernel|traitlets|tornado|asyncio|"
                            r"typing|contextlib|threading|multiprocessing|importlib|npumagic|nn\.Module|runpy)\b|"
                            r"/npumagic/|<frozen")
MAX_SYNCS_LOCATED = 5000


def _user_source(ev: pd.DataFrame, syncs: pd.DataFrame) -> np.ndarray:
    """For each sync, the innermost enclosing user-code Python frame recorded on its thread
    (torch.profiler's with_stack python_function events); "" where none was recorded."""
    source = syncs["source"].astype(str).to_numpy().copy()
    frames = ev[ev["kind"] == "python"]
    if frames.empty:
        return source
    names = frames["name"].astype(str)
    frames = frames[~names.str.contains(_LIBRARY_FRAME)]
    for lane, group in frames.groupby("lane", observed=True):
        mine = np.flatnonzero((syncs["lane"] == lane).to_numpy() & (source == ""))[:MAX_SYNCS_LOCATED]
        start = group["ts_ns"].to_numpy()
        end = start + group["dur_ns"].to_numpy()
        label = group["name"].astype(str).to_numpy()
        for i in mine:
            t0 = syncs["ts_ns"].iat[i]
            inside = np.flatnonzero((start <= t0) & (end >= t0 + syncs["dur_ns"].iat[i]))
            if inside.size:
                source[i] = label[inside[np.argmax(start[inside])]]
    return source


def _sync_table(ev: pd.DataFrame, n_steps: int) -> pd.DataFrame:
    syncs = ev[_is_host_sync(ev)]
    if syncs.empty:
        return pd.DataFrame(columns=SYNC_COLUMNS)
    frame = pd.DataFrame({"name": syncs["name"].astype(str), "dur_us": syncs["dur_ns"] / 1000.0,
                          "source": _user_source(ev, syncs)})
    g = frame.groupby("name", sort=False)
    table = g["dur_us"].agg(count="count", total_us="sum").reset_index()
    table["per_step"] = table["count"] / n_steps
    table["source"] = g["source"].agg(lambda s: s[s != ""].mode().iat[0] if (s != "").any() else "").to_numpy()
    # by the host time they block: many cheap calls matter less than a few that wait long
    return table.sort_values("total_us", ascending=False, kind="stable").reset_index(drop=True)[SYNC_COLUMNS]


_NCCL_OP = re.compile(r"(AllReduce|AllGather|ReduceScatter|Broadcast|Reduce|AllToAll|SendRecv|Send|Recv)", re.I)
_HCCL_OP = re.compile(r"hcom_([A-Za-z]+)")


def collective_name(name: str) -> str:
    """``hcom_allReduce__586_0_1`` -> ``allReduce``; ``ncclDevKernel_AllReduce_Sum_f32`` -> ``AllReduce``."""
    m = _HCCL_OP.search(name) or _NCCL_OP.search(name)
    return m.group(1) if m else name


def _comm_table(comm: pd.DataFrame, ev: pd.DataFrame, links: pd.DataFrame | None = None) -> pd.DataFrame:
    if comm.empty:  # derive from collective kernels (CUDA/NCCL)
        kernels = ev[ev["kind"] == "comm"]
        if kernels.empty:
            return pd.DataFrame(columns=COMM_COLUMNS)
        comm = pd.DataFrame({"op": kernels["name"].astype(str), "elapsed_us": kernels["dur_ns"] / 1000.0})
        for c in ("wait_us", "sync_us", "transit_mb", "bandwidth_gbps"):
            comm[c] = np.nan
        comm["link"] = ""
    frame = comm.assign(op=comm["op"].astype(str).map(collective_name), link=comm["link"].astype(str))
    g = frame.groupby("op", sort=False)
    table = g.agg(count=("elapsed_us", "count"), elapsed_us=("elapsed_us", "sum"), wait_us=("wait_us", "sum"),
                  sync_us=("sync_us", "sum"), transit_mb=("transit_mb", "sum"),
                  link=("link", lambda s: s.mode().iat[0] if len(s) else "")).reset_index()
    table["wait_ratio"] = table["wait_us"] / table["elapsed_us"]
    table["sync_ratio"] = table["sync_us"] / table["elapsed_us"]
    # Bandwidth over each op's main link, from that link's own transit time (the op-level
    # "Transit Time" is a union on the main stream and understates it several-fold).
    table["bandwidth_gbps"] = np.nan
    if links is not None and len(links):
        own = links.assign(op=links["op"].astype(str).map(collective_name), link_type=links["link_type"].astype(str))
        own = own.groupby(["op", "link_type"], observed=True)[["transit_mb", "transit_ms"]].sum()
        key = pd.MultiIndex.from_arrays([table["op"], table["link"].astype(str)])
        mb, ms = own["transit_mb"].reindex(key).to_numpy(), own["transit_ms"].reindex(key).to_numpy()
        table["bandwidth_gbps"] = np.divide(mb, ms, out=np.full(len(table), np.nan), where=ms > 0)
    return table.sort_values("elapsed_us", ascending=False, kind="stable").reset_index(drop=True)[COMM_COLUMNS]


def _memory_table(memory: pd.DataFrame, meta: dict) -> pd.DataFrame:
    if memory.empty:
        return pd.DataFrame(columns=MEMORY_COLUMNS)
    g = memory.groupby(memory["device"].astype(str), sort=True)
    table = g.agg(peak_allocated_bytes=("allocated_bytes", "max"), peak_reserved_bytes=("reserved_bytes", "max")).reset_index()
    table["capacity_bytes"] = np.where(table["device"].str.startswith("cpu"), np.nan,
                                       meta.get("device_memory_bytes") or np.nan)
    return table[MEMORY_COLUMNS]


def _rank_table(per_rank: dict[int, Summary]) -> pd.DataFrame:
    rows = []
    averaged = ["computing_us", "communication_us", "comm_not_overlapped_us", "free_us", "dataloader_us"]
    for rank, s in per_rank.items():
        means = {c: float(s.steps[c].mean()) if len(s.steps) else np.nan for c in averaged}
        rows.append({"rank": rank, "steps": len(s.steps), "step_median_us": s.step_stats["median_us"], **means,
                     "device_util": s.device_util})
    table = pd.DataFrame(rows)
    table["slowest"] = table["step_median_us"] == table["step_median_us"].max()
    for kind in (*PARALLEL_KINDS, "stage"):
        table[kind] = [int(s.meta.get("parallel", {}).get(kind, -1)) for s in per_rank.values()]
    return table[RANK_COLUMNS]
