"""Ascend collective-communication rules (msprof-analyze's communication advisor): byte
alignment of SDMA transfers, small packets, and SDMA bandwidth contention with matmuls.

Inputs: the HCCL plane tasks of trace_view.json (``vendor["hccl_tasks"]``, kept by the Ascend
reader), the per-call link rows of communication.json (``Summary.links``), the collectives'
own spans on the HCCL lane (events of kind ``comm``) and the matmuls of ``Summary.kernel_metrics``."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .. import thresholds as T
from ..finding import Finding
from .registry import kernel_metrics, rule, share_of_steps

TRANSFER_TASKS = ("Memcpy", "Reduce_Inline")


@rule("byte_alignment", ("npu",))
def byte_alignment(s) -> list[Finding]:
    """Collectives whose off-chip SDMA transfers are not a multiple of 512 bytes."""
    tasks = s.vendor.get("hccl_tasks")
    if tasks is None or tasks.empty:
        return []
    moved = tasks[tasks["task_type"].isin(TRANSFER_TASKS) & (tasks["transport"] == "SDMA")
                  & (tasks["link_type"] != "ON_CHIP") & (tasks["size_bytes"] > T.HCCL_ALIGN_MIN_BYTES)]
    if moved.empty:
        return []
    moved = moved.assign(misaligned_ns=np.where(moved["size_bytes"] % T.HCCL_ALIGN_BYTES != 0, moved["dur_ns"], 0))
    per_op = moved.groupby("op", sort=False).agg(size_bytes=("size_bytes", "sum"), dur_ns=("dur_ns", "sum"),
                                                 misaligned_ns=("misaligned_ns", "sum"))
    bad = per_op[per_op["misaligned_ns"] > 0]
    if bad.empty:
        return []
    ops = [{"op": op, "size_bytes": int(r.size_bytes), "duration_us": r.dur_ns / 1e3,
            "misaligned_us": r.misaligned_ns / 1e3, "bandwidth_gbps": r.size_bytes / r.dur_ns if r.dur_ns else 0.0}
           for op, r in bad.iterrows()]
    misaligned_us = float(bad["misaligned_ns"].sum()) / 1e3
    listed = ", ".join(f"{o['op']} ({o['size_bytes']:,} B)" for o in ops[:5])
    return [Finding(
        "communication", share_of_steps(s, misaligned_us),
        f"{len(ops)} collectives move data whose size is not a multiple of {T.HCCL_ALIGN_BYTES} bytes: {listed}; "
        f"their misaligned transfers take {misaligned_us:,.1f} µs",
        {"ops": ops, "misaligned_us": misaligned_us, "misaligned_share_of_transfers":
            misaligned_us / (float(per_op["dur_ns"].sum()) / 1e3)},
        f"make each rank's slice of the reduced buffer (size / world_size) a multiple of {T.HCCL_ALIGN_BYTES} "
        "bytes: pad flattened buffers you reduce yourself (torch.nn.functional.pad), or regroup DDP's buckets "
        "(DistributedDataParallel(bucket_cap_mb=...)); HCCL splits collectives further by algorithm, which "
        "msprof-analyze refers to HCCL's developers",
        listed)]


def _per_call(s, link: str) -> pd.DataFrame:
    """This rank's collectives over ``link`` that moved data (Summary.links holds every rank's)."""
    links = s.links
    if "rank" in links:
        links = links[links["rank"] == s.meta.get("rank", 0)]
    return links[(links["link_type"].astype(str) == link) & (links["transit_mb"] > 0)]


@rule("small_packets", ("npu",))
def small_packets(s) -> list[Finding]:
    """More than 20% of SDMA collectives under 16 MB, or of RDMA collectives under 1 MB."""
    links = s.links
    if links is None or links.empty:
        return []
    out = []
    for link, limit in (("SDMA", T.SMALL_SDMA_MB), ("RDMA", T.SMALL_RDMA_MB)):
        calls = _per_call(s, link)
        if calls.empty:
            continue
        small = calls[calls["transit_mb"] < limit]
        ratio = len(small) / len(calls)
        if not len(small) or ratio <= T.SMALL_PACKET_RATIO:
            continue
        small_ms = float(small["transit_ms"].sum())
        ops = small.groupby("op", sort=False)["transit_mb"].agg(["count", "mean"]).head(5)
        listed = ", ".join(f"{op} x{int(r['count'])} ({r['mean']:.2f} MB)" for op, r in ops.iterrows())
        out.append(Finding(
            "communication", share_of_steps(s, small_ms * 1e3),
            f"{ratio:.0%} of {link} collectives move less than {limit:g} MB each ({len(small)} of {len(calls)}), "
            f"taking {small_ms:,.2f} ms",
            {"link": link, "small_calls": len(small), "calls": len(calls), "small_ratio": ratio,
             "small_transit_ms": small_ms},
            "send fewer, larger collectives: raise the batch size or accumulate gradients over micro-batches "
            "(no_sync()), enlarge DDP buckets (DistributedDataParallel(bucket_cap_mb=...)), and prefer ZeRO-1/2 "
            "over ZeRO-3 when memory allows", listed))
    return out


@rule("bandwidth_contention", ("npu",))
def bandwidth_contention(s) -> list[Finding]:
    """SDMA collectives below 0.8 x 18 GB/s while a matmul runs at the same time."""
    links, d, ev = s.links, kernel_metrics(s), s.events
    if links is None or links.empty or d.empty or ev is None:
        return []
    calls = ev[ev["kind"] == "comm"].assign(op=lambda e: e["name"].astype(str)).drop_duplicates("op")
    sdma = _per_call(s, "SDMA").assign(op=lambda x: x["op"].astype(str)).merge(
        calls[["op", "ts_ns", "dur_ns"]], on="op").sort_values("ts_ns")
    mm = d[d["type"].str.lower().str.contains("matmul")]
    if sdma.empty or mm.empty:
        return []
    start = mm["ts_ns"].to_numpy()
    end = start + mm["dur_ns"].to_numpy()
    order = np.argsort(start)
    start, end = start[order], np.maximum.accumulate(end[order])
    c0 = sdma["ts_ns"].to_numpy()
    c1 = c0 + sdma["dur_ns"].to_numpy()
    # a matmul overlaps [c0, c1] when one starts before c1 and the latest end among those is after c0
    k = np.searchsorted(start, c1, side="right") - 1
    overlaps = (k >= 0) & (end[np.clip(k, 0, None)] >= c0)
    limit = T.SDMA_CONTENTION_RATIO * T.SDMA_BASELINE_GBPS
    slow = sdma[overlaps & (sdma["bandwidth_gbps"].to_numpy() < limit)]
    if slow.empty:
        return []
    ops = [{"op": r.op, "duration_ms": r.dur_ns / 1e6, "bandwidth_gbps": r.bandwidth_gbps}
           for r in slow.sort_values("bandwidth_gbps").itertuples()]
    listed = ", ".join(f"{o['op']} ({o['bandwidth_gbps']:.1f} GB/s)" for o in ops[:5])
    return [Finding(
        "communication", share_of_steps(s, float(slow["transit_ms"].sum()) * 1e3),
        f"{len(ops)} SDMA collectives run below {limit:.1f} GB/s while matmuls run beside them: {listed}",
        {"ops": ops, "threshold_gbps": limit},
        "computation overlapping these collectives competes for memory bandwidth: compare against a run without "
        "the overlap (e.g. DistributedDataParallel(bucket_cap_mb=...) large enough for one bucket, reduced after "
        "backward) and keep whichever is faster", listed)]
