"""A Summary stored as bytes reads back identical: every table, dtype, category and meta value."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

import npumagic
from npumagic.analysis.persist import dump_summary, load_summary

from ..conftest import ASCEND, CUDA, need


def _assert_same(a, b):
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if f.metadata.get("persist") is False:
            assert y is None, f.name  # not stored (the raw events)
        elif isinstance(x, dict) and any(isinstance(v, pd.DataFrame) for v in x.values()):
            assert x.keys() == y.keys(), f.name
            for key in x:
                if isinstance(x[key], pd.DataFrame):
                    pd.testing.assert_frame_equal(x[key], y[key], check_exact=True, obj=f"{f.name}[{key}]")
                else:
                    assert x[key] == y[key], f"{f.name}[{key}]"
        elif isinstance(x, pd.DataFrame):
            pd.testing.assert_frame_equal(x, y, check_exact=True, obj=f.name)
        elif f.name == "per_rank":
            assert x.keys() == y.keys()
            for rank in x:
                _assert_same(x[rank], y[rank])
        else:
            assert x == y, f.name


@pytest.mark.parametrize("path", [ASCEND / "level1", ASCEND / "level2" / "rank1_ascend_pt", CUDA / "nccl"],
                         ids=["ascend-2-ranks", "ascend-level2", "cuda-nccl"])
def test_a_summary_round_trips_exactly(path):
    summary = npumagic.analyze(need(path))
    back = load_summary(dump_summary(summary))
    _assert_same(summary, back)
    assert back.headline == summary.headline


def test_bytes_that_are_not_a_summary_are_refused():
    with pytest.raises(ValueError, match="not a stored summary"):
        load_summary(b"not zlib")
