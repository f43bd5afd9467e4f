"""What an operator does in a training step, read from its name: data preparation, optimizer,
autograd, DDP/FSDP gradient bucketing, collectives, or the user's own work. The role picks the
fix: DDP's bucket packing under a device gap wants a bucketing fix, not "move it into the
Dataset"; a ``.item()`` inside ``Dataset.__getitem__`` reads a CPU tensor and is no sync in the
step."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

ROLES = ("data_preparation", "bucketing", "collective", "optimizer", "autograd", "user")

# checked in this order: the first that matches names the role
_PATTERNS = (
    ("data_preparation", re.compile(r"DataLoader|__getitem__|__getitems__|collate|Dataset|_MultiProcessingDataLoaderIter|"
                                    r"_SingleProcessDataLoaderIter|pin_memory", re.IGNORECASE)),
    # DDP's reducer and the legacy/apex paths pack gradients into buckets on the host; FSDP flattens
    # parameters into FlatParameters
    ("bucketing", re.compile(r"flatten_dense_tensors|unflatten_dense_tensors|_broadcast_coalesced|Reducer|"
                             r"DistributedDataParallel|FullyShardedDataParallel|FlatParam|_flat_param|fsdp|"
                             r"_pre_forward_unshard|_post_backward|allreduce_hook|comm_hook", re.IGNORECASE)),
    ("collective", re.compile(r"^(?:nccl|gloo|hccl|c10d|rccl)|record_param_comms|all_reduce|allreduce|all_gather|"
                              r"allgather|reduce_scatter|broadcast|all_to_all|alltoall|barrier", re.IGNORECASE)),
    ("optimizer", re.compile(r"Optimizer\.|optimizer|_foreach_|_fused_adam|_fused_sgd|zero_grad", re.IGNORECASE)),
    ("autograd", re.compile(r"autograd::|Backward|AccumulateGrad|torch::autograd", re.IGNORECASE)),
)


def role(name: str) -> str:
    """The role of an operator or annotation ``name`` (one of :data:`ROLES`)."""
    for label, pattern in _PATTERNS:
        if pattern.search(name):
            return label
    return "user"


def roles(names: pd.Series) -> pd.Series:
    """:func:`role` of each name, judged once per distinct name."""
    if isinstance(names.dtype, pd.CategoricalDtype):  # a code per row already: no string per row
        codes, distinct = names.cat.codes.to_numpy(), names.cat.categories.astype(str)
    else:
        codes, distinct = pd.factorize(names.astype(str))
    labels = np.array([role(n) for n in distinct] + ["user"], dtype=object)
    return pd.Series(labels[codes], index=names.index)


def fix_for(role_name: str, ops: str, device: bool) -> str:
    """The fix for host work of ``role_name`` (the operators ``ops``) that keeps the device waiting."""
    if role_name == "bucketing":
        return (f"DDP/FSDP's gradient bucketing runs on the host while the device waits ({ops}): let DDP reduce "
                "gradients in place (DistributedDataParallel(model, gradient_as_bucket_view=True, static_graph=True), "
                "bucket_cap_mb sized so a few buckets overlap backward), drop a hand-written flatten/unflatten "
                "around all_reduce for DDP's own reducer, or with FSDP use_orig_params=True; the Dataset cannot "
                "take this work")
    if role_name == "optimizer":
        return (f"the optimizer's host loop keeps the device waiting ({ops}): use a fused or multi-tensor optimizer "
                "(torch.optim.AdamW(params, fused=True) on a device, foreach=True otherwise), and step less often "
                "with gradient accumulation")
    if role_name == "collective":
        return (f"collectives run synchronously on the host ({ops}): issue them asynchronously (async_op=True, "
                "waited at the last moment), or let DDP overlap them with backward")
    if role_name == "data_preparation":
        return (f"data preparation runs in the training process ({ops}): give it to DataLoader workers "
                "(num_workers>0, persistent_workers=True)" + (", pin_memory=True" if device else ""))
    return (f"the host is busy with CPU work while the device waits ({ops}: long operators that launch little "
            "device work): move it off the step, into the Dataset so DataLoader workers run it, into a "
            "preprocessing pass, or onto the device; launch overhead is not the problem, so CUDA graphs would not "
            "help until it is gone")


def in_data_preparation(ev: pd.DataFrame, mask: np.ndarray) -> np.ndarray:
    """Which events of ``mask`` lie inside a data-preparation span (a DataLoader's ``__next__``,
    ``Dataset.__getitem__``, ``collate``) on their own thread: work the DataLoader does, not the
    step's. All False where none was recorded."""
    out = np.zeros(int(mask.sum()), dtype=bool)
    if not out.size:
        return out
    spans = ev.loc[ev["kind"].isin(["host_op", "python", "annotation", "dataloader"]).to_numpy() & (ev["device"] < 0).to_numpy(),
                   ["name", "lane", "ts_ns", "dur_ns"]]
    spans = spans[(roles(spans["name"]) == "data_preparation").to_numpy()]
    if spans.empty:
        return out
    picked = ev[mask]
    lanes = picked["lane"].to_numpy()
    t0 = picked["ts_ns"].to_numpy()
    t1 = t0 + picked["dur_ns"].to_numpy()
    for lane, group in spans.groupby("lane", observed=True):
        mine = np.flatnonzero(lanes == lane)
        if not mine.size:
            continue
        start = group["ts_ns"].to_numpy()
        end = start + group["dur_ns"].to_numpy()
        for i in mine:
            out[i] = bool(((start <= t0[i]) & (end >= t1[i])).any())
    return out
