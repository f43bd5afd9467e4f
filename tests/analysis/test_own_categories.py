"""A rank's categoricals keep only the categories its rows use, exactly as pandas'
remove_unused_categories would leave them (computed by counting, without sorting the codes)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from npumagic.analysis import schema
from npumagic.analysis.summary import _own_categories, _used_categories


@pytest.mark.parametrize("ordered", [False, True])
def test_unused_categories_go_as_pandas_drops_them(ordered):
    rng = np.random.default_rng(7)
    categories = [f"op{i:03d}" for i in range(300)][::-1]  # not sorted: their order must be kept
    codes = rng.choice(np.r_[-1, np.arange(0, 300, 3)], size=5000)  # two thirds unused, some missing
    values = pd.Categorical.from_codes(codes, dtype=pd.CategoricalDtype(categories, ordered))
    mine, theirs = _used_categories(values), values.remove_unused_categories()
    assert list(mine.categories) == list(theirs.categories) and mine.ordered == ordered
    np.testing.assert_array_equal(np.asarray(mine.codes), np.asarray(theirs.codes))
    pd.testing.assert_series_equal(pd.Series(mine), pd.Series(theirs))


def test_a_frame_whose_categories_are_all_used_is_left_as_it_is():
    frame = pd.DataFrame({"name": pd.Categorical(["a", "b", "a"]), "ts_ns": np.arange(3)})
    out = _own_categories(frame, schema.EVENT_COLUMNS)
    assert np.shares_memory(out["name"].array.codes, frame["name"].array.codes)
    part = _own_categories(frame.iloc[[0, 2]], schema.EVENT_COLUMNS)
    assert list(part["name"].cat.categories) == ["a"]


def test_a_fixed_set_of_categories_is_kept_whole():
    # GIVEN events of two of the kinds (a fixed set: schema.KINDS), names of which one is unused
    frame = pd.DataFrame({"name": pd.Categorical(["a", "a"], categories=["a", "b"]),
                          "kind": pd.Categorical(["kernel", "host_op"], dtype=schema.EVENT_COLUMNS["kind"])})
    # WHEN the rank's own categories are kept THEN the names lose "b"; the kinds keep every kind, and
    # their codes are the frame's own (no copy: the summary's events share the trace's arrays)
    out = _own_categories(frame, schema.EVENT_COLUMNS)
    assert list(out["name"].cat.categories) == ["a"]
    assert list(out["kind"].cat.categories) == list(schema.KINDS)
    assert np.shares_memory(out["kind"].array.codes, frame["kind"].array.codes)
