"""The per-step time breakdown of one rank.

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
computing is the union of operator time outside DataLoader waits, communication the process
group's collective spans (gloo), idle the rest.
"""

from __future__ import annotations

import functools
from typing import Callable

import numpy as np
import pandas as pd

from .intervals import Spans, spans_of
from .memory_release import release_free_memory
from .schema import DEVICE_WORK, device_work_rows, kind_in
from .blocking import blocking_mask


STEP_COLUMNS = ["step", "start_us", "wall_us", "computing_us", "communication_us", "comm_not_overlapped_us",
                "overlapped_us", "free_us", "preparing_us", "dataloader_us", "memcpy_us", "sync_us", "busy_us", "idle_us",
                "stage_us", "device_util", "idle_sync_us", "idle_dataloader_us", "idle_host_ops_us", "idle_python_us"]
# idle_*: the step's idle time split by what the host was doing meanwhile (they add up to idle_us):
# blocked in a call that waits for the device (sync), waiting for the DataLoader, running host
# operators that launch nothing yet (dispatch, CPU work), or outside any operator (Python, sleep).


def vendor_step_table(table: pd.DataFrame | None, steps: pd.DataFrame) -> pd.DataFrame:
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
        **{c: np.nan for c in IDLE_COLUMNS},
    })
    out["wall_us"] = out["stage_us"] + out["preparing_us"]
    out["busy_us"] = out["computing_us"] + out["comm_not_overlapped_us"]
    out["idle_us"] = np.maximum(out["wall_us"] - out["busy_us"], 0.0)
    out["device_util"] = np.where(out["wall_us"] > 0, out["busy_us"] / out["wall_us"], np.nan)
    return out[STEP_COLUMNS]


# step_trace_time.csv's figures checked against those computed from the tasks (its own names)
CHECKED = {"computing_us": "Computing", "comm_not_overlapped_us": "Communication(Not Overlapped)",
           "free_us": "Free", "stage_us": "Stage"}
AGREE_SHARE = 0.01  # of the step's Stage: the text export's figures agree to 0.01% on every whole rank


HARDWARE_LANE = "Ascend Hardware/"
# the host's recorded work: what a step's last window holds after its last device activity (not
# annotations, which a ProfilerStep# is, nor with_stack frames, which span the whole step)
HOST_WORK = ("host_op", "runtime", "sync", "dataloader")  # torch_npu's compute task lanes, as every Ascend reader names them


def vendor_rule(ev: pd.DataFrame) -> pd.DataFrame:
    """``ev`` as torch_npu's step_trace_time.csv may count them: the communicating kernels on the
    compute lanes (HCCL's AIV kernels and the like, which the reader counts as communication, see
    :func:`npumagic.analysis.sources.ascend.reader.communicating_kernels`) counted as computing."""
    moved = ((ev["kind"] == "comm") & ev["lane"].astype(str).str.startswith(HARDWARE_LANE)).to_numpy()
    if not moved.any():
        return ev
    return ev.assign(kind=np.where(moved, "kernel", ev["kind"].to_numpy(dtype=object)))


def disagreement(ours: pd.DataFrame, vendor: pd.DataFrame | None) -> str:
    """Where the step table computed from a rank's tasks and its own step_trace_time.csv differ
    by more than 1% of the step (a step one of them lacks, or the largest difference), in words;
    "" where they agree or there is no step_trace_time.csv."""
    if vendor is None or vendor.empty or ours.empty or "Step" not in vendor:
        return ""
    theirs = vendor.apply(pd.to_numeric, errors="coerce").dropna(subset=["Step"])
    theirs = theirs.assign(Step=theirs["Step"].astype(np.int64)).drop_duplicates("Step").set_index("Step")
    mine = ours.set_index("step")
    only = sorted(set(mine.index) ^ set(theirs.index))
    if only:
        side = "step_trace_time.csv" if only[0] in theirs.index else "the tasks"
        return f"step {only[0]} is only in {side}"
    worst, words = 0.0, ""
    for step in mine.index:
        stage = float(theirs.at[step, "Stage"]) if "Stage" in theirs else float("nan")
        for column, name in CHECKED.items():
            if name not in theirs or not stage > 0:
                continue
            gap = abs(float(mine.at[step, column]) - float(theirs.at[step, name])) / stage
            if gap > AGREE_SHARE and gap > worst:
                worst = gap
                words = (f"step {step} {name}: {mine.at[step, column] / 1e3:,.2f} ms from the tasks, "
                         f"{theirs.at[step, name] / 1e3:,.2f} ms in step_trace_time.csv, {gap:.1%} of its "
                         f"{stage / 1e3:,.2f} ms stage")
    return words


def cycle_bounds(steps: pd.DataFrame, cycle_starts: list[list[int]] | None, rank: int) -> np.ndarray:
    """Where ``rank``'s later profiling cycles begin (ns, sorted): the host start of each step
    that ``cycle_starts`` (``[rank, step]`` pairs, the reader's ``meta["cycle_starts"]``) names.
    A repeating schedule profiles one process in cycles that each are their own timeline: no
    device window, idle time or temporal span runs across the gap between two."""
    first = {step for r, step in cycle_starts or [] if r == rank}
    return np.sort(steps.loc[steps["step"].isin(first), "start_ns"].to_numpy(dtype=np.int64))


def cycle_of(ts_ns: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """The profiling cycle (0, 1, ...) each timestamp falls in, given :func:`cycle_bounds`."""
    return np.searchsorted(bounds, ts_ns, side="right")


def step_table(ev: pd.DataFrame, steps: pd.DataFrame, device_mode: bool,
               bounds: np.ndarray | None = None, host_tail: bool = False,
               blocking: np.ndarray | None = None) -> pd.DataFrame:
    """Per-step breakdown (:data:`STEP_COLUMNS`) of one rank's events ``ev`` and its ``steps``
    (sorted by start); ``bounds``: where its later profiling cycles begin (:func:`cycle_bounds`);
    ``host_tail``: each cycle's last step holds the host work recorded after its last device
    activity (see :func:`device_windows`); ``blocking``: :func:`blocking_mask` of ``ev``, where
    the caller has it."""
    if steps.empty:
        return pd.DataFrame(columns=STEP_COLUMNS)
    kind = ev["kind"]
    dataloader = spans_of(ev, (kind == "dataloader").to_numpy())
    syncs = spans_of(ev, blocking_mask(ev) if blocking is None else blocking)
    host_start = steps["start_ns"].to_numpy()
    host_end = steps["end_ns"].to_numpy()
    if device_mode:
        work = ev.loc[device_work_rows(ev), ["kind", "ts_ns", "dur_ns", "step"]]
        compute, comm, memcpy = (spans_of(work[work["kind"] == k]) for k in DEVICE_WORK)
        last_host_work = functools.partial(_host_work_end, ev, steps) if host_tail else None
        lo, hi = _cycle_windows(work, steps, np.empty(0, np.int64) if bounds is None else bounds, last_host_work)
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
        compute = spans_of(ev, ((kind == "host_op") & (ev["device"] < 0)).to_numpy()) - dataloader
        # a process group's collectives on the CPU (gloo): the reader marks their spans comm
        comm = spans_of(ev, ((kind == "comm") & (ev["device"] < 0)).to_numpy())
        memcpy = Spans.empty()
        busy_spans = compute | comm
        stage = hi - lo
        preparing = np.zeros(len(steps), dtype=np.int64)
        free = stage - busy_spans.covered(lo, hi)
    computing = compute.covered(lo, hi)
    communication = comm.covered(lo, hi)
    overlapped = (compute & comm).covered(lo, hi)
    busy = busy_spans.covered(lo, hi)
    us = lambda a: np.asarray(a, dtype=np.float64) / 1000.0  # noqa: E731
    release_free_memory()  # the windows' temporaries (glibc keeps them), before the idle time's passes
    idle_by = _idle_attribution(ev, lo, hi, busy_spans, syncs if device_mode else Spans.empty(), dataloader, device_mode)
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
        **{c: us(v) for c, v in idle_by.items()},
    })
    out["device_util"] = np.where(out["wall_us"] > 0, out["busy_us"] / out["wall_us"], np.nan)
    return out[STEP_COLUMNS]


IDLE_COLUMNS = ("idle_sync_us", "idle_dataloader_us", "idle_host_ops_us", "idle_python_us")


def _idle_attribution(ev: pd.DataFrame, lo: np.ndarray, hi: np.ndarray, busy: Spans, blocked: Spans,
                      dataloader: Spans, device_mode: bool) -> dict[str, np.ndarray]:
    """Each window's idle time by what the host was doing then, in this order of precedence:
    blocked waiting for the device, waiting for the DataLoader, in a host operator, else
    outside any operator (Python). On the CPU backend operators are the busy time itself."""
    if lo.size == 0:
        return {c: np.zeros(0, np.int64) for c in IDLE_COLUMNS}
    idle = Spans(np.array([lo.min()], np.int64), np.array([hi.max()], np.int64)) - busy
    on_sync = idle & blocked
    rest = idle - blocked
    on_loader = rest & dataloader
    rest = rest - dataloader
    if device_mode:
        on_ops = rest & spans_of(ev, ((ev["kind"] == "host_op") & (ev["device"] < 0)).to_numpy())
        rest = rest - on_ops
    else:
        on_ops = Spans.empty()
    return dict(zip(IDLE_COLUMNS, (on_sync.covered(lo, hi), on_loader.covered(lo, hi), on_ops.covered(lo, hi),
                                   rest.covered(lo, hi))))
def _host_work_end(ev: pd.DataFrame, steps: pd.DataFrame, step: int) -> float:
    """The end (ns) of the last host work recorded in step ``step``'s host span (operators, runtime
    calls, syncs, DataLoader waits; NaN where none). Asked of one step a profiling cycle (its last
    with device work): one pass over the events' step numbers, not a table of every step's."""
    span = steps.loc[(steps["step"] == step).to_numpy(), "end_ns"]
    if span.empty:
        return np.nan
    ts = ev["ts_ns"].to_numpy()
    mine = (ev["step"].to_numpy() == step) & kind_in(ev["kind"], HOST_WORK) & (ev["device"].to_numpy() < 0)
    mine &= ts < span.iat[-1]
    return float((ts[mine] + ev["dur_ns"].to_numpy()[mine]).max()) if mine.any() else np.nan


def _cycle_windows(work: pd.DataFrame, steps: pd.DataFrame, bounds: np.ndarray,
                   host_end: Callable[[int], float] | None) -> tuple[np.ndarray, np.ndarray]:
    """:func:`device_windows` of each profiling cycle on its own, aligned with ``steps``."""
    if not bounds.size:
        return device_windows(work, steps, host_end)
    lo, hi = steps["start_ns"].to_numpy().copy(), steps["end_ns"].to_numpy().copy()
    step_cycle = cycle_of(steps["start_ns"].to_numpy(), bounds)
    work_cycle = cycle_of(work["ts_ns"].to_numpy(), bounds)
    for cycle in np.unique(step_cycle):
        mine = step_cycle == cycle
        lo[mine], hi[mine] = device_windows(work[work_cycle == cycle], steps[mine], host_end)
    return lo, hi


def device_windows(work: pd.DataFrame, steps: pd.DataFrame,
                   host_end: Callable[[int], float] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Each step's device window ``[lo, hi)`` in ns, aligned with ``steps`` (sorted by start).

    The device window of step k runs from the first device activity launched in step k to the
    first of the next step that launched any, so windows tile the device timeline. At the ends
    of the capture there is no neighbouring step: the first window starts at the host step start
    (the host's preparation of the first step is part of it, as it is of every later window),
    or, while the device is still busy with work launched before the trace, when that is done,
    and at the latest at its own first activity; the last window ends at its last device
    activity, or, given ``host_end`` (the end of a step's last recorded host work, by its number), at the
    end of its host work where that is later: the host's work after the last kernel (a ``.item()``,
    logging, the optimizer's Python) is the step's own. The rest of the host step is not: in the
    shared traces the last ProfilerStep# often runs on 20+ ms with nothing recorded (the profiler
    stopping). torch_npu's step_trace_time.csv ends the step at its device work, hence no
    ``host_end`` there. A step that launched no device work keeps its host window.

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
        end = np.int64(last[active[-1]])
        host_last = host_end(int(steps["step"].iat[active[-1]])) if host_end is not None else np.nan
        if host_last > end:  # NaN (no host work) compares False
            end = max(end, np.int64(min(host_last, hi[active[-1]])))
        hi[active] = np.append(starts[1:], end)
        hi[active] = np.maximum(hi[active], lo[active])
    return lo, hi
