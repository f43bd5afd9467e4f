"""The memory view on real data, against figures taken independently: torch_npu's memory CSVs
read with the csv module (the peak is memory_record.csv's maximum for PTA, per-operator bytes the
sums over operator_memory.csv, component peaks npu_module_mem.csv's), the ``[memory]`` events of
Kineto traces read with json; and a real CPU training loop that keeps each step's loss with its
graph is found growing, naming the operators, while the same loop without the list is not."""

from __future__ import annotations

import csv
import gzip
import json
from collections import defaultdict
from pathlib import Path

import pytest

from npumagic.analysis.memory_view import memory_view
from npumagic.analysis.sources.memory import read_memory

from ..conftest import ASCEND, CUDA, need

RANKS = [ASCEND / level / "rank0_ascend_pt" for level in ("level0", "level1", "level2")]
KINETO = [CUDA / "tracelens" / name for name in ("h100_owlv2", "h100_qwen", "mi300_bert")]
MB, KB = 2.0**20, 1024.0


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8-sig") as fh:
        return [{k: v.strip() for k, v in row.items()} for row in csv.DictReader(fh)]


@pytest.mark.parametrize("rank", RANKS, ids=lambda p: p.parent.name)
def test_the_peak_is_memory_records_maximum_for_pta(rank):
    rows = _rows(need(rank) / "ASCEND_PROFILER_OUTPUT" / "memory_record.csv")
    pta = [r for r in rows if r["Component"] == "PTA"]
    view = memory_view(read_memory(rank))
    assert view.pool == "PTA" and view.device == pta[0]["Device Type"]
    assert view.peak_allocated_bytes == max(float(r["Total Allocated(MB)"]) for r in pta) * MB
    assert view.peak_reserved_bytes == max(float(r["Total Reserved(MB)"]) for r in pta) * MB
    assert view.components["APP"] == max(float(r["Total Reserved(MB)"]) for r in rows if r["Component"] == "APP") * MB


@pytest.mark.parametrize("rank", RANKS, ids=lambda p: p.parent.name)
def test_per_operator_bytes_are_the_sums_over_operator_memory(rank):
    sums, counts = defaultdict(float), defaultdict(int)
    for r in _rows(need(rank) / "ASCEND_PROFILER_OUTPUT" / "operator_memory.csv"):
        sums[r["Name"]] += float(r["Size(KB)"]) * KB
        counts[r["Name"]] += 1
    table = memory_view(read_memory(rank)).operators.set_index("name")
    assert dict(table["bytes"]) == pytest.approx(dict(sums))
    assert dict(table["allocations"]) == dict(counts)


@pytest.mark.parametrize("rank", RANKS, ids=lambda p: p.parent.name)
def test_component_peaks_are_npu_module_mems(rank):
    peaks = defaultdict(float)
    for r in _rows(need(rank) / "ASCEND_PROFILER_OUTPUT" / "npu_module_mem.csv"):
        peaks[r["Component"]] = max(peaks[r["Component"]], float(r["Total Reserved(MB)"]) * MB)
    components = memory_view(read_memory(rank)).components
    assert components["HCCL"] == peaks["HCCL"] > 0 and components["RUNTIME"] == peaks["RUNTIME"] > 0
    assert not any(name in components for name, peak in peaks.items() if peak == 0)  # zero modules left out


def test_memory_beyond_the_pool_is_app_minus_pta_reserved_then():
    rank = need(ASCEND / "level1" / "rank0_ascend_pt")
    view = memory_view(read_memory(rank))
    # by hand from memory_record.csv: APP's peak 2113.73046875 MB (first at ..3813934.920 us); PTA's last
    # reserved before it 1452.0 MB
    assert view.beyond_pool_bytes == pytest.approx((2113.73046875 - 1452.0) * MB)


def test_static_graph_memory_is_static_op_mems_sum():
    rank = need(ASCEND / "partial" / "job2" / "rank1_ascend_pt")
    rows = _rows(rank / "ASCEND_PROFILER_OUTPUT" / "static_op_mem.csv")
    assert memory_view(read_memory(rank)).static_bytes == pytest.approx(sum(float(r["Size(KB)"]) * KB for r in rows))


def _memory_events(folder: Path) -> list[dict]:
    trace = json.load(gzip.open(next(folder.glob("*.json.gz"))))
    return [e["args"] for e in trace["traceEvents"] if e.get("name") == "[memory]"]


@pytest.mark.parametrize("folder", KINETO, ids=lambda p: p.name)
def test_the_kineto_peak_is_the_largest_total_allocated_of_the_device(folder):
    events = [a for a in _memory_events(need(folder)) if a["Device Type"] != 0]
    view = memory_view(read_memory(folder))
    assert view.device == f"cuda:{events[0]['Device Id']}"
    assert view.peak_allocated_bytes == max(a["Total Allocated"] for a in events)
    assert view.peak_reserved_bytes == max(a["Total Reserved"] for a in events)
    at_peak = max(events, key=lambda a: a["Total Allocated"])  # the first event at the maximum
    assert view.unused_reserved_at_peak_bytes == at_peak["Total Reserved"] - at_peak["Total Allocated"]
    # every allocation of the device is one block, its bytes the events' positive Bytes
    assert view.operators["allocations"].sum() == sum(a["Bytes"] > 0 for a in events)
    assert view.operators["bytes"].sum() == sum(a["Bytes"] for a in events if a["Bytes"] > 0)


def test_the_live_blocks_at_the_peak_are_held_by_the_operators_that_allocated_them():
    view = memory_view(read_memory(need(CUDA / "tracelens" / "mi300_bert")))
    assert view.peak_operator == "aten::addmm"
    # live at the peak: at most the peak (blocks from before the capture are not known)
    assert 0 < view.holders["bytes"].sum() <= view.peak_allocated_bytes
    assert view.holders["operator"].iloc[0] == "aten::addmm"


def test_churn_counts_blocks_of_a_mib_or_more_freed_within_their_step():
    view = memory_view(read_memory(need(CUDA / "tracelens" / "mi300_bert")))
    step = view.steps.iloc[0]
    assert view.churn_count == step["churn_count"] > 0 and view.churn_bytes == step["churn_bytes"]
    assert view.churn_bytes / view.churn_count >= 2**20
    assert view.churn_operators["operator"].iloc[0] == "aten::addmm"


def test_a_trace_without_totals_or_addresses_is_summed_and_said():
    folder = need(CUDA / "kineto_cycles" / "tb_test_nw0_folder")
    records = read_memory(folder)
    assert any("no Total Allocated" in n for n in records.notes) and any("no address" in n for n in records.notes)
    view = memory_view(records)
    first = sorted(folder.glob("*.json.gz"))[0]
    device = [e["args"]["Bytes"] for e in json.load(gzip.open(first))["traceEvents"]
              if e.get("name") == "[memory]" and e["args"]["Device Type"] != 0]
    running, peak = 0, 0
    for b in device:
        running += b
        peak = max(peak, running)
    assert view.peak_allocated_bytes == peak and view.operators.empty and not view.paired  # churn: not known


def test_negative_and_absurd_sizes_are_skipped_and_counted(tmp_path):
    source = need(ASCEND / "level1" / "rank0_ascend_pt")
    out = tmp_path / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    lines = (source / "ASCEND_PROFILER_OUTPUT" / "operator_memory.csv").read_text().splitlines()
    head, *rows = lines
    bad = [rows[0].replace(rows[0].split(",")[1], "-5", 1), rows[1].replace(rows[1].split(",")[1], "1e15", 1)]
    (out / "operator_memory.csv").write_text("\n".join([head, *bad, *rows[2:]]) + "\n")
    records = read_memory(tmp_path / "rank0_ascend_pt")
    assert len(records.blocks) == len(rows) - 2
    said = " ".join(records.notes)
    assert "2 of" in said and "negative Size" in said and "absurd Size" in said


def _train(out: Path, keep_losses: bool, steps: int = 6) -> Path:
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(128, 256), torch.randn(128, 1)
    losses = []
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, schedule=schedule(wait=1, warmup=1, active=steps),
                 on_trace_ready=lambda p: p.export_chrome_trace(str(out))) as prof:
        for _ in range(steps + 2):
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward(retain_graph=keep_losses)  # kept with its graph: what the loss saved stays
            opt.step()
            if keep_losses:
                losses.append(loss)
            prof.step()
    return out


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("memory_runs")
    return {keep: memory_view(read_memory(_train(folder / f"keep_{keep}.json", keep))) for keep in (True, False)}


def test_a_loop_keeping_its_losses_grows_naming_the_operators(trained):
    growth = trained[True].growth
    assert growth.growing and growth.steps_fitted == 5
    # each step keeps the ReLU output the graph saved: 128 x 512 float32
    assert growth.bytes_per_step >= 128 * 512 * 4
    assert growth.operators["operator"].iloc[0] == "aten::clamp_min"
    assert "GROWING" in growth.sentence() and "aten::clamp_min" in growth.sentence()


def test_the_same_loop_without_the_list_does_not_grow(trained):
    growth = trained[False].growth
    assert not growth.growing and growth.steps_fitted == 5 and growth.operators.empty
    assert growth.bytes_per_step == pytest.approx(0, abs=1.0)


def _records(step_ends: list[float]):
    """Records of a made-up run: the pool empty at each step's start, at ``step_ends`` at its end."""
    import pandas as pd

    from npumagic.analysis.sources.memory import MemoryRecords

    n = len(step_ends)
    steps = pd.DataFrame({"step": range(n), "start_ns": [i * 100 for i in range(n)],
                          "end_ns": [i * 100 + 99 for i in range(n)]})
    totals = pd.DataFrame({"component": "PyTorch", "device": "cuda:0",
                           "ts_ns": [*steps["start_ns"], *steps["end_ns"]], "allocated_bytes": [0.0] * n + list(step_ends),
                           "reserved_bytes": max(step_ends)}).sort_values("ts_ns")
    blocks = pd.DataFrame(columns=["device", "operator", "module", "bytes", "alloc_ns", "free_ns"])
    return MemoryRecords("kineto", Path("made-up"), totals, blocks, steps)


@pytest.mark.parametrize("ends, growing", [
    ([0, 5e6, 5e6 + 1e5, 5e6, 5e6 + 2e5, 5e6 + 1e5, 5e6], False),  # noise around a level: interval holds 0
    ([0] + [5e6 + 1024 * i for i in range(6)], False),  # a steady KiB a step: under the floor
    ([0] + [5e6 + 2**20 * i for i in range(6)], True),  # a steady MiB a step
    ([9e9] + [5e6 + 2**20 * i for i in range(6)], True),  # the first step left out of the fit
])
def test_growth_needs_a_slope_beyond_noise_and_the_floor(ends, growing):
    growth = memory_view(_records(ends)).growth
    assert growth.growing is growing and growth.steps_fitted == len(ends) - 1


@pytest.mark.parametrize("b_peaks, verdict", [
    ([100e6 + 2**20] * 5, "same"),  # 1 MiB on 100 MB: under the floor (1% of A's peak)
    ([110e6, 90e6, 130e6, 80e6, 140e6], "same"),  # 10 MB higher on average, but the steps spread wider
    ([110e6] * 5, "higher"),
    ([50e6] * 5, "lower"),
])
def test_a_memory_change_must_pass_the_noise_and_the_floor(b_peaks, verdict):
    from npumagic.analysis.memory_compare import compare_memory

    a, b = memory_view(_records([100e6] * 5)), memory_view(_records(b_peaks))
    assert compare_memory(a, b).verdict == verdict


def test_the_db_export_gives_its_own_tables_figures():
    import sqlite3

    rank = need(ASCEND / "db" / "level1" / "rank0_ascend_pt")
    db = next((rank / "ASCEND_PROFILER_OUTPUT").glob("ascend_pytorch_profiler*.db"))
    conn = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)
    q = lambda sql: conn.execute(sql).fetchall()  # noqa: E731
    (pta_peak,), = q("SELECT max(totalAllocated) FROM MEMORY_RECORD m JOIN STRING_IDS s ON s.id = m.component "
                     "WHERE s.value = 'PTA'")
    sums = dict(q("SELECT s.value, sum(size) FROM OP_MEMORY o JOIN STRING_IDS s ON s.id = o.name GROUP BY s.value"))
    (hccl,), = q("SELECT max(totalReserved) FROM NPU_MODULE_MEM m JOIN ENUM_MODULE e ON e.id = m.moduleId "
                 "WHERE e.name = 'HCCL'")
    conn.close()
    view = memory_view(read_memory(rank))
    assert view.source == "torch_npu db" and view.peak_allocated_bytes == pta_peak
    assert dict(view.operators.set_index("name")["bytes"]) == pytest.approx(sums)
    assert view.components["HCCL"] == hccl > 0 and list(view.steps["step"]) == [50]


def test_blocks_live_at_the_peak_are_named_by_the_nn_module_allocating_them():
    folder = need(CUDA / "tracelens" / "h100_owlv2")
    trace = json.load(gzip.open(next(folder.glob("*.json.gz"))))["traceEvents"]
    device = [e for e in trace if e.get("name") == "[memory]" and e["args"]["Device Type"] != 0]
    peak = max(device, key=lambda e: e["args"]["Total Allocated"])
    # the largest block allocated by then and not freed by the peak: its allocation, by hand
    last = {}  # each address's last event by the peak: an allocation is a live block
    for e in device:
        if e["ts"] <= peak["ts"]:
            last[e["args"]["Addr"]] = e
    biggest = max((e for e in last.values() if e["args"]["Bytes"] > 0), key=lambda e: (e["args"]["Bytes"], e["ts"]))
    around = [e for e in trace if e.get("cat") == "python_function" and e["name"].startswith("nn.Module: ")
              and e["ts"] <= biggest["ts"] <= e["ts"] + e["dur"]]
    innermost = max(around, key=lambda e: e["ts"])["name"].removeprefix("nn.Module: ")
    view = memory_view(read_memory(folder))
    assert view.module_holders["module"].iloc[0] == innermost == "Owlv2Attention_1"
    assert view.module_holders["bytes"].sum() == view.holders["bytes"].sum()  # the same live blocks


def test_unused_reserved_is_taken_when_allocated_peaks_not_at_the_reserved_maximum():
    # every shared sample keeps reserved constant; here the cache grows after the peak
    records = _records([10 * MB, 50 * MB, 20 * MB])
    records.totals["reserved_bytes"] = [64 * MB if ts < 200 else 128 * MB for ts in records.totals["ts_ns"]]
    view = memory_view(records)
    assert view.peak_allocated_bytes == 50 * MB and view.peak_reserved_bytes == 128 * MB
    assert view.unused_reserved_at_peak_bytes == 14 * MB


def _damage(path: Path, column: str, values: list[str], component: str) -> None:
    """``values`` written into ``column`` of the first rows of ``component``, the rest as it was."""
    with path.open(newline="") as fh:
        lines = fh.read().split("\n")
    head = lines[0].rstrip("\r").split(",")
    at, hit = head.index(column), 0
    for i, line in enumerate(lines[1:], 1):
        cells = line.split(",")
        if hit < len(values) and len(cells) == len(head) and cells[0] == component:
            cells[at], hit = values[hit], hit + 1
            lines[i] = ",".join(cells)
    with path.open("w", newline="") as fh:
        fh.write("\n".join(lines))


def test_damaged_memory_csvs_have_their_rows_skipped_and_counted_in_a_warning_naming_the_file(tmp_path):
    import shutil
    import warnings

    import npumagic

    rank = tmp_path / "rank0_ascend_pt"
    shutil.copytree(need(ASCEND / "level1" / "rank0_ascend_pt"), rank)
    out = rank / "ASCEND_PROFILER_OUTPUT"
    # a negative PTA total, one of a billion TB, and a negative HCCL reservation
    _damage(out / "memory_record.csv", "Total Allocated(MB)", ["-5", "1e12"], "PTA")
    _damage(out / "npu_module_mem.csv", "Total Reserved(MB)", ["-1"], "HCCL")
    pta = [r for r in _rows(out / "memory_record.csv") if r["Component"] == "PTA"]
    good = [float(r["Total Allocated(MB)"]) * MB for r in pta if 0 <= float(r["Total Allocated(MB)"]) < 1e9]
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        view = memory_view(read_memory(rank))
    text = " ".join(str(w.message) for w in said)
    assert f"{out / 'memory_record.csv'}: 2 of" in text and "1 negative Total Allocated" in text \
        and "1 absurd Total Allocated" in text
    assert f"{out / 'npu_module_mem.csv'}: 1 of" in text and "1 negative Total Reserved" in text
    assert view.peak_allocated_bytes == max(good)
    # the Summary's reader of memory_record.csv skips and says them too
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        summary = npumagic.analyze(rank)
    text = " ".join(str(w.message) for w in said)
    assert f"{out / 'memory_record.csv'}: 2 of" in text and "1 absurd Total Allocated" in text
    assert summary.memory["peak_allocated_bytes"].max() == max(good)
    assert summary.meta["bad_rows"][str(out / "memory_record.csv")] == {"negative Total Allocated": 1,
                                                                    "absurd Total Allocated": 1}
