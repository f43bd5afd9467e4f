"""A click on an event of the live timeline draws its flows, found in the kernel from the trace's
correlation ids (a real CUDA trace): a kernel's arrow comes from the launch call that started
it, named with the host operator that made the launch; a host operator's arrows go to the device
work its launches started. Checked against the trace's own events, not through the index."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("anywidget", reason="need anywidget (a dependency of npumagic) — pip install -e .")

from npumagic.render.live.frontend import timeline_widget  # noqa: E402

from ..conftest import CUDA, need, shared_trace  # noqa: E402

NW4 = CUDA / "legacy_kineto" / "resnet50_nw4.pt.trace.json.gz"


@pytest.fixture(scope="module")
def widget():
    return timeline_widget(shared_trace(need(NW4)))


def _launches(trace):
    ev = trace.events
    return ev[(ev["kind"].isin(["runtime", "sync"]) & (ev["device"] < 0) & (ev["correlation"] >= 0)).to_numpy()]


def test_a_click_on_a_kernel_draws_the_arrow_from_its_launch(widget):
    trace = shared_trace(need(NW4))
    index = widget.index
    # GIVEN a kernel of step 7 whose launch is in the trace
    ev = index.events
    launches = _launches(trace)
    launched = ev["correlation"].isin(launches["correlation"])
    kernels = np.flatnonzero(((ev["kind"] == "kernel") & (ev["step"] == 7) & launched).to_numpy())
    row = int(kernels[len(kernels) // 2])
    launch = launches[launches["correlation"] == ev["correlation"].iat[row]].iloc[0]
    # WHEN the browser says it was clicked
    widget.set_state({"link": {"id": row, "seq": 3}})
    flow = widget.flow
    # THEN one arrow, from the launch's time on its thread's lane to the kernel's start on its stream's
    assert flow["seq"] == 3 and flow["count"] == 1 and len(flow["arrows"]) == 1
    arrow = flow["arrows"][0]
    assert arrow["from"]["t"] == pytest.approx((launch["ts_ns"] - index.origin) / 1e6)
    assert index.lanes[arrow["from"]["lane"]].name == str(launch["lane"])
    assert arrow["to"]["t"] == pytest.approx((ev["ts_ns"].iat[row] - index.origin) / 1e6)
    assert row in index.lanes[arrow["to"]["lane"]].rows
    # and the line names the launch and the innermost host operator running when it was made
    host = trace.events[((trace.events["kind"] == "host_op") & (trace.events["lane"] == launch["lane"])
                         & (trace.events["ts_ns"] <= launch["ts_ns"])
                         & (trace.events["ts_ns"] + trace.events["dur_ns"] > launch["ts_ns"])).to_numpy()]
    caller = str(host.sort_values("dur_ns")["name"].iat[0])
    assert flow["lines"][0].endswith(f"launched by {launch['name']} at {(launch['ts_ns'] - index.origin) / 1e6:,.3f} ms "
                                     f"on {launch['lane']}, in {caller}")
    json.dumps(flow, allow_nan=False)


def test_a_click_on_a_host_operator_draws_arrows_to_the_work_its_launches_started(widget):
    trace = shared_trace(need(NW4))
    index = widget.index
    ev = index.events
    row = int(np.flatnonzero((ev["name"] == "aten::cudnn_convolution").to_numpy())[10])
    start, end = ev["ts_ns"].iat[row], ev["ts_ns"].iat[row] + ev["dur_ns"].iat[row]
    lane = next(ln for ln in index.lanes if row in set(ln.rows.tolist()))
    launches = _launches(trace)
    mine = launches[((launches["lane"] == lane.name) & (launches["ts_ns"] >= start) & (launches["ts_ns"] < end)).to_numpy()]
    every = trace.events
    device = every[((every["device"] >= 0) & every["correlation"].isin(mine["correlation"])
                    & every["kind"].isin(["kernel", "memcpy", "comm"])).to_numpy()]
    assert len(device) >= 1
    widget.set_state({"link": {"id": row, "seq": 4}})
    flow = widget.flow
    assert flow["count"] == len(device)
    assert sorted(a["to"]["t"] for a in flow["arrows"]) == pytest.approx(sorted((device["ts_ns"] - index.origin) / 1e6))
    assert sorted(a["name"] for a in flow["arrows"]) == sorted(device["name"].astype(str))
    assert flow["lines"][0] == f"aten::cudnn_convolution: {len(mine)} launches, {len(device)} with their device work in the trace"


@pytest.mark.parametrize("link, error", [({"id": -1}, "no event -1"), ({"id": "3"}, "id '3': an event id"),
                                         ([], "a click is")])
def test_a_malformed_click_is_answered_with_an_error(widget, link, error):
    widget.set_state({"link": link})
    assert widget.flow["error"].startswith("click refused: ") and error in widget.flow["error"]
    assert widget.flow["arrows"] == []
