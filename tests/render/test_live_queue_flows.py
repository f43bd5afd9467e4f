"""Flows through torch_npu's task queue in the live timeline, on the shared level1 job: a launch
runs inside a Dequeue on a worker thread, and the operator that asked for it made the Enqueue of
the Dequeue's correlation id on its own thread. A click on a kernel draws the arrow from that
Enqueue; a click on an operator reaches the device work of the launches its Enqueues queued.
Checked by a plain walk over the trace's own events, not through the index."""

from __future__ import annotations

import pytest

pytest.importorskip("anywidget", reason="need anywidget (a dependency of npumagic) — pip install -e .")

from npumagic.render.live.flows import flows  # noqa: E402
from npumagic.render.live.frontend import timeline_widget  # noqa: E402

from ..conftest import ASCEND, shared_trace  # noqa: E402

RANK0 = ASCEND / "level1" / "rank0_ascend_pt"


def thread(lane: str) -> str:
    return lane.rpartition("/")[2]


def rows(ev):
    return [dict(name=str(r.name), kind=str(r.kind), lane=str(r.lane), ts=int(r.ts_ns), end=int(r.ts_ns + max(r.dur_ns, 0)),
                 corr=int(r.correlation), device=int(r.device)) for r in ev.itertuples()]


@pytest.fixture(scope="module")
def job():
    trace = shared_trace(RANK0)
    return trace, timeline_widget(trace), rows(trace.events)


def enqueue_of(events: list[dict], launch: dict) -> dict | None:
    """The Enqueue of the Dequeue on the launch's thread that holds the launch."""
    deq = next((e for e in events if e["name"].startswith("Dequeue") and thread(e["lane"]) == thread(launch["lane"])
                and e["ts"] <= launch["ts"] <= e["end"]), None)
    return None if deq is None else next((e for e in events if e["name"] == "Enqueue" and e["corr"] == deq["corr"]), None)


def test_a_click_on_a_kernel_draws_the_arrow_from_the_operators_enqueue(job):
    trace, widget, events = job
    index = widget.index
    launches = {e["corr"]: e for e in events if e["device"] < 0 and e["kind"] in ("runtime", "sync") and e["corr"] >= 0
                and e["name"] != "Enqueue" and not e["name"].startswith("Dequeue")}
    kernels = index.events.index[(index.events["kind"] == "kernel") & index.events["correlation"].isin(list(launches))]
    checked = 0
    for row in kernels[:40]:
        launch = launches[int(index.events["correlation"].iat[row])]
        enqueue = enqueue_of(events, launch)
        if enqueue is None:
            continue
        flow = flows(index, int(row))
        arrow = flow["arrows"][0]
        lane = index.lanes[arrow["from"]["lane"]]
        assert lane.name == enqueue["lane"] and thread(lane.name) != thread(launch["lane"])
        assert arrow["from"]["t"] == (enqueue["ts"] - index.origin) / 1e6
        assert flow["lines"][1].startswith(f"dequeued there from the task queue; enqueued at "
                                           f"{(enqueue['ts'] - index.origin) / 1e6:,.3f} ms on {enqueue['lane']}")
        checked += 1
    assert checked >= 10


def test_a_click_on_an_operator_reaches_the_work_its_enqueues_launched(job):
    trace, widget, events = job
    index = widget.index
    ev = index.events
    op = int(ev.index[(ev["name"].astype(str) == "aten::conv2d")][0])
    start, end = int(ev["ts_ns"].iat[op]), int(ev["ts_ns"].iat[op] + ev["dur_ns"].iat[op])
    lane = index.lanes[next(k for k, ln in enumerate(index.lanes) if op in set(ln.rows.tolist()))].name
    queued = {e["corr"] for e in events if e["name"] == "Enqueue" and e["lane"] == lane and start <= e["ts"] < end}
    dequeues = [e for e in events if e["name"].startswith("Dequeue") and e["corr"] in queued]
    launched = {e["corr"] for e in events for d in dequeues if e["device"] < 0 and e["kind"] in ("runtime", "sync")
                and e["corr"] >= 0 and not e["name"].startswith(("Dequeue", "Enqueue"))
                and thread(e["lane"]) == thread(d["lane"]) and d["ts"] <= e["ts"] <= d["end"]}
    work = [e for e in events if e["device"] >= 0 and e["kind"] in ("kernel", "comm", "memcpy") and e["corr"] in launched]
    flow = flows(index, op)
    assert len(work) > 0 and flow["count"] == len(work)
    assert sorted(a["name"] for a in flow["arrows"]) == sorted(e["name"] for e in work)
    assert all(a["from"]["lane"] >= 0 and index.lanes[a["from"]["lane"]].name == lane for a in flow["arrows"])
