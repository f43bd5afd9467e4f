"""The normalized data model every reader produces and every analysis consumes.

One events table (columnar, integer nanoseconds, categoricals for repeated strings), one
steps table, one memory table, one communication table, one counters table (sampled
hardware and host metrics) and one kernel metrics table (each device compute task's operator
attributes and AI Core PMU metrics), plus ``meta``. The schema is declared once here and
checked by :func:`finish` when a reader is done.
"""

from __future__ import annotations

import functools
import types
import typing
from collections.abc import Mapping
from dataclasses import MISSING, Field, dataclass, field, fields, replace
from typing import Any, Callable

import numpy as np
import pandas as pd

from .inferred_steps import WHOLE_TRACE, infer_steps
from .memory_release import release_free_memory

KINDS = ("host_op", "kernel", "comm", "memcpy", "sync", "runtime", "annotation", "dataloader", "python")
DEVICE_WORK = ("kernel", "comm", "memcpy")  # the kinds of work a device runs (its compute, collectives, copies)

EVENT_COLUMNS: dict[str, Any] = {
    "name": "category",
    "kind": pd.CategoricalDtype(KINDS),
    "ts_ns": "int64",
    "dur_ns": "int64",
    "lane": "category",  # e.g. "Python/Thread 1", "Ascend Hardware/Stream 2", "GPU 0/Stream 7"
    "stream": "int64",  # device stream, -1 on the host
    "device": "int64",  # device index, -1 on the host
    "rank": "int64",
    "step": "int64",  # ProfilerStep id the event falls in, -1 outside every step
    "correlation": "int64",  # launch <-> kernel link, -1 when absent
    "type": "category",  # operator type: kernel_details Type on NPU, the demangled kernel name on CUDA
    "shapes": "category",  # input shapes where recorded
    "core": "category",  # accelerator core type (AI_CORE, AI_VECTOR_CORE, ...), "" elsewhere
    "source": "category",  # user source location where stacks were recorded
}
STEP_COLUMNS = {"rank": "int64", "step": "int64", "start_ns": "int64", "end_ns": "int64"}
MEMORY_COLUMNS = {"rank": "int64", "device": "category", "ts_ns": "int64", "allocated_bytes": "float64", "reserved_bytes": "float64"}
COMM_COLUMNS = {
    "rank": "int64",
    "step": "int64",
    "op": "category",
    "group": "category",
    "ts_ns": "int64",
    "elapsed_us": "float64",
    "wait_us": "float64",
    "sync_us": "float64",
    "transit_us": "float64",
    "transit_mb": "float64",
    "bandwidth_gbps": "float64",
    "link": "category",
}
# One row per (collective, link type): each link's own transit size and time, so its bandwidth
# is transit_mb / transit_ms (GB/s, decimal units as torch_npu reports it). link_type: HCCS,
# PCIE, SIO (physical links of the SDMA transport), SDMA (their aggregate), RDMA (inter-node).
LINK_COLUMNS = {
    "rank": "int64",
    "step": "int64",
    "op": "category",
    "group": "category",  # the communication group (HCCL comm name)
    "link_type": "category",
    "transit_mb": "float64",
    "transit_ms": "float64",
    "bandwidth_gbps": "float64",
}
# One row per (collective, source rank, destination rank): the communication matrix.
MATRIX_COLUMNS = {
    "rank": "int64",  # the rank whose profile recorded the transfer
    "step": "int64",
    "op": "category",
    "group": "category",
    "src_rank": "int64",
    "dst_rank": "int64",
    "link_type": "category",  # HCCS, PCIE, SIO, RDMA, LOCAL (on-chip copy)
    "transit_mb": "float64",
    "transit_ms": "float64",
    "bandwidth_gbps": "float64",
}
# Sampled metrics in canonical units, whatever the source: "B/s" (bandwidth), "B" (memory),
# "MHz" (frequency), "ratio" (0..1: hit rates), "%" (CPU percent of one core), or ""
# (dimensionless). Names follow torch_npu's trace_view.json ("HBM 0/Read", "LLC 1 Read/Hit Rate",
# "AI Core Freq", "APP/HBM", ...); ``group`` is the lane they belong to ("HBM", "LLC",
# "AI Core Freq", "NPU MEM", "Acc PMU", "QoS", "Stars Soc Info", "L2 Cache", "Host", ...).
COUNTER_COLUMNS = {
    "rank": "int64",
    "device": "int64",  # device index, -1 for host metrics
    "group": "category",
    "name": "category",
    "unit": "category",
    "ts_ns": "int64",
    "value": "float64",
}

# torch_npu's AI Core pipe utilisation ratios (0..1, --aic-metrics PipeUtilization), named as it names them
AI_CORE_RATIOS = ("aic_mac_ratio", "aic_scalar_ratio", "aic_mte1_ratio", "aic_mte2_ratio", "aic_fixpipe_ratio",
                  "aiv_vec_ratio", "aiv_scalar_ratio", "aiv_mte2_ratio", "aiv_mte3_ratio")
# One row per device compute task (kernel_details.csv row, or COMPUTE_TASK_INFO row of the db
# export; collectives excluded) with its operator attributes and AI Core PMU metrics. Text is ""
# and numbers NaN where the profiler did not record them (level 0, "N/A").
KERNEL_METRIC_COLUMNS: dict[str, Any] = {
    "rank": "int64",
    "ts_ns": "int64",
    "dur_ns": "int64",
    "name": "category",
    "type": "category",  # operator type as the profiler wrote it ("" at level 0)
    "core": "category",  # accelerator core type (AI_CORE, AI_VECTOR_CORE, AI_CPU, MIX_AIC, ...)
    "stream": "int64",  # device stream, -1 when absent
    "task_id": "int64",  # device task id, -1 when absent (level 0)
    "block_dim": "float64",  # cores (blocks) the task was split over
    "mix_block_dim": "float64",  # blocks of the other core type of a mixed (MIX_AIC/MIX_AIV) task
    "op_state": "category",  # "dynamic" or "static" shape
    "input_shapes": "category",  # "32,3,224,224;64" (one shape per input, ';'-separated)
    "output_shapes": "category",
    "input_dtypes": "category",  # "FLOAT;INT64"
    "output_dtypes": "category",
    "input_formats": "category",  # "NCHW;FRACTAL_Z"
    "output_formats": "category",
    **{name: "float64" for name in AI_CORE_RATIOS},
    # PMU pipe times (us) of the MTE (memory transfer) pipes, and the task's whole AI Core time
    "aicore_time_us": "float64",
    "aic_mte2_time_us": "float64",
    "aic_fixpipe_time_us": "float64",
    "aiv_mte2_time_us": "float64",
    "aiv_mte3_time_us": "float64",
}


# The metadata readers fill, one typed field each (finish refuses a key that is no field, or a value
# of another type). A reader's leftovers that no field names go into ``vendor``, by rank: that is
# the extras mapping (torch_npu's own tables, read when first looked up); no other reader has any.
@dataclass(frozen=True)
class TraceMeta:
    """A Trace's metadata as its reader filled it, checked by :func:`finish` and frozen after
    (a changed one is ``dataclasses.replace(trace.meta, field=...)``).

    ``filled`` names the fields the reader gave, in its order, and those set since to other than
    their default: :meth:`as_dict` writes those, so that a Summary's meta (and the JSON and history
    built from it) holds what the reader recorded and no field it left out."""

    backend: str = ""  # "cpu", "cuda", "rocm", "mtia" or "npu"
    format: str = ""  # the name of the reader that read it ("kineto", "ascend", ...)
    path: str = ""  # what was read: the file, or the folder of several
    files: list[str] = field(default_factory=list)  # each file or rank directory read
    device_name: str = ""
    device_memory_bytes: int | None = None  # the device's memory where the trace records it
    compute_major: int | None = None  # a CUDA device's compute capability, major
    world_size: int = 1
    settings: dict[str, Any] = field(default_factory=dict)  # the profiler's settings as it recorded them
    environment: dict[str, Any] = field(default_factory=dict)  # the environment the profiler recorded (torch_npu)
    bad_rows: dict[str, Any] = field(default_factory=dict)  # rows left out, by file, with why
    base_time_ns: int = 0  # the epoch time the trace's clock counts from
    # per rank, where each later profiling cycle starts (repeating schedules): [rank, step] pairs
    cycle_starts: list[list[int]] = field(default_factory=list)
    # by rank, for ranks without ProfilerStep marks: what cut their steps ("Optimizer.step#SGD.step",
    # "annotation NAME" or "whole trace"; set by finish, see inferred_steps)
    steps_from: dict[int, str] = field(default_factory=dict)
    # ranks without ProfilerStep marks or iterations: one step each (set by finish)
    steps_inferred: list[int] = field(default_factory=list)
    vendor: dict[int, Mapping[str, Any]] = field(default_factory=dict)  # by rank: the vendor's own tables
    sources: dict[int, dict[str, str]] = field(default_factory=dict)  # by rank: which file each table came from
    notes: dict[int, str] = field(default_factory=dict)  # by rank: what the reader noted about it
    parallel_groups: dict[int, dict[str, Any]] = field(default_factory=dict)  # by rank: its communication groups
    unreadable: dict[str, str] = field(default_factory=dict)  # rank directories left out, with why
    filled: tuple[str, ...] = field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        _refuse_unknown(self.filled)
        wrong = [f"{name} is {type(getattr(self, name)).__name__}, not {' or '.join(t.__name__ for t in allowed)}"
                 for name, allowed in ((n, _META_TYPES[n]) for n in dict.fromkeys((*self.filled, *_META_TYPES)))
                 if not isinstance(getattr(self, name), allowed)]
        if wrong:
            raise ValueError(f"trace meta of the wrong type: {'; '.join(wrong)}")
        changed = [f.name for f in fields(self) if f.name not in self.filled and f.name != "filled"
                   and getattr(self, f.name) != _default(f)]
        if changed:
            object.__setattr__(self, "filled", (*self.filled, *changed))

    @classmethod
    def of(cls, meta: Mapping[str, Any] | TraceMeta | None) -> TraceMeta:
        """``meta`` as a TraceMeta: a reader's dict checked (ValueError naming each key that is
        no field, or each value of another type), a TraceMeta as it is."""
        if isinstance(meta, TraceMeta):
            return meta
        meta = dict(meta or {})
        _refuse_unknown(meta)
        return cls(**meta, filled=tuple(meta))

    def as_dict(self) -> dict[str, Any]:
        """The fields the reader filled, in its order, as a plain dict (what a Summary's meta,
        the JSON outputs and the history hold; the values are shared, not copied)."""
        return {name: getattr(self, name) for name in self.filled}


def _allowed(hint: Any) -> tuple[type, ...]:
    """The classes a field's annotation admits, for isinstance (``int | None``: int, NoneType)."""
    options = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    return tuple(typing.get_origin(o) or o for o in options)


def _refuse_unknown(names) -> None:
    unknown = sorted(str(k) for k in names if k not in _META_TYPES)
    if unknown:
        raise ValueError(f"trace meta keys not fields of schema.TraceMeta: {', '.join(unknown)} "
                         "(a reader's own leftovers go into 'vendor')")


def _default(f: Field) -> Any:
    return f.default_factory() if f.default is MISSING else f.default


# each field's classes, from its annotation: what finish checks a reader's meta against
_META_TYPES: dict[str, tuple[type, ...]] = {name: _allowed(hint) for name, hint in
                                            typing.get_type_hints(TraceMeta).items() if name != "filled"}


@dataclass(frozen=True)
class Trace:
    """A profiler output, normalized.

    Attributes
    ----------
    events : DataFrame with :data:`EVENT_COLUMNS` (times in integer nanoseconds).
    steps : DataFrame with :data:`STEP_COLUMNS`, one row per (rank, step).
    memory : DataFrame with :data:`MEMORY_COLUMNS`.
    comm : DataFrame with :data:`COMM_COLUMNS`, one row per collective call where recorded.
    meta : :class:`TraceMeta` (backend, device name, profiler settings, source path, vendor
        tables), frozen: a changed one is ``dataclasses.replace(trace.meta, field=...)``.
    links : DataFrame with :data:`LINK_COLUMNS`, one row per collective and link type.
    matrix : DataFrame with :data:`MATRIX_COLUMNS`, one row per collective and rank pair.
    counters : DataFrame with :data:`COUNTER_COLUMNS`: sampled hardware counters (HBM, LLC,
        AI Core frequency, ...) and host metrics, one row per sample and metric.
    kernel_metrics : DataFrame with :data:`KERNEL_METRIC_COLUMNS`, one row per device compute
        task with its operator attributes (shapes, data types, block dim) and AI Core PMU
        metrics, where the profiler recorded them (torch_npu); empty elsewhere.
    """

    events: pd.DataFrame
    steps: pd.DataFrame
    memory: pd.DataFrame = field(default_factory=lambda: empty(MEMORY_COLUMNS))
    comm: pd.DataFrame = field(default_factory=lambda: empty(COMM_COLUMNS))
    meta: TraceMeta = field(default_factory=TraceMeta)
    links: pd.DataFrame = field(default_factory=lambda: empty(LINK_COLUMNS))
    matrix: pd.DataFrame = field(default_factory=lambda: empty(MATRIX_COLUMNS))
    counters: pd.DataFrame = field(default_factory=lambda: empty(COUNTER_COLUMNS))
    kernel_metrics: pd.DataFrame = field(default_factory=lambda: empty(KERNEL_METRIC_COLUMNS))

    @property
    def ranks(self) -> list[int]:
        return sorted(int(r) for r in set(self.steps["rank"]) | _distinct(self.events["rank"].to_numpy()))

    def for_rank(self, rank: int) -> "Trace":
        """The same trace with every table cut to ``rank``'s rows (indexes kept; meta shared)."""
        tables = {name: getattr(self, name) for name in ("events", "steps", "memory", "comm", "links", "matrix",
                                                          "counters", "kernel_metrics")}
        return replace(self, **{name: where(t, t["rank"].to_numpy() == rank) for name, t in tables.items()})

    def first_steps(self, count: int) -> "Trace":
        """The same trace with only each rank's first ``count`` steps; the events of the others
        are outside every step (the step a failing cell was inside when the profiler stopped)."""
        steps = self.steps.groupby("rank", sort=False).head(count).reset_index(drop=True)
        if len(steps) == len(self.steps):
            return self
        kept = pd.MultiIndex.from_frame(steps[["rank", "step"]])
        inside = pd.MultiIndex.from_arrays([self.events["rank"], self.events["step"]]).isin(kept)
        return replace(self, steps=steps, events=self.events.assign(step=np.where(inside, self.events["step"], -1)))

    def __post_init__(self) -> None:
        if not isinstance(self.meta, TraceMeta):  # a reader's dict: checked
            object.__setattr__(self, "meta", TraceMeta.of(self.meta))

    def __repr__(self) -> str:
        return (
            f"<Trace {self.meta.backend or '?'} ranks={self.ranks} events={len(self.events)} "
            f"steps={len(self.steps)} from {self.meta.path or '?'}>"
        )


def where(frame: pd.DataFrame, mask: np.ndarray) -> pd.DataFrame:
    """``frame[mask]``, or ``frame`` itself where the mask keeps every row (no copy of a large
    table that one rank or one filter leaves whole)."""
    return frame if mask.all() else frame[mask]


def kind_in(kind: pd.Series, kinds) -> np.ndarray:
    """``kind.isin(kinds)`` as a bool array: for the categorical kind column, one comparison of its
    codes per kind (at 10M events pandas' isin took 77 ms a call, this 8)."""
    if not isinstance(kind.dtype, pd.CategoricalDtype):
        return kind.isin(list(kinds)).to_numpy(bool)
    codes = kind.array.codes
    found = np.zeros(codes.shape, dtype=bool)
    for code in np.flatnonzero(kind.cat.categories.isin(list(kinds))):
        found |= codes == code
    return found


def device_work_rows(ev: pd.DataFrame) -> np.ndarray:
    """The device's own work among ``ev``: kernels, collectives and copies on a device."""
    return kind_in(ev["kind"], DEVICE_WORK) & (ev["device"].to_numpy() >= 0)


def text_mask(values: pd.Series, test: Callable[[pd.Series], pd.Series]) -> np.ndarray:
    """``test(values.astype(str))`` as a bool array, judged once per category of a categorical
    column (a 10M-event trace has a few thousand names: no string per row)."""
    if isinstance(values.dtype, pd.CategoricalDtype):
        per_category = np.append(test(pd.Series(values.cat.categories.astype(str))).to_numpy(bool), False)
        return per_category[values.cat.codes.to_numpy()]  # code -1 (missing) reads the appended False
    return test(values.astype(str)).to_numpy(bool)


def text_values(values: pd.Series) -> np.ndarray:
    """``values.astype(str).to_numpy()``, as an object array; for a categorical column each row
    refers to its category's one string (pandas' ``astype(str)`` builds a string per row: at 10M
    events, seconds)."""
    if isinstance(values.dtype, pd.CategoricalDtype):
        names = np.append(values.cat.categories.astype(str).to_numpy(object), "nan")
        return names[values.cat.codes.to_numpy()]  # code -1 (missing) reads "nan", as astype(str) does
    return values.astype(str).to_numpy(object)


def same_keys(a: pd.Series, b: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Integer keys of the values of ``a`` and ``b`` such that equal values get equal keys: the
    codes where both are the same categorical (two slices of one events table), else the
    factorized text."""
    if isinstance(a.dtype, pd.CategoricalDtype) and a.dtype == b.dtype:
        return a.cat.codes.to_numpy(np.int64), b.cat.codes.to_numpy(np.int64)
    codes, _ = pd.factorize(np.concatenate([text_values(a), text_values(b)]))
    return codes[:len(a)], codes[len(a):]


def empty(columns: dict[str, Any]) -> pd.DataFrame:
    """An empty frame with ``columns`` and their dtypes (a copy: building one costs 50x more)."""
    return _empty(tuple(columns.items())).copy()


_NUMPY_DTYPES = frozenset({"int64", "int32", "int8", "float64", "float32", "bool"})


@functools.lru_cache(maxsize=64)
def _empty(columns: tuple[tuple[str, Any], ...]) -> pd.DataFrame:
    # a numeric column from an empty array: a Series built for each column cost twice as much, and
    # a Kineto trace's analysis builds six of these tables before its first summary
    return pd.DataFrame({name: np.empty(0, dtype) if isinstance(dtype, str) and dtype in _NUMPY_DTYPES
                         else pd.Series(dtype=dtype).array for name, dtype in columns})


def coerce(frame: pd.DataFrame, columns: dict[str, Any]) -> pd.DataFrame:
    """Give ``frame`` exactly ``columns`` in that order with those dtypes (missing ones filled)."""
    if list(frame.columns) == list(columns) and all(str(have) == str(want) for have, want in
                                                     zip(frame.dtypes, columns.values())):
        return frame.reset_index(drop=True)  # already so (most are): no frame rebuilt column by column
    out = {}
    n = len(frame)
    for name, dtype in columns.items():
        if name in frame:
            col = frame[name]
        # copy=False: pandas 3 copies an array given to a Series (a 10M-event trace's step column: 50 MB)
        elif dtype in ("int64",):
            col = pd.Series(np.full(n, -1, dtype=np.int64), index=frame.index, copy=False)
        elif dtype == "float64":
            col = pd.Series(np.full(n, np.nan), index=frame.index, copy=False)
        elif dtype == "category":
            col = pd.Series(pd.Categorical.from_codes(np.zeros(n, np.int8), categories=[""]), index=frame.index,
                            copy=False)
        else:
            col = pd.Series([""] * n, index=frame.index, dtype=object)
        out[name] = col.astype(dtype) if str(col.dtype) != str(dtype) else col
    return pd.DataFrame(out, copy=False).reset_index(drop=True)


LAUNCH_KINDS = ("runtime", "sync")  # host calls that carry a launch's correlation id to its device work


def assign_steps(events: pd.DataFrame, steps: pd.DataFrame) -> np.ndarray:
    """Step id of each event (-1 outside every step).

    Host events: the last step (of their rank) that started at or before them; host events after
    the last step's end are outside every step. Device events: the step whose host launched them,
    found through the launch's correlation id (the earliest host runtime call with the same id:
    cudaLaunchKernel, hipLaunchKernel, torch_npu's Enqueue), since the device runs behind the
    host, often by a whole step. Where launches are linked, device work whose launch is missing
    was launched before profiling began and is outside every step; where the reader has no launch
    links at all, device events fall back to time, as host events do (kept after the last step).
    """
    result = np.full(len(events), -1, dtype=np.int64)
    ts_all = events["ts_ns"].to_numpy()
    device_all = events["device"].to_numpy()
    rank_all = events["rank"].to_numpy()
    corr_all = events["correlation"].to_numpy()
    launch_all = kind_in(events["kind"], LAUNCH_KINDS)
    for rank, rank_steps in steps.groupby("rank"):
        rank_steps = rank_steps.sort_values("start_ns")
        mask = rank_all == rank
        mask = slice(None) if mask.all() else mask  # one rank: views, not copies of every column
        ts = ts_all[mask]
        starts, ids = rank_steps["start_ns"].to_numpy(), rank_steps["step"].to_numpy()
        on_host = device_all[mask] < 0
        last_end = rank_steps["end_ns"].to_numpy()[-1]
        if ts.size > 1 and (ts[1:] >= ts[:-1]).all():  # sorted (finish sorts first): each step's events in a row
            cuts = np.searchsorted(ts, starts, side="left")  # each step's first event
            step = np.repeat(np.r_[-1, ids], np.diff(np.r_[0, cuts, ts.size]))
            past = np.searchsorted(ts, last_end, side="left")
            step[past:][on_host[past:]] = -1
        else:
            idx = np.searchsorted(starts, ts, side="right") - 1
            step = np.where(idx >= 0, ids[np.maximum(idx, 0)], -1)
            step[on_host & (ts >= last_end)] = -1
        step[~on_host] = _launch_steps(ts, corr_all[mask], launch_all[mask], on_host, step)
        result[mask] = step
    return result


def _launch_steps(ts: np.ndarray, corr: np.ndarray, launch_kind: np.ndarray, on_host: np.ndarray,
                  step: np.ndarray) -> np.ndarray:
    """Steps of the device events of one rank by their launch (see :func:`assign_steps`)."""
    launch = on_host & (corr >= 0) & launch_kind
    device_step = step[~on_host]
    if not launch.any():
        return device_step
    order = np.argsort(ts[launch], kind="stable")
    first = pd.Series(step[launch][order], index=corr[launch][order])
    first = first[~first.index.duplicated(keep="first")]  # the earliest call with that id launched it
    where = first.index.get_indexer(corr[~on_host])
    found = (where >= 0) & (corr[~on_host] >= 0)
    # where launches do link, a linked id whose launch is missing was launched before profiling
    # began: no traced step's work (torch_npu level 0 writes ids that link to nothing: use time)
    before = (corr[~on_host] >= 0) & ~found & found.any()
    return np.where(found, first.to_numpy()[np.maximum(where, 0)], np.where(before, -1, device_step))


def _distinct(ids: np.ndarray) -> set[int]:
    """The distinct values of an id column (one rank in most traces: found without a hash table
    the size of the column)."""
    if ids.size == 0:
        return set()
    low, high = int(ids.min()), int(ids.max())
    return {low} if low == high else set(np.unique(ids).tolist())


def finish(events: pd.DataFrame, steps: pd.DataFrame, *, memory: pd.DataFrame | None = None,
           comm: pd.DataFrame | None = None, meta: Mapping[str, Any] | TraceMeta | None = None,
           links: pd.DataFrame | None = None, matrix: pd.DataFrame | None = None,
           counters: pd.DataFrame | None = None, kernel_metrics: pd.DataFrame | None = None) -> Trace:
    """Coerce every table to its schema, attribute events to steps, and build the Trace; the
    tables a reader may not have are named; ``meta`` (a reader's dict, or a TraceMeta) must
    hold only :class:`TraceMeta`'s fields, each of its type (ValueError naming them)."""
    meta = TraceMeta.of(meta)
    steps = coerce(steps, STEP_COLUMNS)
    events = coerce(events, EVENT_COLUMNS)
    unstepped = sorted(_distinct(events["rank"].to_numpy()) - set(steps["rank"].unique()))
    if unstepped:
        # No ProfilerStep# marks (no schedule, or prof.step() never called): steps from the
        # iterations the trace shows (optimizer steps, a recurring annotation), else one per rank
        found = {r: infer_steps(events[events["rank"].to_numpy() == r], r) for r in unstepped}
        steps = coerce(pd.concat([steps, *(s for s, _ in found.values())], ignore_index=True), STEP_COLUMNS)
        whole = [int(r) for r, (_, how) in found.items() if how == WHOLE_TRACE]
        meta = replace(meta, steps_from={int(r): how for r, (_, how) in found.items()},
                       **({"steps_inferred": whole} if whole else {}))
    steps = steps.sort_values(["rank", "start_ns"]).reset_index(drop=True)
    release_free_memory()  # the readers' freed temporaries, before the sort's copies
    # sorted first: the steps' search then reads the timestamps in order
    events = sorted_rows(events, ["rank", "ts_ns"])
    if len(steps) and len(events):
        events["step"] = assign_steps(events, steps)
    memory = coerce(memory if memory is not None else empty(MEMORY_COLUMNS), MEMORY_COLUMNS)
    comm = coerce(comm if comm is not None else empty(COMM_COLUMNS), COMM_COLUMNS)
    links = coerce(links if links is not None else empty(LINK_COLUMNS), LINK_COLUMNS)
    matrix = coerce(matrix if matrix is not None else empty(MATRIX_COLUMNS), MATRIX_COLUMNS)
    return Trace(events, steps, memory.sort_values(["rank", "ts_ns"]).reset_index(drop=True), comm, meta,
                 links, matrix,
                 sort_counters(coerce(counters if counters is not None else empty(COUNTER_COLUMNS), COUNTER_COLUMNS)),
                 coerce(kernel_metrics if kernel_metrics is not None else empty(KERNEL_METRIC_COLUMNS),
                        KERNEL_METRIC_COLUMNS))


def sorted_rows(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """``frame``'s rows stably ordered by ``keys``, with a fresh index. The columns are taken one
    at a time and each is removed from ``frame`` once taken, so a frame nothing else holds is
    never there twice (a ten-million-event trace: one column's copy at a time, not the frame's)."""
    columns = [frame[k].to_numpy() for k in keys]
    # a key of one value (the rank of a one-rank trace) orders nothing: not sorted by
    columns = [c for c in columns[:-1] if c.size and c.min() != c.max()] + columns[-1:]
    order = np.lexsort(columns[::-1]) if len(columns) > 1 else np.argsort(columns[0], kind="stable")
    if len(order) < 2 or (order[1:] > order[:-1]).all():
        return frame.reset_index(drop=True)
    return pd.DataFrame({name: frame.pop(name).values.take(order) for name in list(frame.columns)}, copy=False)


def sort_counters(counters: pd.DataFrame) -> pd.DataFrame:
    """Counters ordered by rank, metric and time (each series contiguous and increasing)."""
    return counters.sort_values(["rank", "device", "group", "name", "ts_ns"], kind="stable").reset_index(drop=True)
