"""A Summary stored as bytes reads back identical: every table, dtype, category and meta value."""

from __future__ import annotations

import dataclasses
import json
import zlib

import pandas as pd
import pytest

import npumagic
from npumagic.analysis.persist import SAME, _plain, dump_summary, load_summary

from ..conftest import ASCEND, CUDA, need, shared_summary


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
    summary = shared_summary(path)
    back = load_summary(dump_summary(summary))
    _assert_same(summary, back)
    assert back.headline == summary.headline


def test_a_table_a_rank_shares_with_the_job_is_stored_once_and_read_back_shared():
    summary = shared_summary(ASCEND / "level1")  # rank 0's tables are the job's
    doc = json.loads(zlib.decompress(dump_summary(summary)))
    stored = doc["summary"]["per_rank"]
    assert stored["0"]["kernels"] == SAME and stored["0"]["steps"] == SAME
    assert stored["1"]["kernels"]["__frame__"]  # rank 1's own
    back = load_summary(dump_summary(summary))
    assert back.per_rank[0].kernels is back.kernels and back.per_rank[1].kernels is not back.kernels
    _assert_same(summary, back)


def test_a_summary_stored_in_format_1_reads_back_the_same():
    # format 1 stored a rank's shared tables again, in full
    summary = shared_summary(ASCEND / "level1")
    doc = json.loads(zlib.decompress(dump_summary(summary)))
    job = doc["summary"]
    for rank in job["per_rank"].values():
        rank.update({k: job[k] for k, v in rank.items() if v == SAME})
    doc["format"] = 1
    _assert_same(summary, load_summary(zlib.compress(json.dumps(doc).encode())))


def test_bytes_that_are_not_a_summary_are_refused():
    with pytest.raises(ValueError, match="not a stored summary"):
        load_summary(b"not zlib")


def test_a_summary_stored_before_kernel_metrics_gets_them_from_its_raw_details():
    # GIVEN a level2 rank stored as the history stored it before the AI Core metrics were
    # normalized: kernel_details.csv's own columns (plus ts_ns, dur_ns) as "details"
    trace = npumagic.load(need(ASCEND / "level2" / "rank1_ascend_pt"))
    summary = npumagic.summarize(trace)
    doc = json.loads(zlib.decompress(dump_summary(summary)))
    del doc["summary"]["kernel_metrics"]
    doc["summary"]["details"] = _plain(trace.meta.vendor[1]["kernel_details"])
    # WHEN it is read back THEN its kernel metrics, and the findings of a reloaded run that they
    # feed, are today's
    old = load_summary(zlib.compress(json.dumps(doc).encode()))
    pd.testing.assert_frame_equal(old.kernel_metrics, summary.kernel_metrics, check_exact=True)
    today = load_summary(dump_summary(summary))
    titles = [f.title for f in npumagic.advise(old).findings]
    assert titles == [f.title for f in npumagic.advise(today).findings]
    # the AI Core groups do not depend on the events a reloaded run lacks
    aicore = [t for t in titles if t.startswith("AI Core operator groups")]
    assert aicore and aicore == [f.title for f in npumagic.advise(summary).findings
                                 if f.title.startswith("AI Core operator groups")]


@pytest.mark.parametrize("field", ["kernel_metrics", "steps", "host", "no_such_table"])
def test_a_stored_table_reads_back_as_plain_columns_without_pandas(field):
    # GIVEN a stored Summary WHEN one table is read as plain lists (`npumagic check`'s host samples)
    # THEN they are the table's values (categories as labels, NaN where a float is missing)
    from npumagic.analysis.persist_plain import table_columns

    summary = shared_summary(ASCEND / "level1")
    plain = table_columns(dump_summary(summary), field)
    frame = getattr(summary, field, pd.DataFrame())
    assert list(plain) == [str(c) for c in frame.columns]
    for name in frame.columns:
        want = frame[name].astype(object).where(frame[name].notna(), None).tolist()
        got = [None if v != v else v for v in plain[name]]  # NaN as None, as `want` has it
        assert got == want, name
        if frame[name].dtype.kind == "f":  # numbers, as the frame's own: a missing one NaN, not None
            assert all(isinstance(v, float) for v in plain[name]), name


def test_a_null_in_a_stored_float_column_reads_as_nan_in_plain_columns_as_in_a_frame():
    # GIVEN a stored table whose float column holds a null (JSON written by another tool) THEN the
    # plain read gives NaN, as load_summary's frame does
    from npumagic.analysis.persist_plain import table_columns

    doc = json.loads(zlib.decompress(dump_summary(shared_summary(ASCEND / "level1"))))
    steps = doc["summary"]["steps"]
    column = next(c for c in steps["data"] if c["dtype"] == "float64")
    column["values"][0] = None
    data = zlib.compress(json.dumps(doc).encode())
    name = steps["columns"][steps["data"].index(column)]
    first = table_columns(data, "steps")[name][0]
    assert first != first and load_summary(data).steps[name].isna().iloc[0]
