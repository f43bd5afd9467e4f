"""Memory rules, the seed checklist's fourth step (the memory view: large peaks, frequent large
allocations and releases, fragmentation), read from the run's memory view
(:func:`~npumagic.analysis.memory_summary.memory_view_of`): the peak near the device's capacity
with the operator running at it, reserved memory unused at the peak (fragmentation), allocated
memory growing across steps (a leak), and large blocks churned while the pool returns memory to
the device within the steps. None costs step time the trace measures, except the churn's driver
calls: their predicted saving is none (:mod:`..whatif`)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .. import thresholds as T
from ..finding import Finding, plural
from ..memory_summary import memory_view_of, operator_at, step_windows
from ..memory_view import _size
from ..summary import Summary
from ..schema import text_mask
from .core import backend_of, inference_only
from .registry import rule, share_of_steps

# the calls with which the caching allocator takes memory from the driver or gives it back
DRIVER_ALLOCATOR_CALLS = ("cudaMalloc", "cudaFree", "hipMalloc", "hipFree", "aclrtMalloc", "aclrtFree",
                          "AscendCL@aclrtMalloc", "AscendCL@aclrtFree", "AscendCL@aclrtFreePhysical")


def _env(s: Summary) -> str:
    return "PYTORCH_NPU_ALLOC_CONF" if backend_of(s) == "npu" else "PYTORCH_CUDA_ALLOC_CONF"


def _holders(table: pd.DataFrame, n: int = 3) -> list[dict]:
    return [{"operator": str(r.operator), "blocks": int(r.blocks), "bytes": float(r.bytes)}
            for r in table.head(n).itertuples(index=False)]


@rule("memory")
def memory(s: Summary) -> list[Finding]:
    """Near capacity (peak allocated above :data:`~..thresholds.MEMORY_NEAR_CAPACITY` of the
    device) and fragmentation (reserved above :data:`~..thresholds.FRAGMENTATION_RATIO` x
    allocated at the peak, by at least :data:`~..thresholds.FRAGMENTATION_MIN_BYTES`)."""
    out = []
    inference = inference_only(s)
    view = memory_view_of(s)
    for _, m in s.memory.iterrows():
        cap = m["capacity_bytes"]
        peak, reserved = float(m["peak_allocated_bytes"]), float(m["peak_reserved_bytes"] or 0)
        mine = view is not None and view.peak_allocated_bytes is not None and abs(view.peak_allocated_bytes - peak) < 1
        if mine and view.reserved_at_peak_bytes is not None:
            reserved = view.reserved_at_peak_bytes  # at the peak, not the pool's maximum at another time
        at = (view.peak_operator or operator_at(s, view.peak_ts_ns)) if mine else None
        named = {"peak_operator": at, "peak_holders": _holders(view.holders)} if at else {}
        if pd.notna(cap) and cap and peak / cap > T.MEMORY_NEAR_CAPACITY and inference:
            # inference servers (vLLM, TensorRT-LLM) size a KV cache to fill the memory on purpose
            out.append(Finding("memory", 0.0, f"{m['device']}: peak allocated {peak / 2**30:.1f} GiB is {peak / cap:.0%} "
                               f"of {cap / 2**30:.1f} GiB in a run without a backward pass (inference)"
                               + (f", reached in {at}" if at else ""),
                               {"peak_gib": peak / 2**30, "capacity_share": peak / cap, "inference": True, **named},
                               "if a KV cache or memory pool is sized to fill the device on purpose (vLLM's "
                               "gpu_memory_utilization), nothing to do; otherwise lower the batch or sequence length",
                               str(m["device"]), "memory_capacity"))
        elif pd.notna(cap) and cap and peak / cap > T.MEMORY_NEAR_CAPACITY:
            evidence = {"peak_gib": peak / 2**30, "capacity_share": peak / cap, **named}
            out.append(Finding("memory", T.MEMORY_CAPACITY_IMPACT, f"{m['device']}: peak allocated {peak / 2**30:.1f} GiB is "
                               f"{peak / cap:.0%} of {cap / 2**30:.1f} GiB" + (f", reached in {at}" if at else ""),
                               evidence, "lower peak memory: activation checkpointing (torch.utils.checkpoint) around the "
                               "layers whose activations hold the peak" + (f" (the peak is reached in {at})" if at else "")
                               + ", a smaller micro-batch with gradient accumulation, or bf16 activations",
                               at or str(m["device"]), "memory_capacity"))
        if backend_of(s) != "cpu" and reserved > T.FRAGMENTATION_RATIO * peak and reserved - peak > T.FRAGMENTATION_MIN_BYTES:
            out.append(Finding("memory", T.FRAGMENTATION_IMPACT, f"{m['device']}: reserved {reserved / 2**30:.1f} GiB vs "
                               f"{peak / 2**30:.1f} GiB allocated at peak: the caching allocator is fragmented",
                               {"reserved_gib": reserved / 2**30, "allocated_gib": peak / 2**30,
                                "unused_reserved_bytes": reserved - peak},
                               f"set {_env(s)}=expandable_segments:True, and avoid tensors whose size changes every step",
                               str(m["device"]), "fragmentation"))
    return out


@rule("memory_growth")
def memory_growth(s: Summary) -> list[Finding]:
    """Allocated memory at the steps' ends rising with the slope's 95% interval above zero and the
    slope at least :data:`~..thresholds.GROWTH_MIN_BYTES_PER_STEP` (the view's ``growth``)."""
    view = memory_view_of(s)
    if view is None or not view.growth.growing:
        return []
    g = view.growth
    lo, hi = g.interval
    never = _holders(g.operators, 5)
    names = ", ".join(o["operator"] for o in never[:3])
    evidence = {"growth_bytes_per_step": g.bytes_per_step, "interval_bytes_per_step": [lo, hi],
                "steps_fitted": g.steps_fitted, "never_freed": never}
    title = (f"{view.device}: allocated memory grows {_size(g.bytes_per_step)} a step over {g.steps_fitted} steps "
             f"(95% interval {_size(lo)} to {_size(hi)}): a leak" + (f"; never freed: {names}" if names else ""))
    ends = view.steps["end_allocated_bytes"].dropna()
    if view.capacity_bytes and len(ends):
        left = max(view.capacity_bytes - float(ends.iloc[-1]), 0.0)
        evidence["steps_to_capacity"] = int(left // g.bytes_per_step)
        title += f"; the device is full in about {evidence['steps_to_capacity']:,} steps"
    fix = ("free what each step keeps: store loss.item() (or loss.detach()) instead of the loss with its graph, append no "
           "outputs or activations to a list across steps, and optimizer.zero_grad(set_to_none=True)"
           + (f"; the blocks never freed are allocated by {names}" if names else ""))
    return [Finding("memory", T.MEMORY_GROWTH_IMPACT, title, evidence, fix, names or str(view.device), "memory_growth")]


@rule("memory_churn", ("npu", "cuda"))
def memory_churn(s: Summary) -> list[Finding]:
    """Blocks of :data:`~..thresholds.CHURN_MIN_BYTES` or more allocated and freed within their
    step while the pool's reserved memory falls within the steps: the caching allocator gives
    memory back to the device (``empty_cache()``, or a failed allocation that frees the cache) and
    takes it again with a synchronising driver call. Churn into a pool that keeps its memory is
    a cached reuse that costs next to nothing, and is not said."""
    view = memory_view_of(s)
    if view is None or not view.paired or not view.churn_count or not len(view.steps):
        return []
    released = _reserved_falls(s, view)
    if not released:
        return []
    n = len(view.steps)
    calls = _driver_calls_us(s)
    listed = ", ".join(str(o) for o in view.churn_operators["operator"].head(3))
    evidence = {"churn_blocks_per_step": view.churn_count / n, "churn_bytes_per_step": view.churn_bytes / n,
                "reserved_falls": released, "driver_allocator_us": calls,
                "operators": _holders(view.churn_operators, 5)}
    mod = "npu" if backend_of(s) == "npu" else "cuda"
    return [Finding("memory", share_of_steps(s, calls),
                    f"{view.device}: {plural(round(view.churn_count / n), 'block', 'blocks')} of 1 MiB or more "
                    f"({_size(view.churn_bytes / n)}) allocated and freed every step while the pool returns memory to "
                    f"the device {plural(released, 'time', 'times')} within the steps",
                    evidence, f"remove torch.{mod}.empty_cache() from the loop, set {_env(s)}=expandable_segments:True, "
                    f"and reuse buffers allocated once outside the loop (out= or in-place operators) for {listed}",
                    listed, "memory_churn")]


def _reserved_falls(s: Summary, view) -> int:
    """How often the pool's reserved memory falls inside a step (on the view's device)."""
    t = s.memory_timeline
    t = t[(t["device"].astype(str) == str(view.device)).to_numpy()].sort_values("ts_ns", kind="stable")
    if t.empty:
        return 0
    falls = t["reserved_bytes"].diff().to_numpy() < 0
    windows = step_windows(s)
    ts = t["ts_ns"].to_numpy()
    inside = np.zeros(len(t), dtype=bool)
    for start, end in windows[["start_ns", "end_ns"]].itertuples(index=False):
        inside |= (ts > start) & (ts <= end)
    return int((falls & inside).sum())


def _driver_calls_us(s: Summary) -> float:
    ev = s.events
    if ev is None or ev.empty:
        return 0.0
    calls = text_mask(ev["name"], lambda n: n.str.startswith(DRIVER_ALLOCATOR_CALLS)) & (ev["step"].to_numpy() >= 0)
    return float(ev.loc[calls, "dur_ns"].sum()) / 1e3
