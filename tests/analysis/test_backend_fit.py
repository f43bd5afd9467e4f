"""Advice fits the backend the run used: no NPU-only fix on a CPU or CUDA run, no CUDA-only fix on
an NPU run, and the checklist does not call the CPU a "device"."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from npumagic.analysis.rules import run_rules
from npumagic.analysis.checklist import checklist

from ..conftest import ASCEND, shared_summary

FOREIGN = {"cpu": ("npu", "torchair", "ascend", "cuda", "pin_memory"), "cuda": ("npu", "torchair", "ascend"),
           "npu": ("cuda",)}


@pytest.fixture(scope="module")
def genuine():
    return shared_summary(ASCEND / "level1")


def _every_rule_fires(summary, backend: str):
    """``summary`` as if run on ``backend``, with steps, kernels and memory that trip every rule
    whose fix depends on the backend (DataLoader, sync, small ops, jitter, fragmentation)."""
    n = 8
    wall = np.array([100_000.0] * (n - 2) + [160_000.0, 170_000.0])
    steps = pd.concat([summary.steps.iloc[[0]]] * n, ignore_index=True).assign(
        step=range(n), wall_us=wall, dataloader_us=wall * 0.3, sync_us=wall * 0.3, free_us=wall * 0.5,
        idle_sync_us=wall * 0.3)  # the device idles while the host is blocked: the sync rule's cost
    kernels = pd.DataFrame({"name": [f"tiny{i}" for i in range(3)], "type": "Add", "core": "",
                            "count": 2000 * n, "total_us": 4.0 * 2000 * n, "mean_us": 4.0, "min_us": 1.0,
                            "max_us": 8.0, "share": 0.1, "shapes": ""})
    memory = pd.DataFrame({"device": ["dev:0"], "peak_allocated_bytes": [2**30], "peak_reserved_bytes": [4 * 2**30],
                           "capacity_bytes": [np.nan]})
    meta = dict(summary.meta, backend=backend, device_mode=backend != "cpu",
                dataloader_iter="_SingleProcessDataLoaderIter")
    metrics = summary.kernel_metrics if backend == "npu" else summary.kernel_metrics.head(0)
    return dataclasses.replace(summary, steps=steps, kernels=kernels, memory=memory, meta=meta, kernel_metrics=metrics)


@pytest.mark.parametrize("backend", ["cpu", "cuda", "npu"])
def test_every_fix_fits_the_backend(genuine, backend):
    summary = _every_rule_fires(genuine, backend)
    findings = run_rules(summary)  # every rule that fits the backend
    fired = {f.category for f in findings}
    assert {"dataloader", "small_ops", "jitter"} <= fired
    if backend != "cpu":
        assert {"sync", "memory"} <= fired
    for f in findings:
        text = f.fix.lower()
        assert not [w for w in FOREIGN[backend] if w in text], (f.category, f.fix)


@pytest.mark.parametrize("backend", ["cpu", "cuda", "npu"])
def test_a_compute_bound_verdict_fits_the_backend(genuine, backend):
    steps = genuine.steps.assign(computing_us=genuine.steps["wall_us"] * 0.95, busy_us=genuine.steps["wall_us"] * 0.95,
                                 comm_not_overlapped_us=0.0, communication_us=0.0, free_us=0.0, dataloader_us=0.0,
                                 idle_us=genuine.steps["wall_us"] * 0.05, memcpy_us=0.0,
                                 sync_us=0.0)
    summary = dataclasses.replace(genuine, steps=steps, kernels=genuine.kernels.head(0), syncs=genuine.syncs.head(0),
                                  comm=genuine.comm.head(0), memory=genuine.memory.head(0),
                                  kernel_metrics=genuine.kernel_metrics.head(0), events=None,
                                  meta=dict(genuine.meta, backend=backend, device_mode=backend != "cpu"))
    verdict = checklist(summary)
    assert verdict.bottleneck == "compute_bound"
    classify, change = verdict.steps[1][1], verdict.steps[2][1]
    assert not [w for w in FOREIGN[backend] if w in change.lower()], change
    assert ("device" in classify) == (backend != "cpu")
