"""Nested host operators in rows of their own depth: on a real trace's threads no two boxes of a
row overlap and each operator sits one row below the one enclosing it; spans that outlive their
parent still find a free row. Tooltips write times with units, as the tables do."""

from __future__ import annotations

import numpy as np
import pytest

from npumagic.render.live.lod import TimelineIndex
from npumagic.render.live.rows import stack

from ..conftest import CUDA, need, shared_trace

NW4 = CUDA / "legacy_kineto" / "resnet50_nw4.pt.trace.json.gz"


@pytest.fixture(scope="module")
def index():
    return TimelineIndex.build(shared_trace(need(NW4)))


def _windows(index, width=2000, span_ms=2.0):
    """Views of ``span_ms`` across the run whose host lanes all come back as events."""
    lo, hi = index.layout()["extent"]
    for t0 in np.arange(lo, hi - span_ms, (hi - lo) / 60):
        answer = index.query(float(t0), float(t0) + span_ms, width)
        parts = [(index.lanes[p["lane"]], p) for p in answer["lanes"] if index.lanes[p["lane"]].group == "host"]
        if all(p["mode"] == "events" for _, p in parts):
            yield answer, parts


def test_no_two_operators_of_a_row_overlap_on_a_real_trace(index):
    checked = 0
    for _, parts in _windows(index):
        for _, part in parts:
            start, end, row = (np.asarray(part[k]) for k in ("start", "end", "depth"))
            for r in np.unique(row):
                mine = np.flatnonzero(row == r)
                mine = mine[np.argsort(start[mine], kind="stable")]
                # THEN in each row, each box ends before the next one starts
                assert (start[mine][1:] >= end[mine][:-1]).all()
            checked += len(start)
    assert checked > 1000


def test_each_operator_sits_one_row_below_the_one_enclosing_it(index):
    answer, parts = next(_windows(index))
    for _, part in parts:
        start, end, row = (np.asarray(part[k]) for k in ("start", "end", "depth"))
        for k in range(len(start)):
            # the innermost event enclosing k (longest-first order puts parents first on ties)
            holders = [j for j in range(k) if start[j] <= start[k] and end[k] <= end[j] and end[j] > start[j]]
            assert row[k] == (row[holders[-1]] + 1 if holders else 0)


def test_a_span_outliving_its_parent_takes_the_lowest_free_row():
    # GIVEN a span, one starting inside it and ending after it, and a third after the first ends
    starts, ends = np.array([0, 5, 12]), np.array([10, 15, 20])
    depth = np.array([0, 1, 1])  # open spans at each start: what nesting alone would give
    # THEN the third takes row 0 (free since 10), not row 1 where the second still runs
    assert stack(starts, ends, depth).tolist() == [0, 1, 0]
    # and properly nested spans keep their depth
    assert stack(np.array([0, 1, 4, 5]), np.array([10, 3, 9, 6]), np.array([0, 1, 1, 2])).tolist() == [0, 1, 1, 2]


def test_a_tooltip_writes_times_with_units_as_the_tables_do(index):
    wait = index.events[index.events["kind"] == "dataloader"].index[0]  # 4.433 ms from 0.052 ms
    assert index.details(wait)["lines"][:3] == ["enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__",
                                               "dataloader: 4.43 ms from 52.0 µs", "step 5"]
