"""Memory findings (rules/memory.py) and memory in comparisons, on real data: the figures against
torch_npu's memory_record.csv read with csv, Kineto's ``[memory]`` events read with json, and real
CPU training loops profiled with profile_memory (one keeping each step's loss with its graph)."""

from __future__ import annotations

import csv
import dataclasses
import gzip
import json
from decimal import Decimal
from pathlib import Path

import pytest

import npumagic
from npumagic.analysis.compare import compare
from npumagic.analysis.advice import advise
from npumagic.analysis.memory_summary import memory_view_of
from npumagic.jsonout import comparison_doc
from npumagic.render.text import comparison_text

from ..conftest import ASCEND, CUDA, need
from .test_memory_view import _train

MB = 2.0**20


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8-sig") as fh:
        return [{k: v.strip() for k, v in row.items()} for row in csv.DictReader(fh)]


def _memory_findings(summary) -> dict[str, object]:
    return {f.rule: f for f in advise(summary) if f.rule.startswith(("memory", "fragmentation"))}


@pytest.fixture(scope="module")
def cpu_runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("memory_findings")
    return {keep: npumagic.analyze(_train(folder / f"keep_{keep}.json", keep)) for keep in (True, False)}


def test_the_memory_samples_line_up_with_the_steps_on_one_clock():
    # GIVEN level1's Summary, its memory view rebuilt from the Summary alone (samples + step windows)
    summary = npumagic.analyze(need(ASCEND / "level1"))
    view = memory_view_of(dataclasses.replace(summary, meta={**summary.meta, "path": ""}))
    # THEN the step's end allocated is memory_record.csv's last PTA row by the step's end, and its
    # peak the PTA maximum inside it: the windows and the samples share the trace's clock
    (step, start, end), = summary.meta["step_windows_ns"]
    pta = [r for r in _rows(ASCEND / "level1" / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "memory_record.csv")
           if r["Component"] == "PTA"]
    ns = lambda r: int(Decimal(r["Timestamp(us)"]) * 1000)  # noqa: E731
    by_end = [r for r in pta if ns(r) <= end]
    inside = [float(r["Total Allocated(MB)"]) * MB for r in pta if start <= ns(r) <= end]
    row = view.steps.iloc[0]
    assert view.source == "summary" and row["step"] == step
    assert row["end_allocated_bytes"] == float(by_end[-1]["Total Allocated(MB)"]) * MB
    assert row["peak_allocated_bytes"] == max(inside)
    # .steps' start_us is relative to the first step: it is 0 here, the samples' clock is not
    assert summary.steps["start_us"].iloc[0] == 0 and start > 10**18


def test_a_loop_keeping_its_losses_gets_a_leak_finding_naming_the_operator(cpu_runs):
    found = _memory_findings(cpu_runs[True])
    leak = found["memory_growth"]
    assert leak.category == "memory" and leak.predicted_saving_ms == 0
    assert leak.evidence["growth_bytes_per_step"] >= 128 * 512 * 4 and leak.evidence["interval_bytes_per_step"][0] > 0
    assert leak.evidence["never_freed"][0]["operator"] == "aten::clamp_min" and "aten::clamp_min" in leak.fix
    assert "loss.item()" in leak.fix


def test_the_same_loop_without_the_list_gets_no_memory_finding(cpu_runs):
    assert _memory_findings(cpu_runs[False]) == {}


def test_the_leak_is_found_from_the_samples_alone_once_the_files_are_gone(cpu_runs):
    # a run reloaded from the history whose trace was deleted: the Summary's samples and windows
    s = cpu_runs[True]
    gone = dataclasses.replace(s, meta={**s.meta, "path": "/nonexistent"}, events=None)
    leak = _memory_findings(gone)["memory_growth"]
    fresh = _memory_findings(s)["memory_growth"]
    assert leak.evidence["growth_bytes_per_step"] == pytest.approx(fresh.evidence["growth_bytes_per_step"])
    assert leak.evidence["never_freed"] == []  # no blocks without the files


def test_near_capacity_names_the_operator_running_at_the_kineto_peak():
    # GIVEN owlv2 with a capacity just above its peak (its own is 85 GB)
    trace = need(CUDA / "tracelens" / "h100_owlv2")
    summary = npumagic.analyze(trace)
    memory = summary.memory.assign(capacity_bytes=summary.memory["peak_allocated_bytes"] * 1.05)
    found = advise(dataclasses.replace(summary, memory=memory)).findings
    # THEN the finding's operator is the host op the peak [memory] event (max Total Allocated) falls in
    with gzip.open(next(trace.glob("*.json.gz")), "rt") as fh:
        events = json.load(fh)["traceEvents"]
    mem = [e for e in events if e.get("name") == "[memory]" and e["args"].get("Device Type") == 1]
    top = max(mem, key=lambda e: e["args"]["Total Allocated"])
    spans = [e for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op" and e["tid"] == top["tid"]
             and e["ts"] <= top["ts"] <= e["ts"] + e["dur"] and e["name"] not in ("aten::empty", "aten::empty_strided")]
    innermost = max(spans, key=lambda e: e["ts"])["name"]
    cap = [f for f in found if f.rule == "memory_capacity" and "cuda:0" in f.title]
    assert cap and cap[0].evidence["peak_operator"] == innermost and innermost in cap[0].title


def test_fragmentation_takes_reserved_minus_allocated_at_the_peak_of_memory_record():
    job = need(ASCEND / "partial" / "job2")
    frag = _memory_findings(npumagic.analyze(job))["fragmentation"]
    rows = [r for r in _rows(next(job.glob("rank0*")) / "ASCEND_PROFILER_OUTPUT" / "memory_record.csv")
            if r["Component"] == "PTA"]
    peak = max(rows, key=lambda r: float(r["Total Allocated(MB)"]))
    unused = (float(peak["Total Reserved(MB)"]) - float(peak["Total Allocated(MB)"])) * MB
    assert frag.evidence["unused_reserved_bytes"] == pytest.approx(unused)
    assert "expandable_segments:True" in frag.fix and "PYTORCH_NPU_ALLOC_CONF" in frag.fix


def test_churn_is_not_said_where_the_pool_keeps_its_memory():
    # owlv2 churns 3,730 blocks of 1 MiB or more in its step, but reserved never falls: cached reuse
    summary = npumagic.analyze(need(CUDA / "tracelens" / "h100_owlv2"))
    assert memory_view_of(summary).churn_count == 3730
    assert "memory_churn" not in _memory_findings(summary)


def test_churn_is_said_where_the_pool_gives_memory_back_within_the_step():
    # GIVEN owlv2's samples with reserved dropping once inside its step (as after empty_cache())
    summary = npumagic.analyze(need(CUDA / "tracelens" / "h100_owlv2"))
    (_, start, end), = summary.meta["step_windows_ns"]
    t = summary.memory_timeline.copy()
    middle = (t["ts_ns"] > (start + end) // 2) & (t["device"].astype(str) == "cuda:0")
    t.loc[middle, "reserved_bytes"] = t.loc[middle, "reserved_bytes"] - 2**20
    churn = _memory_findings(dataclasses.replace(summary, memory_timeline=t))["memory_churn"]
    assert churn.evidence["reserved_falls"] == 1 and churn.evidence["churn_blocks_per_step"] == 3730
    assert "empty_cache()" in churn.fix and "expandable_segments" in churn.fix


def test_compare_has_no_memory_where_a_run_recorded_none(cpu_runs):
    plain = npumagic.analyze(need(CUDA / "alexnet_sync"))
    c = compare(plain, cpu_runs[True])
    assert c.memory is None and "memory" not in comparison_doc(c) and "needs" not in comparison_text(c)


def test_the_advice_builds_one_memory_view_of_a_runs_records(cpu_runs, monkeypatch):
    # GIVEN a run whose memory records are read again from its profiler output for each question
    import npumagic.analysis.memory_summary as memory_summary

    built = []
    real = memory_summary.memory_view
    monkeypatch.setattr(memory_summary, "memory_view", lambda records: built.append(records) or real(records))
    memory_summary._cached_view.cache_clear()
    summary = cpu_runs[True]
    # WHEN the checklist, the advice and a comparison each ask for it
    first = memory_view_of(summary)
    advise(summary)
    compare(summary, summary)
    # THEN the view of the same records is built once and is the same view each time
    assert first is not None and first.source != "summary"
    assert len(built) == 1 and memory_view_of(summary) is first
