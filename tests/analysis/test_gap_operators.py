"""The host operators under the device's largest idle gaps (:mod:`npumagic.analysis.gaps`), made
without sorting every gap nor the launches that a trace holds in time order already."""

from __future__ import annotations

import numpy as np
import pandas as pd

from npumagic.analysis.gaps import gap_operators, longest_first

from ..conftest import CUDA, need, shared_trace


def test_the_longest_are_a_stable_sorts_first_ties_in_position_order():
    rng = np.random.default_rng(7)
    for _ in range(2000):
        lengths = rng.integers(0, 5, int(rng.integers(0, 40))).astype(np.int64)  # many ties
        largest = int(rng.integers(1, 12))
        assert np.array_equal(longest_first(lengths, largest), np.argsort(-lengths, kind="stable")[:largest])


def test_events_out_of_time_order_give_the_same_table():
    # GIVEN the V100 trace's events as read (in time order) and the same rows shuffled
    ev = shared_trace(need(CUDA / "ns_resolution")).events
    shuffled = ev.sample(frac=1.0, random_state=3).reset_index(drop=True)
    as_read = gap_operators(ev)
    # THEN the launches under each operator are counted alike (sorted where they come unsorted)
    assert len(as_read) and as_read["launches"].sum() > 0
    pd.testing.assert_frame_equal(gap_operators(shuffled), as_read)
