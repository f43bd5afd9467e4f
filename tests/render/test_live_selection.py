"""A range selected on the live timeline, summed up in the kernel, against the same range
computed from the trace's events directly (not through the index): top operators and kernels by
time, busy and comm shares, idle time by cause, on a CUDA run with DataLoader waits, a two-rank
Ascend job with collectives and a CPU-only run."""

from __future__ import annotations

import numpy as np
import pytest

from npumagic.analysis.intervals import Spans
from npumagic.render.live.lod import HOST_KINDS, TimelineIndex
from npumagic.render.live.selection import aggregate

from ..conftest import ASCEND, CUDA, need, shared_trace

TRACES = {"resnet50_nw4": CUDA / "legacy_kineto" / "resnet50_nw4.pt.trace.json.gz",
          "level1": ASCEND / "level1", "cpu_only": CUDA / "hta_more" / "cpu_only_2024"}


def _events(trace):
    """The events the timeline draws, times in ns from the first step, as plain arrays."""
    ev = trace.events
    ev = ev[ev["kind"].isin(HOST_KINDS + ("kernel", "comm", "memcpy")).to_numpy()
            & ~((ev["kind"] == "annotation") & ev["name"].astype(str).str.startswith("ProfilerStep#")).to_numpy()]
    origin = int(trace.steps["start_ns"].min())
    return ev.assign(s=ev["ts_ns"] - origin, e=ev["ts_ns"] + ev["dur_ns"].clip(lower=0) - origin)


def _expected(ev, lo: int, hi: int) -> dict:
    devices = set(ev.loc[ev["device"] >= 0, "rank"])
    every = sorted(set(ev["rank"]))
    s, e = ev["s"].clip(lo, hi).to_numpy(), ev["e"].clip(lo, hi).to_numpy()
    ev = ev.assign(s=s, e=e, t=e - s)[e > s]
    union = lambda part: Spans.union_of(part["s"].to_numpy(), part["e"].to_numpy())  # noqa: E731
    ranks = {}
    for rank in every:
        mine = ev[ev["rank"] == rank]
        device = rank in devices
        host = mine[mine["device"] < 0]
        busy = union(mine[mine["kind"].isin(["kernel", "comm", "memcpy"]) & (mine["device"] >= 0)]) if device \
            else union(host[host["kind"] == "host_op"])
        idle = Spans(np.array([lo]), np.array([hi])) - busy
        causes = {}
        for kind, label in (("dataloader", "DataLoader wait"), ("sync", "sync"), ("host_op", "host operators")):
            if kind == "host_op" and not device:
                continue
            part = idle & union(host[host["kind"] == kind])
            causes[label], idle = part.total / 1e6, idle - part
        causes["nothing traced"] = idle.total / 1e6
        ranks[rank] = (busy.total / (hi - lo), union(mine[mine["kind"] == "comm"]).total / (hi - lo), causes)
    top = lambda part: part.groupby(part["name"].astype(str))["t"].sum().sort_values(ascending=False).head(5) / 1e6  # noqa: E731
    return {"ranks": ranks, "operators": top(ev[(ev["kind"] == "host_op") & (ev["device"] < 0)]),
            "kernels": top(ev[(ev["kind"] == "kernel") & (ev["device"] >= 0)])}


@pytest.mark.parametrize("name", list(TRACES))
@pytest.mark.parametrize("where", ["a step", "a third of the run", "2 ms into the first step"])
def test_a_ranges_aggregate_equals_the_same_range_computed_from_the_events(name, where):
    # GIVEN a real trace's index and a range of it
    trace = shared_trace(need(TRACES[name]))
    index = TimelineIndex.build(trace)
    steps = index.layout()["steps"]
    lo_ms, hi_ms = index.lo / 1e6, index.hi / 1e6
    third = (hi_ms - lo_ms) / 3
    t0, t1 = {"a step": (steps[-1]["start"], steps[-1]["end"]), "a third of the run": (lo_ms + third, lo_ms + 2 * third),
              "2 ms into the first step": (steps[0]["start"] + 0.25, steps[0]["start"] + 2.25)}[where]
    # WHEN it is summed up
    got = aggregate(index, t0, t1)
    # THEN each number is the one computed from the events in that range
    want = _expected(_events(trace), int(round(t0 * 1e6)), int(round(t1 * 1e6)))
    assert [r["rank"] for r in got["ranks"]] == sorted(want["ranks"])
    for r in got["ranks"]:
        busy, comm, causes = want["ranks"][r["rank"]]
        assert (r["busy"], r["comm"]) == (pytest.approx(busy, abs=1e-9), pytest.approx(comm, abs=1e-9))
        assert r["idle"] == pytest.approx(causes, abs=1e-9)
        assert r["idle_ms"] == pytest.approx(sum(causes.values()), abs=1e-6)
    for key in ("operators", "kernels"):
        assert [x["ms"] for x in got[key]] == pytest.approx(list(want[key].to_numpy()), abs=1e-9)
        assert all(want[key].get(x["name"]) == pytest.approx(x["ms"], abs=1e-9) for x in got[key])


def test_the_dataloader_wait_is_the_idle_time_it_covers():
    # GIVEN the CUDA run's first DataLoader wait (4.4 ms; the device runs work queued before it most of that time)
    trace = shared_trace(need(TRACES["resnet50_nw4"]))
    index = TimelineIndex.build(trace)
    wait = index.events[index.events["kind"] == "dataloader"].iloc[0]
    t0 = (wait["ts_ns"] - index.origin) / 1e6
    # WHEN exactly that range is selected
    agg = aggregate(index, t0, t0 + wait["dur_ns"] / 1e6)
    got = agg["ranks"][0]
    # THEN the device's idle time in it is the DataLoader's, and the lines say so with units
    assert got["idle"]["DataLoader wait"] == pytest.approx(got["idle_ms"]) and got["idle_ms"] > 0
    assert got["idle"]["host operators"] == got["idle"]["sync"] == got["idle"]["nothing traced"] == 0.0
    assert agg["lines"][1] == "rank 0: device busy 99%, comm 0%; idle 58.0 µs (DataLoader wait 58.0 µs)"


def test_a_range_outside_the_run_is_refused():
    index = TimelineIndex.build(shared_trace(need(TRACES["level1"])))
    with pytest.raises(ValueError, match="holds no ns of the run"):
        aggregate(index, 1e9, 2e9)


@pytest.mark.parametrize("select, error", [
    ({"t0": 5.0, "t1": 1.0}, "t1 1.0 is not after t0 5.0"),
    ({"t0": None, "t1": 1.0}, "t0 None: a number of ms"),
    ({"t0": 1e9, "t1": 2e9}, "holds no ns of the run"),
    ("all", "a view is {t0, t1, width, seq}, not str"),
])
def test_a_selection_from_the_browser_is_answered_or_refused(select, error):
    pytest.importorskip("anywidget", reason="need anywidget (a dependency of npumagic) — pip install -e .")
    import json

    from npumagic.render.live.frontend import timeline_widget

    widget = timeline_widget(shared_trace(need(TRACES["level1"])))
    widget.set_state({"select": {"t0": 10.0, "t1": 20.0, "seq": 1}})
    assert widget.selection["seq"] == 1 and widget.selection["span_ms"] == pytest.approx(10.0)
    assert widget.selection["lines"][0] == "selected 10.00 ms from 10.000 ms"
    widget.set_state({"select": dict(select, seq=2) if isinstance(select, dict) else select})
    assert widget.selection["error"].startswith("selection refused: ") and error in widget.selection["error"]
    json.dumps(widget.selection, allow_nan=False)
