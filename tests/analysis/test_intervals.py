"""Interval algebra: hand-checked cases and a brute-force property check."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from npumagic.analysis.intervals import Spans


def test_union_merges_overlapping_and_touching_spans():
    spans = Spans.union_of([0, 5, 3, 20, 30], [4, 10, 6, 30, 31])
    assert spans.starts.tolist() == [0, 20]
    assert spans.ends.tolist() == [10, 31]
    assert spans.total == 21


def test_set_operations_match_hand_computed_lengths():
    a = Spans.union_of([0, 20], [10, 30])
    b = Spans.union_of([2, 25], [8, 40])
    assert (a & b).total == 6 + 5
    assert (a - b).total == 20 - 11
    assert (a | b).total == 10 + 20


def test_covered_counts_only_inside_each_window():
    a = Spans.union_of([0, 20], [10, 30])
    assert a.covered([0, 4, 21, 10], [100, 7, 25, 20]).tolist() == [20, 3, 4, 0]


def test_gaps_are_the_holes_inside_the_window():
    gaps = Spans.union_of([0, 20], [10, 30]).gaps(0, 50)
    assert list(zip(gaps.starts, gaps.ends)) == [(10, 20), (30, 50)]


intervals = st.lists(st.tuples(st.integers(0, 200), st.integers(0, 50)), max_size=30)


def _mask(pairs):
    m = np.zeros(300, dtype=bool)
    for s, d in pairs:
        m[s:s + d] = True
    return m


def _spans(pairs):
    return Spans.union_of([s for s, _ in pairs], [s + d for s, d in pairs])


@settings(max_examples=200, deadline=None)
@given(intervals, intervals, st.integers(0, 300), st.integers(0, 300))
def test_algebra_agrees_with_a_brute_force_timeline(a, b, lo, hi):
    lo, hi = min(lo, hi), max(lo, hi)
    ma, mb = _mask(a), _mask(b)
    sa, sb = _spans(a), _spans(b)
    assert sa.total == ma.sum()
    assert (sa & sb).total == (ma & mb).sum()
    assert (sa | sb).total == (ma | mb).sum()
    assert (sa - sb).total == (ma & ~mb).sum()
    assert int(sa.covered(lo, hi)[0]) == ma[lo:hi].sum()


def _nested(draw_spans):
    """Properly nested ops on one thread: children inside their parent, siblings disjoint."""
    import pandas as pd

    rows = []

    def build(start, end, depth):
        rows.append((start, end - start))
        if depth == 3 or end - start < 4:
            return
        cut = start + 1
        for width in draw_spans:
            if cut + width >= end:
                break
            build(cut, cut + width, depth + 1)
            cut += width + 1

    build(0, 200, 0)
    return pd.DataFrame({"lane": pd.Categorical(["t"] * len(rows)), "ts_ns": [r[0] for r in rows],
                         "dur_ns": [r[1] for r in rows]})


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 60), min_size=1, max_size=12))
def test_self_times_of_nested_ops_add_up_to_the_outermost_span(widths):
    from npumagic.analysis.operators import self_time_ns

    ops = _nested(widths).sample(frac=1.0, random_state=0)  # any order in, per-row answer out
    own = self_time_ns(ops)
    assert (own >= 0).all()
    assert own.sum() == 200  # the root covers [0, 200); every ns belongs to exactly one innermost op


@settings(max_examples=100, deadline=None)
@given(intervals, st.lists(st.booleans(), min_size=30, max_size=30))
def test_spans_of_some_rows_is_the_union_of_those_rows_alone(pairs, picked):
    # GIVEN events and a mask of some of them (the rows a pass reads, on arrays: no frame copied)
    import pandas as pd

    from npumagic.analysis.intervals import spans_of

    ev = pd.DataFrame({"ts_ns": np.array([s for s, _ in pairs], np.int64),
                       "dur_ns": np.array([d for _, d in pairs], np.int64)})
    rows = np.array(picked[:len(pairs)], dtype=bool)
    took = ev["dur_ns"].to_numpy().copy()
    # WHEN their union is taken THEN it covers what those rows cover, and the frame is left as it was
    union = spans_of(ev, rows)
    assert union.total == _mask([p for p, keep in zip(pairs, rows) if keep]).sum()
    assert (union.ends > union.starts).all() and (union.starts[1:] > union.ends[:-1]).all()
    assert (ev["dur_ns"].to_numpy() == took).all()
