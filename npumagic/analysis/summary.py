"""Trace -> Summary: the headline numbers and one table per analysis of each rank, built by a
module each (:mod:`.breakdown` the per-step time and the device-time model, :mod:`.operators`
kernels and host operators, :mod:`.syncs`, :mod:`.collectives`, :mod:`.device_memory`,
:mod:`.ranks`, :mod:`.counters`, :mod:`.temporal`), combined here across ranks."""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from .. import presentation
from . import counters as hw
from . import job_path, path_bound
from . import schema
from .memory_release import release_free_memory
from .schema import Trace
from .blocking import BLOCKING_COLUMNS, blocking_table, blocking_units, device_busy, pageable_copy_launches
from .breakdown import IDLE_COLUMNS, cycle_bounds, disagreement, step_table, vendor_rule, vendor_step_table
from .collectives import LINK_COLUMNS, comm_table, communication_matrix
from .device_memory import memory_table
from .operators import host_op_table, kernel_table
from .ranks import AVERAGED, RANK_COLUMNS, parallel_indices, rank_table_of_steps
from .python_frames import python_self_time
from .syncs import is_host_sync, sync_table
from .temporal import TEMPORAL_COLUMNS, rank_temporal
from .where import kernel_modules, placed, places
from .modules import sequence_files

RULE_TABLES = ("hccl_tasks", "device_info")  # vendor tables the advice rules read


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
    blocking : the host calls that blocked until the device caught up, by the user's call
        (:data:`~npumagic.analysis.blocking.BLOCKING_COLUMNS`), with the device idle time each
        caused (NaN on the CPU backend, where nothing waits for a device).
    comm : collectives by operation, :data:`COMM_COLUMNS`.
    memory : peaks per device, :data:`MEMORY_COLUMNS`; ``memory_timeline`` the raw samples.
    ranks : one row per rank when the trace holds several, :data:`RANK_COLUMNS` (dp/pp/tp: the
        rank's index in its data/pipeline/tensor parallel group, stage = pp, where the profiler
        metadata names the groups; -1 elsewhere).
    links : every collective's transfers by link type, :data:`LINK_COLUMNS`, each with its own
        transit time (bandwidth = transit_mb / transit_ms, GB/s), for every rank.
    matrix : transfers by (source rank, destination rank), for every rank (see
        :func:`npumagic.analysis.collectives.communication_matrix`).
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
    kernel_metrics : the rank's device compute tasks with their operator attributes and AI Core
        PMU metrics (:data:`~npumagic.analysis.schema.KERNEL_METRIC_COLUMNS`), for the advice
        rules; empty where the profiler recorded none (CPU, CUDA).
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
    kernel_metrics: pd.DataFrame = field(default_factory=lambda: schema.empty(schema.KERNEL_METRIC_COLUMNS),
                                         repr=False, compare=False)
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
    blocking: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=BLOCKING_COLUMNS), repr=False,
                                   compare=False)
    # for the advice rules: the rank's events without Python stack frames (not stored in the history:
    # too large; a reloaded run's host-side rules stay silent) and the small vendor tables they read
    events: pd.DataFrame | None = field(default=None, repr=False, compare=False, metadata={"persist": False})
    vendor: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    # where in the model each event ran (:class:`~npumagic.analysis.where.Places`), for the advice's
    # places; None where no module or region was recorded (and in a reloaded run)
    places: Any = field(default=None, repr=False, compare=False, metadata={"persist": False})
    # rule id -> [place, share] of the findings a rule can make (:func:`~npumagic.analysis.where.placed`),
    # made from the places while the events are here and stored in the history, so a reloaded run
    # names the same places; {} where none was recorded and in runs stored before it was kept
    placed: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    # fix -> its critical-path bound on a device (:func:`~npumagic.analysis.path_bound.made`), made where the
    # events are and stored, so a reloaded run predicts as the fresh one did; {} on the CPU, in runs stored before
    path_bounds: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    # whether a module or user region was recorded (False: the checklist says how to record them;
    # None: unknown, a run stored before it was kept)
    places_recorded: bool | None = field(default=None, repr=False, compare=False)

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
        (see :func:`npumagic.analysis.collectives.communication_matrix`)."""
        return communication_matrix(self.matrix)

    @property
    def total_wall_us(self) -> float:
        return float(self.steps["wall_us"].sum())

    def share(self, column: str) -> float:
        """``column``'s share of the total step wall time (0..1); a column no step measured
        counts 0 here, so a rule's threshold is simply not reached (:meth:`measured_share` says NaN)."""
        total = self.total_wall_us
        return float(self.steps[column].sum()) / total if total > 0 else float("nan")

    def measured_share(self, column: str) -> float:
        """:meth:`share`, but NaN where no step measured ``column`` (the DataLoader and sync waits
        of a rank without host lanes): what the headline says, unknown rather than 0%."""
        return self.share(column) if self.steps[column].notna().any() else float("nan")

    @property
    def device_util(self) -> float:
        return self.share("busy_us")

    @property
    def median_step_util(self) -> float:
        """The busy share of the median step (the step whose wall time is nearest the median, the
        first of equals): the checklist's Baseline and ``%npucompare`` show it beside the median
        step time, so the share and the time describe the same step; a time-weighted share
        (:attr:`device_util`, the run list's) lets one long step speak for the others."""
        if not len(self.steps) or "device_util" not in self.steps:
            return self.device_util
        wall = self.steps["wall_us"].to_numpy(dtype=float)
        return float(self.steps["device_util"].iloc[int(np.argmin(np.abs(wall - np.median(wall))))])

    @property
    def busy_label(self) -> str:
        """What the busy share measures: the device's, or on the CPU backend the CPU's time in
        torch operators (the CPU is not called a device)."""
        return "device busy" if self.meta.get("device_mode") else "busy in torch operators"

    @property
    def headline(self) -> dict[str, float]:
        s = self.step_stats
        return {"steps": s["n"], "step_median_us": s["median_us"], "step_p90_us": s["p90_us"], "step_cv": s["cv"],
                "device_util": self.device_util, "computing_share": self.share("computing_us"),
                "communication_share": self.share("comm_not_overlapped_us"),
                "free_share": self.share("free_us"), "dataloader_share": self.measured_share("dataloader_us"),
                "sync_share": self.measured_share("sync_us"),
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

    def to_dict(self, top: int | None = None) -> dict[str, Any]:
        """The JSON document of the summary (``schema`` versioned; ``top``: kernels listed)."""
        from ..jsonout import summary_doc

        return summary_doc(self, top)

    # -- display (npumagic.presentation: built by npumagic.render.text) ------------------------
    def __str__(self) -> str:
        return presentation.text(self)

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(str(self) if not cycle else "Summary(...)")

    def _repr_html_(self) -> str | None:
        return presentation.html(self)


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
    return combine({r: summarize_rank(trace, r) for r in ranks}, rank)


def combine(per_rank: dict[int, Summary], rank: int | None = None, job_bounds: dict | None = None) -> Summary:
    """The Summary of a job from its ranks' own Summaries: ``rank``'s tables (default: the lowest
    rank), the rank comparison in ``.ranks`` and every rank's links and matrix. Only per-rank
    summaries are needed, so ranks can be summarised apart (on Dask workers: :mod:`npumagic.parallel`),
    and every cluster view must be computed here, from them alone. The fixes' bounds are the job's,
    its ranks replayed together (:mod:`.job_path`) where their events are here, else ``job_bounds``
    (made so before), else the rank's own."""
    ranks = sorted(per_rank)
    if rank is not None and rank not in per_rank:
        raise ValueError(f"rank {rank} not in trace; ranks: {ranks}")
    per_rank = {r: per_rank[r] for r in ranks}
    steps = pd.concat([s.steps[["wall_us", "busy_us", *AVERAGED]].assign(rank=r) for r, s in per_rank.items()],
                      ignore_index=True)
    table = rank_table_of_steps(steps, ranks, {r: s.meta.get("parallel", {}) for r, s in per_rank.items()})
    chosen = per_rank[rank if rank is not None else ranks[0]]
    links = pd.concat([per_rank[r].links for r in ranks], ignore_index=True)
    matrix = pd.concat([per_rank[r].matrix for r in ranks], ignore_index=True)
    temporal = pd.concat([per_rank[r].temporal for r in ranks], ignore_index=True).reindex(columns=TEMPORAL_COLUMNS)
    bounds = (_job_bounds(per_rank, chosen) if len(per_rank) > 1 else {}) or job_bounds or chosen.path_bounds
    return dataclasses.replace(chosen, ranks=table, per_rank=per_rank, links=links, matrix=matrix, temporal=temporal,
                               path_bounds=bounds)


def _job_bounds(per_rank: dict[int, Summary], chosen: Summary) -> dict:
    """:func:`.job_path.bounds`, or {} with a warning where the ranks cannot be walked together: the
    job is analysed all the same, each fix bounded by its rank's own replay."""
    try:
        return job_path.bounds(per_rank, chosen)
    except Exception as exc:  # noqa: BLE001 - a refinement of the predictions never costs the analysis
        warnings.warn(f"the job's ranks were not replayed together ({type(exc).__name__}: {exc}); each fix is "
                      "bounded by its rank's own replay", stacklevel=3)
        return {}


HOST_MEASURED = ("dataloader_us", "sync_us", *IDLE_COLUMNS)  # figures only the host's lanes give


def _step_breakdown(trace: Trace, rank: int, ev: pd.DataFrame, steps: pd.DataFrame,
                    bounds, blocking: np.ndarray) -> tuple[pd.DataFrame, bool, dict, str]:
    """One rank's step table (from its events, or torch_npu's step_trace_time where only that is
    there or the events disagree with it), whether it is a device's, the rank's sources and the
    note that says where the two disagreed ("" where they did not); ``blocking``: the rows of
    ``ev`` that block (:func:`~.blocking.blocking_mask`)."""
    backend = trace.meta.backend or "cpu"
    device_mode = bool((ev["device"].to_numpy() >= 0).any())
    sources = trace.meta.sources.get(rank, {})
    vendor = trace.meta.vendor.get(rank, {})
    disagree_note = ""
    if str(sources.get("breakdown", "")).endswith("(vendor)"):  # only step_trace_time.csv was there
        breakdown = vendor_step_table(vendor.get("step_trace_time"), steps)
        device_mode = True
    else:
        # a Kineto step cut by ProfilerStep# holds the host's work after its last kernel
        host_tail = backend != "npu" and rank not in trace.meta.steps_from
        breakdown = step_table(ev, steps, device_mode, bounds, host_tail, blocking)
        differ = disagreement(breakdown, vendor.get("step_trace_time")) if backend == "npu" else ""
        as_vendor = vendor_rule(ev) if differ else ev
        if as_vendor is not ev and not disagreement(step_table(as_vendor, steps, device_mode, bounds, host_tail),
                                                    vendor["step_trace_time"]):
            # the file counts HCCL's own kernels (AIV, LCCL) as computing: the same tasks, another rule
            differ = ""
            moved = int(((ev["kind"] == "comm") & (as_vendor["kind"] == "kernel")).sum())
            disagree_note = (f"rank {rank}: {moved} HCCL kernels on the compute lanes (AIV, LCCL, MoE dispatch/"
                             "combine) count as communication; torch_npu's step_trace_time counts them as computing")
        if differ:  # a partial or mixed export: torch_npu computed its file from the whole capture
            db = ".db" in str(sources.get("breakdown", ""))
            file = "analysis.db's StepTraceTime" if db else "step_trace_time.csv"
            listed = pd.to_numeric(vendor["step_trace_time"]["Step"], errors="coerce")
            whole = listed.notna().all() and set(listed.astype(np.int64)) == set(breakdown["step"])
            if whole:  # else it lacks steps the tasks have, or has others: the tasks' figures stay
                computed = breakdown.set_index("step")
                breakdown = vendor_step_table(vendor.get("step_trace_time"), steps)
                for column in ("dataloader_us", "sync_us", "memcpy_us"):  # what the vendor's file has not
                    breakdown[column] = computed[column].reindex(breakdown["step"]).to_numpy()
                sources = {**sources, "breakdown": f"{file} (vendor; the tasks disagree with it)"}
            used = f"{file}'s figures are used" if whole else "the tasks' figures are used"
            disagree_note = (f"rank {rank}: {file} and the figures computed from its tasks disagree by more than 1% "
                             f"of the step ({differ.replace('step_trace_time.csv', file)}); {used}")
            warnings.warn(disagree_note, stacklevel=4)
    if len(breakdown) and not (ev["device"].to_numpy() < 0).any():
        # no host lanes (a torch_npu export without trace_view.json): what the host waited for is
        # not measured, so it is unknown (NaN), not 0 ms
        breakdown = breakdown.assign(**{c: np.nan for c in HOST_MEASURED})
    return breakdown, device_mode, sources, disagree_note


def _rank_meta(trace: Trace, rank: int, ev: pd.DataFrame, steps: pd.DataFrame, device_mode: bool, sources: dict,
               disagree_note: str) -> dict:
    """One rank's Summary meta: the trace's, less the job's tables, with what this rank's events say."""
    backend = trace.meta.backend or "cpu"
    kind = ev["kind"]
    in_step = ev["step"].to_numpy() >= 0
    meta = {k: v for k, v in trace.meta.as_dict().items() if k != "vendor"}
    loaders = schema.where(ev[["name"]], in_step & (kind == "dataloader").to_numpy())["name"].astype(str)
    meta.update(rank=rank, device_mode=device_mode, backend=backend,
                dataloader_iter=loaders.mode().iat[0] if len(loaders) else "",
                sources=sources,
                note="; ".join(n for n in (trace.meta.notes.get(rank, ""), disagree_note) if n),
                parallel=parallel_indices(trace.meta.parallel_groups.get(rank, {}), rank),
                python_stacks=bool((kind == "python").any()),  # with_stack frames recorded (not kept in .events)
                # the steps' host windows on the trace's own clock, that of memory_timeline.ts_ns and the
                # events: .steps' start_us counts from the first step (on a device, from its device window)
                step_windows_ns=[[int(n), int(a), int(b)]
                                 for n, a, b in steps[["step", "start_ns", "end_ns"]].itertuples(index=False)])
    if meta["python_stacks"]:
        frames = schema.where(ev[["name", "kind", "device", "lane", "ts_ns", "dur_ns"]],
                              schema.kind_in(kind, ("python", "host_op")))
        meta["python_frames"] = python_self_time(frames, steps)
    for key in ("notes", "parallel_groups"):
        meta.pop(key, None)
    return meta


def summarize_rank(trace: Trace, rank: int) -> Summary:
    """The Summary of one rank of ``trace`` alone (its ``.ranks`` is empty; see :func:`combine`)."""
    mine = trace.for_rank(rank)
    ev = mine.events
    steps = mine.steps.sort_values("start_ns")
    backend = trace.meta.backend or "cpu"
    bounds = cycle_bounds(steps, trace.meta.cycle_starts, rank)
    vendor = trace.meta.vendor.get(rank, {})
    # the host calls that block, found once for the step table, the syncs and the blocking units
    host_sync = is_host_sync(ev).to_numpy()
    blocks = host_sync | pageable_copy_launches(ev)
    breakdown, device_mode, sources, disagree_note = _step_breakdown(trace, rank, ev, steps, bounds, blocks)
    total_wall = float(breakdown["wall_us"].sum())
    release_free_memory()  # the step table's temporaries (glibc keeps them: 240 MiB at 10M events)
    # what reads every event first, so that its temporaries and the copy below are never live at once
    # HTA drops the last step only where ProfilerStep marks cut them, not where npumagic inferred them
    temporal = rank_temporal(ev, steps, rank, rank in trace.meta.steps_from, bounds)
    events = _own_categories(schema.where(ev, (ev["kind"] != "python").to_numpy()), schema.EVENT_COLUMNS)
    # each table below copies only the in-step events of the kind it reads (and, where it reads
    # few, only those columns): on a large trace one copy of every in-step event was the peak
    in_step = ev["step"].to_numpy() >= 0
    kind = ev["kind"]

    def in_steps(mask: np.ndarray, columns: list[str] | None = None) -> pd.DataFrame:
        return schema.where(ev if columns is None else ev[columns], in_step & mask)

    kernel_metrics = _own_categories(mine.kernel_metrics, schema.KERNEL_METRIC_COLUMNS)
    syncs = sync_table(in_steps(host_sync | (kind == "python").to_numpy()), max(len(steps), 1))
    units = blocking_units(ev, device_busy(ev) if device_mode else None, "npu" if backend == "npu" else "cuda", blocks)
    blocking = blocking_table(units, dict(zip(syncs["name"], syncs["source"])), len(steps))
    release_free_memory()  # the blocking units' temporaries
    kernel_rows = in_steps((kind == "kernel").to_numpy())
    device_kernels = schema.where(kernel_rows, (kernel_rows["device"] >= 0).to_numpy())
    where = places(ev, sequence_files(trace.meta, rank))
    kernels = kernel_table(kernel_rows if device_mode else in_steps((kind == "host_op").to_numpy()), device_mode,
                           total_wall, kernel_metrics, kernel_modules(where) if where and where.has_modules else None)
    meta = _rank_meta(trace, rank, ev, steps, device_mode, sources, disagree_note)
    links = mine.links
    counters = mine.counters
    summary = Summary(
        steps=breakdown,
        kernels=kernels,
        host_ops=host_op_table(ev, total_wall, in_step),
        syncs=syncs,
        blocking=blocking,
        comm=comm_table(mine.comm, in_steps((kind == "comm").to_numpy()), links),
        memory=memory_table(mine.memory, trace.meta.device_memory_bytes),
        # categories of this rank only: a rank's summary must not depend on the other ranks
        memory_timeline=_own_categories(mine.memory, schema.MEMORY_COLUMNS),
        ranks=pd.DataFrame(columns=RANK_COLUMNS),
        meta=meta,
        kernel_metrics=kernel_metrics,
        links=links[LINK_COLUMNS].reset_index(drop=True),
        matrix=mine.matrix.reset_index(drop=True),
        # no reader records the device's peak HBM bandwidth or nominal AI Core frequency (no such
        # TraceMeta field): hbm_util is NaN, and drops count from the highest frequency sampled
        hardware=hw.hardware_table(counters[counters["device"] >= 0], steps),
        l2=hw.l2_table(counters, device_kernels),
        frequency_drops=hw.frequency_drops(counters, device_kernels),
        host=hw.host_table(counters, steps),
        temporal=temporal,
        events=events,
        vendor={k: vendor[k] for k in RULE_TABLES if k in vendor},
        places=where,
        places_recorded=where is not None,
    )
    # what the tables were made from (the kernels' rows: tens of MiB at 10M events), and their
    # temporaries, gone before the passes over every event below
    del kernel_rows, device_kernels, in_step, host_sync, blocks, units
    release_free_memory()
    summary = dataclasses.replace(summary, path_bounds=path_bound.made(summary))
    release_free_memory()  # the replays' temporaries, before the places' pass over every event
    return dataclasses.replace(summary, placed=placed(summary)) if where is not None else summary


RANK_META = ("rank", "device_mode", "backend", "dataloader_iter", "sources", "note", "parallel", "python_stacks",
             "python_frames", "step_windows_ns")
JOB_ONLY_META = ("vendor", "notes", "parallel_groups")
RANK_TABLES = ("memory_timeline", "links", "matrix", "temporal", "events", "kernel_metrics")  # with a rank column


def _own_categories(frame: pd.DataFrame, schema_columns: dict[str, Any]) -> pd.DataFrame:
    """One rank's rows of a table, numbered from 0, whose data categoricals (names, lanes,
    devices, ...; not a fixed set such as ``kind``) hold this rank's values only: a rank's
    summary must not depend on the other ranks read with it."""
    frame = frame.reset_index(drop=True)
    # categories marked by the codes, not found by sorting them: on a one-rank trace every category is
    # used and the column is left as it is
    # (a fixed set's dtype equals "category" too: the spec's own text tells them apart)
    used = {c: _categories_used(frame[c].array) for c, spec in schema_columns.items()
            if spec == "category" and isinstance(spec, str) and c in frame
            and isinstance(frame[c].dtype, pd.CategoricalDtype)}
    cats = {c: u for c, u in used.items() if not u.all()}
    return frame.assign(**{c: _used_categories(frame[c].array, u) for c, u in cats.items()}) if cats else frame


def _categories_used(values: pd.Categorical) -> np.ndarray:
    """Which categories of ``values`` some row holds: marked by the codes, each row's slot set (a
    count of every code took three times as long at 10M events)."""
    used = np.zeros(len(values.categories) + 1, dtype=bool)
    used[values.codes] = True  # code -1 (missing) marks the extra last slot
    return used[:-1]


def _used_categories(values: pd.Categorical, used: np.ndarray | None = None) -> pd.Categorical:
    """``values`` without the categories no row uses (``used``: which are, when already
    counted), in their order: pandas' ``remove_unused_categories`` by one lookup instead of
    sorting the codes."""
    used = _categories_used(values) if used is None else used
    remap = np.append(np.cumsum(used) - 1, -1).astype(np.int32)  # code -1 (missing) takes the last: -1
    codes = remap[values.codes]
    return pd.Categorical.from_codes(codes, dtype=pd.CategoricalDtype(values.categories[used], values.ordered))


def rebase(summary: Summary, job_meta: dict[str, Any], rank: int | None = None) -> Summary:
    """``summary`` (of one rank, read on its own) as part of the job that ``job_meta`` describes:
    the job's meta (path, files, world size, device) with the rank's own entries, and what
    depends on the job's meta (memory capacity); with ``rank``, renumbered."""
    meta = {k: v for k, v in job_meta.items() if k not in JOB_ONLY_META}
    meta.update({k: summary.meta[k] for k in RANK_META if k in summary.meta})
    meta["backend"] = job_meta.get("backend", meta.get("backend", "cpu"))
    tables = {k: getattr(summary, k) for k in RANK_TABLES}
    if rank is not None:  # as the reader renumbers unlabelled ranks (its vendor tables stay as read)
        meta["rank"] = rank
        meta["parallel"] = parallel_indices(job_meta.get("parallel_groups", {}).get(rank, {}), rank)
        tables = {k: t.assign(rank=np.int64(rank)) if t is not None and "rank" in t and len(t) else t
                  for k, t in tables.items()}
    return replace(summary, memory=memory_table(tables["memory_timeline"], job_meta.get("device_memory_bytes")),
                   meta=meta, **tables)

