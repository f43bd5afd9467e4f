"""A genuine trace from an NVIDIA H200 (torch 2.11.0+cu130, CUDA 13.0), recorded by
``bench/device_check.py``'s first part on a lent GPU machine: four profiled steps of a 7-layer MLP
whose batch is copied from pageable host memory and whose loss is read with ``.item()`` each step,
trained with AdamW. The figures are checked against the trace itself and against HolisticTraceAnalysis."""

from __future__ import annotations

import gzip
import json
import logging
import warnings
from pathlib import Path

import pytest

import npumagic

RUN = Path(__file__).resolve().parents[1] / "data" / "h200_item_pageable"


@pytest.fixture(scope="module")
def summary():
    return npumagic.analyze(RUN)


@pytest.fixture(scope="module")
def raw_events():
    """The trace's complete events, read with nothing but json: the independent count."""
    (path,) = RUN.glob("*.pt.trace.json.gz")
    with gzip.open(path, "rt") as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]


def _in_steps(events, name: str) -> int:
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in events if e["name"].startswith("ProfilerStep#")]
    return sum(1 for e in events if e["name"] == name and any(a <= e["ts"] < b for a, b in steps))


def test_the_h200_run_is_read_as_a_cuda_run_of_four_steps(summary):
    assert (summary.meta["backend"], summary.meta["device_name"]) == ("cuda", "NVIDIA H200")
    assert summary.steps["step"].tolist() == [2, 3, 4, 5]
    assert (summary.steps["computing_us"] <= summary.steps["busy_us"]).all()
    assert (summary.steps["busy_us"] <= summary.steps["wall_us"]).all()


def test_its_syncs_are_counted_as_the_trace_holds_them(summary, raw_events):
    # AdamW reads its per-parameter step counts with .item() (CPU tensors: no device sync), beside
    # the loss's one; the device waits are the cudaStreamSynchronize calls
    per_step = summary.syncs.set_index("name")["per_step"]
    assert per_step["aten::item"] == _in_steps(raw_events, "aten::item") / 4 == 29
    assert per_step["cudaStreamSynchronize"] == _in_steps(raw_events, "cudaStreamSynchronize") / 4 == 3


def test_its_pageable_copies_are_found_and_the_fix_pins_memory(summary, raw_events):
    (finding,) = [f for f in npumagic.advise(summary).findings if f.rule == "pageable_memcpy"]
    assert finding.evidence["pageable_copies"] == _in_steps(raw_events, "Memcpy HtoD (Pageable -> Device)") == 8
    assert "pin_memory" in finding.fix


def test_its_temporal_breakdown_is_holistic_trace_analysis_own(summary):
    # HTA 0.5.0 on this trace: idle 83.6%, compute 15.83%, non-compute 0.56% of 11,349 us
    t = summary.temporal.iloc[0]
    assert t["window_us"] == pytest.approx(11_349)
    assert (t["idle_pct"], t["compute_pct"], t["non_compute_pct"]) == (
        pytest.approx(83.6, abs=0.1), pytest.approx(15.83, abs=0.1), pytest.approx(0.56, abs=0.1))


@pytest.mark.slow  # HTA takes seconds
def test_hta_itself_agrees_within_a_tenth_of_a_point(summary, tmp_path):
    hta = pytest.importorskip("hta.trace_analysis", reason="need HolisticTraceAnalysis (the extra npumagic[peers]) — "
                                                           "pip install -e '.[peers]'")
    logging.getLogger("hta").setLevel(logging.ERROR)
    (path,) = RUN.glob("*.pt.trace.json.gz")
    (tmp_path / path.name).symlink_to(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = hta.TraceAnalysis(trace_dir=str(tmp_path)).get_temporal_breakdown(visualize=False).iloc[0]
    ours = summary.temporal.iloc[0]
    assert ours["idle_pct"] == pytest.approx(theirs["idle_time_pctg"], abs=0.1)
    assert ours["compute_pct"] == pytest.approx(theirs["compute_time_pctg"], abs=0.1)
    assert ours["window_us"] == pytest.approx(theirs["kernel_time(us)"], rel=0.001)
