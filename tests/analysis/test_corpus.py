"""The adversarial corpus (tests/fuzz_corpus.py): every broken input gives a TraceError naming
its file and what was expected, or loads with one warning counting what was skipped; never
another exception type, never bad rows turned silently into numbers."""

from __future__ import annotations

import json
import re
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import npumagic
from npumagic.errors import TraceError

from ..conftest import examples
from ..fuzz_corpus import KERNEL_HEADER, ascend_files, cases

CASES = cases()


def _load(path):
    """Load and summarize, collecting warnings; any exception but TraceError fails the test."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trace = npumagic.load(path)
        npumagic.summarize(trace)
    return trace, [str(w.message) for w in caught]


@pytest.mark.parametrize("case", [c for c in CASES if c.kind == "error"], ids=lambda c: c.name)
def test_a_broken_input_is_one_trace_error_naming_its_file(tmp_path, case):
    path = case.write(tmp_path)
    with pytest.raises(TraceError) as info:
        _load(path)
    assert re.search(case.expect, str(info.value)), str(info.value)
    assert str(path) in info.value.path or info.value.path.startswith(str(path))


@pytest.mark.parametrize("case", [c for c in CASES if c.kind == "note"], ids=lambda c: c.name)
def test_bad_rows_are_counted_in_one_note_and_kept_out_of_the_numbers(tmp_path, case):
    trace, messages = _load(case.write(tmp_path))
    notes = [m for m in messages if re.search(case.expect, m)]
    assert len(notes) == 1, messages
    assert (trace.events["dur_ns"] >= 0).all()
    assert (trace.events["ts_ns"].abs() < 2**62).all()  # (a step_trace_time.csv rank has no events)


@pytest.mark.parametrize("case", [c for c in CASES if c.kind == "ok"], ids=lambda c: c.name)
def test_a_byte_order_mark_is_read_through(tmp_path, case):
    trace, messages = _load(case.write(tmp_path))
    assert len(trace.events) and not messages


def test_bad_rows_are_counted_in_meta(tmp_path):
    case = next(c for c in CASES if c.name == "ascend-kernels-negative-duration")
    trace, _ = _load(case.write(tmp_path))
    (counts,) = trace.meta.bad_rows.values()
    assert counts == {"negative Duration": 1}
    # the good kernel is kept, the bad one is not invented from the trace_view task either
    assert trace.events.loc[trace.events["kind"] == "kernel", "name"].astype(str).tolist() == ["Add_2"]


def test_every_case_of_the_corpus_is_written_by_its_script(tmp_path):
    from ..fuzz_corpus import build

    built = build(tmp_path)
    assert len(built) == len(CASES) >= 50
    assert all(path.exists() for _, path in built)


# -- hypothesis: the torch_npu reader ------------------------------------------------------------
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                    max_leaves=12)
CELL = st.one_of(st.sampled_from(["", "N/A", "-1", "1e400", "nan", "9" * 30, "Name", "HCCL", '"', ","]),
                 st.text(max_size=6), st.integers(-10**20, 10**20).map(str), st.floats().map(str))
COMM_OP = st.fixed_dictionaries({"Communication Time Info": st.dictionaries(
    st.sampled_from(["Start Timestamp(us)", "Elapse Time(ms)", "Wait Time(ms)"]), JSON, max_size=3),
    "Communication Bandwidth Info": st.dictionaries(st.sampled_from(["HCCS", "SDMA", "RDMA"]), JSON, max_size=2)})


def _write_rank(tmp_path, **files):
    rank = tmp_path / "rank0_ascend_pt"
    for rel, text in {**ascend_files(), **files}.items():
        (rank / rel).parent.mkdir(parents=True, exist_ok=True)
        (rank / rel).write_text(text, encoding="utf-8")
    return rank


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(st.lists(CELL, min_size=8, max_size=8), max_size=5), comm=st.one_of(st.dictionaries(
    st.sampled_from(["step1", "step2", "stepX"]), st.fixed_dictionaries({"collective": st.dictionaries(
        st.sampled_from(["hcom_allReduce__1@2", "Total Op Info"]), COMM_OP, max_size=2)}), max_size=2), JSON),
    info=st.one_of(st.just({"rank_id": 0, "config": {}}), JSON), metadata=st.one_of(st.just({}), JSON))
def test_fuzzed_torch_npu_files_load_or_raise_trace_error(tmp_path, rows, comm, info, metadata):
    import csv
    import io

    table = io.StringIO()
    csv.writer(table).writerows([KERNEL_HEADER.split(","), *rows])
    rank = _write_rank(tmp_path, **{"ASCEND_PROFILER_OUTPUT/kernel_details.csv": table.getvalue(),
                                    "ASCEND_PROFILER_OUTPUT/communication.json": json.dumps(comm),
                                    "profiler_info_0.json": json.dumps(info),
                                    "profiler_metadata.json": json.dumps(metadata)})
    try:
        trace, _ = _load(rank)
    except TraceError as exc:
        assert str(rank) in exc.path
        return
    assert (trace.events["dur_ns"] >= 0).all()
    assert trace.comm["elapsed_us"].map(lambda v: v == v and abs(v) < float("inf")).all()
