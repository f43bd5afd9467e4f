"""Hardware counters: the counters table from the text export, the db export and Kineto, and the
per-step figures, checked against the raw samples recomputed here independently."""

from __future__ import annotations

import json
import sqlite3

import numpy as np
import pandas as pd
import pytest

import npumagic
from npumagic.analysis import schema
from npumagic.analysis.advice import advise
from npumagic.analysis.counters import FREQ_DROP_DESCRIPTION, frequency_drops, hardware_table
from npumagic.analysis.sources._db_counters import db_counters

from ..conftest import ASCEND, ASCEND_RANKS, need, shared_summary, shared_trace

MIB = 2.0**20


def _interval_mean(samples: list[tuple[int, float]], lo: int, hi: int) -> float:
    """Plain-loop reference: sample i is the mean rate over (t[i-1], t[i]]."""
    samples = sorted(samples)
    area = covered = 0.0
    for (t0, _), (t1, value) in zip(samples, samples[1:]):
        overlap = max(0, min(t1, hi) - max(t0, lo))
        area += value * overlap
        covered += overlap
    return area / covered


def _raw_counters(rank_dir, process: str) -> list[dict]:
    data = json.loads((rank_dir / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").read_text())
    events = data if isinstance(data, list) else data["traceEvents"]
    pids = {e["pid"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"
            and e["args"]["name"] == process}
    return [e for e in events if e.get("ph") == "C" and e["pid"] in pids]


@pytest.fixture(scope="module")
def level1_rank0():
    rank_dir = need(ASCEND / "level1" / "rank0_ascend_pt")
    return rank_dir, npumagic.analyze(rank_dir)


def test_hbm_bandwidth_per_step_is_the_mean_of_the_raw_hbm_counters(level1_rank0):
    # GIVEN the raw HBM counter events of trace_view.json (MB/s of 2**20 bytes, one series per channel)
    rank_dir, summary = level1_rank0
    raw = _raw_counters(rank_dir, "HBM")
    by_ts: dict[int, float] = {}
    for e in raw:
        ts = int(round(float(e["ts"]) * 1000))
        by_ts[ts] = by_ts.get(ts, 0.0) + float(next(iter(e["args"].values()))) * MIB
    step = summary.steps.iloc[0]
    spans = npumagic.load(rank_dir).steps
    lo, hi = int(spans["start_ns"].iat[0]), int(spans["end_ns"].iat[0])
    # WHEN recomputed with a plain loop over the step window
    expected = _interval_mean(list(by_ts.items()), lo, hi) / 2**30
    # THEN npumagic's per-step figure agrees within 1%
    got = summary.hardware.set_index("step").loc[step["step"], "hbm_gbps"]
    assert got == pytest.approx(expected, rel=0.01)
    assert 1 < got < 1000  # GB/s, not MB/s or B/s
    reads = [s for s in raw if s["name"].endswith("/Read")]
    assert summary.hardware["hbm_read_gbps"].iat[0] < got
    assert len(reads) == len(raw) / 2
    # and the read and the write channels each agree with the same loop over their own samples
    for direction in ("Read", "Write"):
        part: dict[int, float] = {}
        for e in raw:
            if e["name"].endswith(f"/{direction}"):
                ts = int(round(float(e["ts"]) * 1000))
                part[ts] = part.get(ts, 0.0) + float(next(iter(e["args"].values()))) * MIB
        figure = summary.hardware.set_index("step").loc[step["step"], f"hbm_{direction.lower()}_gbps"]
        assert figure == pytest.approx(_interval_mean(list(part.items()), lo, hi) / 2**30, rel=0.01), direction


def test_hbm_bandwidth_per_step_on_the_db_export_matches_its_hbm_table():
    rank_dir = need(ASCEND / "db" / "level1" / "rank0_ascend_pt")
    db = next((rank_dir / "ASCEND_PROFILER_OUTPUT").glob("ascend_pytorch_profiler*.db"))
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    rows = con.execute("SELECT timestampNs, SUM(bandwidth) FROM HBM GROUP BY timestampNs").fetchall()
    step_id, lo, hi = con.execute("SELECT id, startNs, endNs FROM STEP_TIME").fetchone()
    expected = _interval_mean([(int(t), float(v)) for t, v in rows], lo, hi) / 2**30
    summary = npumagic.analyze(rank_dir)  # through the db reader
    got = summary.hardware.set_index("step")
    assert got.loc[step_id, "hbm_gbps"] == pytest.approx(expected, rel=0.01)
    assert got.loc[step_id, "aicore_freq_mhz"] == 1800


def test_db_and_text_exports_name_and_scale_counters_alike():
    rank_dir = need(ASCEND / "db" / "level1" / "rank0_ascend_pt")
    db = next((rank_dir / "ASCEND_PROFILER_OUTPUT").glob("ascend_pytorch_profiler*.db"))
    from_db = db_counters(sqlite3.connect(f"file:{db}?mode=ro", uri=True), 0)
    from_text = shared_trace(ASCEND / "level1" / "rank0_ascend_pt").counters
    for frame in (from_db, from_text):
        names = set(frame["name"].astype(str))
        assert {"HBM 0/Read", "HBM 3/Write", "LLC 0 Read/Hit Rate", "LLC 1 Read/Throughput", "AI Core Freq",
                "APP/HBM", "L2 Buffer Bw Level"} <= names
        hits = frame[frame["name"].astype(str).str.endswith("Hit Rate")]["value"]
        assert hits.between(0, 1).all() and hits.max() > 0.5  # ratios, whether written 0.875 or 85.9
        assert list(frame.columns) == list(schema.COUNTER_COLUMNS)


@pytest.mark.parametrize("rank_dir", ASCEND_RANKS, ids=lambda p: f"{p.parent.name}-{p.name}")
def test_every_text_export_has_hbm_llc_and_frequency_per_step(rank_dir):
    summary = shared_summary(rank_dir)
    hw = summary.hardware
    assert len(hw) == len(summary.steps)
    assert hw[["hbm_gbps", "llc_hit_rate", "aicore_freq_mhz"]].notna().all().all()
    assert (hw["hbm_peak_gbps"] >= hw["hbm_gbps"]).all()
    assert hw["hbm_util"].isna().all()  # no device peak is known for these chips: no share invented


def test_l2_rates_per_op_type_follow_l2_cache_csv(level1_rank0):
    rank_dir, summary = level1_rank0
    out = rank_dir / "ASCEND_PROFILER_OUTPUT"
    l2 = pd.read_csv(out / "l2_cache.csv")
    kernels = pd.read_csv(out / "kernel_details.csv")
    joined = l2.merge(kernels, left_on=["Stream Id", "Task Id"], right_on=["Stream ID", "Task ID"])
    expected = joined.groupby("Type")["Victim Rate"].agg(["size", "mean"])
    got = summary.l2.set_index("type")
    assert got["count"].sum() == len(l2)
    for op_type, row in expected.iterrows():
        assert got.loc[op_type, "count"] == row["size"]
        assert got.loc[op_type, "victim_rate"] == pytest.approx(row["mean"])
    assert got["hit_rate"].isna().all()  # this job's l2_cache.csv writes "N/A" hit rates


def _counter(name, group, unit, ts, values, device=0):
    return pd.DataFrame({"rank": 0, "device": device, "group": group, "name": name, "unit": unit, "ts_ns": ts,
                         "value": values})


def test_frequency_is_a_level_and_a_drop_of_5_percent_is_found_in_msprof_wording():
    # GIVEN the AI Core running at 1800 MHz, then 1600 MHz from 1 ms to 3 ms
    freq = _counter("AI Core Freq", "AI Core Freq", "MHz", [0, 1_000_000, 3_000_000], [1800.0, 1600.0, 1800.0])
    kernels = pd.DataFrame({"name": ["MatMul_1", "MatMul_1", "Add_2"], "ts_ns": [1_500_000, 200_000, 3_500_000],
                            "dur_ns": [100_000, 100_000, 100_000], "type": ["MatMul", "MatMul", "Add"]})
    steps = pd.DataFrame({"step": [1, 2], "start_ns": [0, 2_000_000], "end_ns": [2_000_000, 4_000_000]})
    # WHEN
    hw = hardware_table(freq, steps)
    drops = frequency_drops(freq, kernels)
    # THEN the step means are time-weighted (1800 for 1 ms, 1600 for 1 ms) and the minimum is seen
    assert hw["aicore_freq_mhz"].tolist() == pytest.approx([1700.0, 1700.0])
    assert hw["aicore_freq_min_mhz"].tolist() == [1600.0, 1600.0]
    # MatMul_1 ran once at 1600 and once at 1800: (200 + 0) / (1800 x 2) = 5.6% >= 5%; Add_2 at full speed
    assert drops["name"].tolist() == ["MatMul_1"]
    assert drops["drop_ratio"].iat[0] == pytest.approx(200 / 3600)


def test_a_throttled_run_gets_msprofs_frequency_finding(level1_rank0):
    import dataclasses

    _, summary = level1_rank0
    assert not [f for f in advise(summary) if "Frequency" in f.title]  # the shared job ran at 1800 MHz
    throttled = dataclasses.replace(summary, frequency_drops=pd.DataFrame(
        {"name": ["Conv2D1"], "count": [2], "total_us": [900.0], "drop_ratio": [0.2], "mean_mhz": [1440.0],
         "max_mhz": [1440.0], "min_mhz": [1440.0]}))
    found = [f for f in advise(throttled) if "Frequency" in f.title]
    assert len(found) == 1
    assert FREQ_DROP_DESCRIPTION.format(1, 0.05) in found[0].title
    assert "temperature or max power" in found[0].fix
    assert "Conv2D1" in found[0].where


def test_interval_counters_hold_back_to_the_previous_sample():
    # samples at 0, 10, 20 ms: 0 (opens the series), 100 over (0, 10], 300 over (10, 20]
    hbm = _counter("HBM 0/Read", "HBM", "B/s", [0, 10_000_000, 20_000_000], [0.0, 100.0 * 2**30, 300.0 * 2**30])
    steps = pd.DataFrame({"step": [1, 2, 3], "start_ns": [0, 5_000_000, 15_000_000],
                          "end_ns": [10_000_000, 15_000_000, 30_000_000]})
    hw = hardware_table(hbm, steps)
    assert hw["hbm_gbps"].tolist() == pytest.approx([100.0, 200.0, 300.0])  # the last: only the covered 5 ms
    assert hw["hbm_peak_gbps"].tolist() == pytest.approx([100.0, 300.0, 300.0])


def test_kineto_counter_events_become_counters(tmp_path):
    trace = {"traceEvents": [
        {"ph": "M", "name": "process_name", "pid": 7, "tid": 0, "args": {"name": "GPU 0 counters"}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 100.0, "dur": 10.0},
        {"ph": "C", "name": "Power", "pid": 7, "tid": 0, "ts": 100.0, "args": {"Watts": 250}},
        {"ph": "C", "name": "Mem", "pid": 7, "tid": 0, "ts": 105.5, "args": {"used (MB)": 3, "free (MB)": 1}},
    ]}
    path = tmp_path / "t.pt.trace.json"
    path.write_text(json.dumps(trace))
    counters = npumagic.load(path).counters
    assert counters[["group", "name", "unit", "ts_ns", "value"]].astype(str).values.tolist() == [
        ["GPU 0 counters", "Mem/free", "B", "105500", str(1.0 * MIB)],
        ["GPU 0 counters", "Mem/used", "B", "105500", str(3.0 * MIB)],
        ["GPU 0 counters", "Power", "", "100000", "250.0"],  # a bare arg name is not taken for a unit
    ]


def test_a_trace_without_counters_has_an_empty_table_and_no_hardware_rows():
    trace = shared_trace(ASCEND.parent / "cuda" / "nccl")
    summary = shared_summary(ASCEND.parent / "cuda" / "nccl")
    assert trace.counters.empty and summary.hardware.empty
    assert np.array_equal(summary.hardware.columns, hardware_table(trace.counters, trace.steps).columns)
