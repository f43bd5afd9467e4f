"""Whole-trace passes of the schema on arrays (issue 45: 10M events): the rows of some kinds, and
the events' order, as pandas' own ways give them."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from npumagic.analysis import schema


@pytest.mark.parametrize("kinds", [("runtime", "sync"), ("kernel",), ("comm", "python"), ()])
def test_kind_in_is_pandas_isin_on_codes(kinds):
    # GIVEN kinds as the reader codes them (a fixed set, some rows missing) and as plain text
    rng = np.random.default_rng(3)
    codes = rng.integers(-1, len(schema.KINDS), 5000).astype(np.int8)
    coded = pd.Series(pd.Categorical.from_codes(codes, dtype=schema.EVENT_COLUMNS["kind"]))
    # WHEN the rows of some kinds are picked THEN they are pandas' own isin's, missing rows never
    assert (schema.kind_in(coded, kinds) == coded.isin(kinds).to_numpy()).all()
    assert (schema.kind_in(coded.astype(object), kinds) == coded.isin(kinds).to_numpy()).all()
    assert schema.kind_in(coded, kinds).sum() == np.isin(codes, [schema.KINDS.index(k) for k in kinds]).sum()


@pytest.mark.parametrize("ranks", [[0, 1, 0, 1, 0], [3, 3, 3, 3, 3]])
def test_events_are_ordered_by_rank_then_time_ties_kept(ranks):
    # GIVEN events of two ranks, or of one (a key of one value orders nothing: sorted by time alone),
    # with two at the same time
    frame = pd.DataFrame({"rank": np.array(ranks, np.int64), "ts_ns": np.array([50, 10, 30, 10, 30], np.int64),
                          "row": np.arange(5)})
    # WHEN sorted THEN by rank, then time, equal times in their first order
    out = schema.sorted_rows(frame.copy(), ["rank", "ts_ns"])
    expected = frame.sort_values(["rank", "ts_ns"], kind="stable")["row"].tolist()
    assert out["row"].tolist() == expected and out.index.tolist() == list(range(5))


def test_steps_are_found_alike_in_time_order_and_in_any_order():
    # GIVEN host events before, at, inside and after three steps (one starting where another ends,
    # one event exactly at a step's start, some past the last step's end) and device events
    # launched by some of them (their step by the launch) or by nothing in the trace
    rng = np.random.default_rng(5)
    steps = pd.DataFrame({"rank": 0, "step": [3, 4, 5], "start_ns": [100, 200, 200], "end_ns": [200, 200, 300]})
    n = 400
    ts = np.sort(rng.integers(0, 400, n)).astype(np.int64)
    ts[:3] = [100, 200, 300]
    ts.sort()
    device = np.where(rng.random(n) < 0.3, 0, -1)
    kind = np.where(device >= 0, "kernel", np.where(rng.random(n) < 0.5, "runtime", "host_op"))
    correlation = rng.integers(-1, 60, n)
    events = pd.DataFrame({"ts_ns": ts, "device": device, "rank": 0, "correlation": correlation,
                           "kind": pd.Categorical(kind, dtype=schema.EVENT_COLUMNS["kind"])})
    # WHEN the steps are found in time order (as finish sorts them) and in a shuffled order
    in_order = schema.assign_steps(events, steps)
    shuffled = rng.permutation(n)
    anyhow = schema.assign_steps(events.iloc[shuffled].reset_index(drop=True), steps)
    # THEN each event gets the same step either way, every way of falling in or out of a step is there
    assert (anyhow == in_order[shuffled]).all()
    host = device < 0
    assert {-1, 3, 5} <= set(in_order[host].tolist()) and (in_order[host & (ts >= 300)] == -1).all()
    assert (in_order[host & (ts == 200)] == 5).all()  # the later of two steps starting together
