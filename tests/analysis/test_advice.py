"""Advice rules and the checklist on real data: the shared Ascend samples and real CPU runs."""

from __future__ import annotations

import ast
import re
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

import npumagic
from npumagic.analysis import schema, thresholds
from npumagic.analysis.advice import CATEGORIES

from ..conftest import ASCEND, ASCEND_RANKS, shared_summary


def test_the_comm_bound_rank_is_classified_with_the_vendor_figures():
    summary = shared_summary(ASCEND / "level1" / "rank0_ascend_pt")
    advice = npumagic.advise(summary)
    top = advice[0]
    assert top.category == "communication" and top.severity == "high"
    # step_trace_time.csv: Communication 105991.878 us, Computing 8873.756 us
    assert "105.99 ms per step" in top.title and "8.87 ms of computing" in top.title
    assert top.evidence["communication_ms"] == pytest.approx(105.992, rel=1e-3)
    assert top.evidence["computing_ms"] == pytest.approx(8.874, rel=1e-3)
    verdict = npumagic.checklist(summary)
    assert verdict.bottleneck == "communication"
    assert "105.99 ms" in verdict.steps[1][1]


def test_npu_kernel_rules_find_the_format_conversions_and_low_cube_use():
    advice = npumagic.advise(shared_summary(ASCEND / "level1" / "rank0_ascend_pt"))
    trans = next(f for f in advice if "transdata_count" in f.evidence)
    assert trans.evidence["transdata_count"] == 57  # op_statistic.csv: TransData, Count 57
    assert trans.evidence["transdata_ms"] == pytest.approx(1.423, rel=1e-2)
    cube = next(f for f in advice if "aicore_mac_ratio" in f.evidence)
    assert cube.evidence["aicore_mac_ratio"] < thresholds.AICORE_UTIL


def test_syncs_are_found_with_their_source_line():
    summary = shared_summary(ASCEND / "level1" / "rank0_ascend_pt")
    assert summary.syncs["per_step"].max() == 27
    item = summary.blocking.set_index("op").loc["aten::item"]
    assert item["call"].startswith(".item()") and "main.py(485)" in item["source"]


@pytest.mark.parametrize("rank_dir", ASCEND_RANKS, ids=lambda p: f"{p.parent.name}-{p.name}")
def test_every_fix_names_an_api_or_parameter(rank_dir):
    for finding in npumagic.advise(shared_summary(rank_dir)):
        assert finding.category in CATEGORIES
        assert re.search(r"\w+\(|\w=\w|[A-Z_]{4,}=", finding.fix), finding.fix


def test_every_threshold_is_documented_where_it_is_defined():
    source = Path(thresholds.__file__).read_text().splitlines()
    for node in ast.parse("\n".join(source)).body:
        if isinstance(node, ast.Assign):
            line = node.lineno - 2  # the line above the constant
            while line >= 0 and re.match(r"^[A-Z0-9_]+ = ", source[line]):
                line -= 1  # constants sharing one comment block
            assert line >= 0 and source[line].startswith("#"), f"{node.targets[0].id} has no reason comment"


def _profile(tmp_path: Path, step_fn, steps=4) -> npumagic.Summary:
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=steps, repeat=1),
                 on_trace_ready=tensorboard_trace_handler(str(tmp_path))) as prof:
        for _ in range(steps + 2):
            step_fn()
            prof.step()
    return npumagic.analyze(tmp_path)


def test_a_slow_dataset_puts_the_dataloader_first(tmp_path):
    class Slow(torch.utils.data.Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, i):
            time.sleep(0.004)
            return torch.randn(32)

    it = iter(torch.utils.data.DataLoader(Slow(), batch_size=4))
    model = torch.nn.Linear(32, 8)
    advice = npumagic.advise(_profile(tmp_path, lambda: model(next(it)).sum().backward()))
    assert advice[0].category == "dataloader"
    assert "num_workers=0" in advice[0].fix


def test_thousands_of_tiny_ops_put_small_ops_first(tmp_path):
    x = torch.randn(16)

    def step():
        y = x
        for _ in range(1500):
            y = y * 1.0001 + 0.0001
        return y

    summary = _profile(tmp_path, step)
    advice = npumagic.advise(summary)
    # what the run's structure decides, not its speed: 3000 tiny operators a step (their typical
    # call a few us however busy the host), named first among the findings that a busy host
    # cannot make up (its time slices read as host idle and as jitter)
    found = next(f for f in advice if f.category == "small_ops")
    assert found.evidence["tiny_per_step"] >= 3000
    assert "operators per step" in found.title and "device time" not in found.title  # a CPU run has no device
    assert [f.category for f in advice if f.category not in ("host_bound", "jitter")][0] == "small_ops"
    # and fusing them is predicted to remove at most the loop that makes them, from its first operator to its
    # last (its Python and garbage collection with it), not only the operators and the short gaps between
    from npumagic.analysis.gaps import short_runs_ms

    assert found.predicted_interval[1] >= short_runs_ms(summary.events, len(summary.steps)) > 0


def test_tiny_operators_stretched_by_a_busy_host_are_still_tiny():
    # GIVEN 4 steps of 1000 operators of 3 us each, one call a step stretched to 20 ms (a time
    # slice of another process landing inside it): their mean is 23 us, their median 3 us
    ms, us = 1_000_000, 1_000
    starts, durs, steps = [], [], []
    for k in range(4):
        t = k * 30 * ms
        steps.append((k + 1, t, t + 30 * ms))
        for i in range(1000):
            d = 20 * ms if i == 500 else 3 * us
            starts.append(t)
            durs.append(d)
            t += d + us
    events = pd.DataFrame({"name": "aten::mul", "kind": "host_op", "ts_ns": starts, "dur_ns": durs,
                           "lane": "Host/Thread 1", "device": -1, "rank": 0, "type": "aten::mul", "core": "cpu"})
    table = pd.DataFrame(steps, columns=["step", "start_ns", "end_ns"]).assign(rank=0)
    summary = npumagic.summarize(schema.finish(events, table, meta={"backend": "cpu"}))
    assert summary.kernels["mean_us"].iat[0] > 20 and summary.kernels["median_us"].iat[0] == 3
    # WHEN advised THEN they are the small operators they are: 1000 a step, by their typical call
    found = [f for f in npumagic.advise(summary) if f.category == "small_ops"]
    assert found and found[0].evidence["tiny_per_step"] == 1000


def test_a_matmul_heavy_loop_raises_no_host_bound_alarm(tmp_path):
    a, b = torch.randn(384, 384), torch.randn(384, 384)
    summary = _profile(tmp_path, lambda: [a @ b for _ in range(4)])
    advice = npumagic.advise(summary)
    assert all(f.category != "host_bound" for f in advice)
    assert npumagic.checklist(summary).bottleneck in ("compute_bound", "balanced", "jitter")


def _summary_with_steps(walls_ms: list[float]) -> npumagic.Summary:
    ms = 1_000_000
    starts = np.cumsum([0] + [int(w * ms) for w in walls_ms[:-1]])
    steps = pd.DataFrame({"rank": 0, "step": range(1, len(walls_ms) + 1), "start_ns": starts,
                          "end_ns": starts + np.array([int(w * ms) for w in walls_ms])})
    events = pd.DataFrame({"name": "aten::mm", "kind": "host_op", "ts_ns": starts, "dur_ns": (np.array(walls_ms) * ms * 0.9).astype(int),
                           "lane": "Host/Thread 1", "device": -1, "rank": 0, "type": "aten::mm", "core": "cpu"})
    return npumagic.summarize(schema.finish(events, steps, meta={"backend": "cpu"}))


def test_jitter_names_the_outlier_steps():
    advice = npumagic.advise(_summary_with_steps([10, 10.2, 9.9, 10.1, 18]))
    jitter = next(f for f in advice if f.category == "jitter")
    assert jitter.evidence["outlier_steps"] == [5]
    assert "slow steps: 5" in jitter.title


def test_checklist_verifies_against_a_baseline():
    base = _summary_with_steps([20, 20.1, 19.9, 20.2, 20.0])
    fast = _summary_with_steps([10, 10.1, 9.9, 10.2, 10.0])
    verdict = npumagic.checklist(fast, baseline=base, run_name="fast")
    assert verdict.steps[3][0] == "Verify"
    assert "this run is 2.0x faster than baseline" in verdict.steps[3][1]
    assert "recorded as fast" in verdict.steps[4][1]
