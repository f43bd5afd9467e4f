"""The findings drawn on the live timeline, answered in the kernel, on real traces: a lane per
rank holds the marks (the device's idle gaps with their cause, blocking syncs, waits for a
slower rank, the memory peak), and ``r.live.show(finding)`` moves the view to the finding's
largest mark, as computed here from the trace's own events and tables."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

pytest.importorskip("anywidget", reason="need anywidget (a dependency of npumagic) — pip install -e .")

from npumagic.analysis.advice import advise_run  # noqa: E402
from npumagic.analysis.marks import marks  # noqa: E402
from npumagic.render.live.frontend import timeline_widget  # noqa: E402

from ..conftest import ASCEND, CUDA, shared_summary, shared_trace  # noqa: E402

LEVEL1 = ASCEND / "level1"


def largest_idle(trace, rank: int) -> tuple[int, int]:
    """The longest stretch inside a step of ``rank`` where its device runs nothing (ns), by a plain walk."""
    ev = trace.events
    work = ev[(ev["rank"] == rank) & ev["kind"].isin(["kernel", "comm", "memcpy"]) & (ev["device"] >= 0)]
    spans = sorted(zip(work["ts_ns"], work["ts_ns"] + work["dur_ns"]))
    best = (0, 0)
    for step in trace.steps[trace.steps["rank"] == rank].itertuples():
        at = step.start_ns
        for a, b in spans + [(step.end_ns, step.end_ns)]:
            a, b = max(a, step.start_ns), min(b, step.end_ns)
            if a > at and a - at > best[1] - best[0]:
                best = (at, a)
            at = max(at, b)
    return best


def test_each_rank_has_a_lane_of_marks_at_their_times():
    for path in (LEVEL1, CUDA / "alexnet_sync"):
        trace = shared_trace(path)
        widget = timeline_widget(trace)
        origin, table = widget.index.origin, marks(trace)
        drawn = widget.frame["marks"]
        assert len(drawn) == len(table) > 0
        assert {m["rank"] for m in drawn} == set(trace.events["rank"])
        assert [(m["start"], m["end"]) for m in drawn] == \
            [((s - origin) / 1e6, (e - origin) / 1e6) for s, e in zip(table["start_ns"], table["end_ns"])]
        assert {"idle gap", "blocking sync"} <= {m["kind"] for m in drawn}


def test_show_moves_the_view_to_a_findings_largest_mark():
    trace = shared_trace(LEVEL1)
    widget = timeline_widget(trace)
    origin = widget.index.origin
    findings = {f.rule: f for f in advise_run(shared_summary(LEVEL1), "level1", every_rank=True, low=True).findings}
    # GIVEN the host-bound finding (of rank 1) WHEN shown THEN the view is its device's longest idle
    # gap inside a step, with as much again either side, outlined in the findings lane
    bound = findings["host_bound"]
    a, b = largest_idle(trace, bound.ranks[0])
    said = widget.show(bound)
    assert said.startswith(f"device idle {(b - a) / 1e6:,.3f} ms: ") and widget.shown["kind"] == "idle gap"
    assert (widget.shown["start"], widget.shown["end"]) == ((a - origin) / 1e6, (b - origin) / 1e6)
    assert widget.view["t0"] == pytest.approx((2 * a - b - origin) / 1e6)
    assert widget.view["t1"] == pytest.approx((2 * b - a - origin) / 1e6)
    # the communication finding: the longest wait of a rank for the others, from the comm table
    widget.show(findings["communication"])
    comm = trace.comm
    k = int(np.argmax(comm["wait_us"].to_numpy()))
    assert widget.shown["kind"] == "slow rank wait" and widget.shown["rank"] == int(comm["rank"].iat[k])
    assert widget.shown["start"] == (int(comm["ts_ns"].iat[k]) - origin) / 1e6
    assert widget.shown["end"] - widget.shown["start"] == pytest.approx(comm["wait_us"].iat[k] / 1e3, abs=1e-6)
    # a text naming a kind of mark: the memory peak, the highest allocated sample
    mem = trace.memory
    k = int(np.argmax(mem["allocated_bytes"].to_numpy()))
    assert widget.show("the memory peak").startswith("memory peak ")
    assert widget.shown["start"] == (int(mem["ts_ns"].iat[k]) - origin) / 1e6
    # a finding without marks opens its "where", as before (no mark outlined anew)
    shown = dict(widget.shown)
    assert widget.show(dataclasses.replace(findings["transdata"], where="step 50")) == "step 50"
    assert widget.shown == shown


@pytest.mark.parametrize("where, held", [("ForeachAddList (1954 µs), MatMulV2 (775 µs)", "ForeachAddList"),
                                         ("TransData", "TransData")])
def test_a_where_of_kernel_types_opens_at_the_longest_event_holding_the_first(where, held):
    # GIVEN the "where" of level1's memory-bound kernels and TransData findings: kernel types,
    # each a part of its kernels' names (aclnnForeachAddListV2_ForeachAddListV2_ForeachAddList)
    trace = shared_trace(LEVEL1)
    widget = timeline_widget(trace)
    ev = trace.events
    mine = ev[ev["name"].astype(str).str.contains(held, regex=False).to_numpy()]
    longest = mine.loc[mine["dur_ns"].idxmax()]
    a, b, origin = int(longest["ts_ns"]), int(longest["ts_ns"] + longest["dur_ns"]), widget.index.origin
    # WHEN shown THEN the view is the longest event whose name holds the first type, as much again either side
    assert widget.show(where) == longest["name"]
    assert (widget.view["t0"], widget.view["t1"]) == pytest.approx(((2 * a - b - origin) / 1e6, (2 * b - a - origin) / 1e6))
    with pytest.raises(ValueError, match="names no step and no operator"):
        widget.show("profiler_metadata.json ENV_VARIABLES")


def test_a_sync_finding_opens_at_its_longest_blocking_call():
    path = CUDA / "alexnet_sync"
    trace = shared_trace(path)
    widget = timeline_widget(trace)
    sync = next(f for f in advise_run(shared_summary(path), "sync").findings if f.category == "sync")
    said = widget.show(sync)
    longest = max((m for m in widget.frame["marks"] if m["kind"] == "blocking sync"), key=lambda m: m["end"] - m["start"])
    assert said == longest["label"] and widget.shown["start"] == longest["start"]


def test_the_perfetto_button_writes_the_run_with_its_findings_in_the_working_directory(tmp_path, monkeypatch):
    """GIVEN the widget of a real Kineto trace WHEN the browser's Perfetto button is pressed THEN
    the kernel writes NAME.perfetto.json here (the browser names no path), with every event as a
    slice and the run's findings; a widget of a trace in memory (no profiler output) says so."""
    import json

    from npumagic.analysis.schema import KINDS

    monkeypatch.chdir(tmp_path)
    path = CUDA / "alexnet_sync"
    trace = shared_trace(path)
    widget = timeline_widget(trace)
    widget.set_state({"export": {"seq": 3, "path": "/etc/evil.json"}})
    answer = widget.exported
    assert answer["seq"] == 3 and "error" not in answer and answer["lines"][1].startswith("open it in")
    written = tmp_path / "benchmark_result_2869224_1695835535_trace.perfetto.json"
    assert answer["path"] == str(written) and written.is_file()
    doc = json.loads(written.read_bytes())
    assert sum(e["ph"] == "X" and e["cat"] in KINDS for e in doc["traceEvents"]) == len(trace.events)
    assert answer["findings"] == len(advise_run(shared_summary(path), "x", every_rank=True, low=True).findings) > 0
    memory_only = timeline_widget(dataclasses.replace(trace, meta=dataclasses.replace(trace.meta, path="")))
    memory_only.set_state({"export": {"seq": 1}})
    assert memory_only.exported["error"].startswith("export failed: this timeline was made from a trace in memory")
