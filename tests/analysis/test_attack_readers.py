"""Readers under issue 31's attack: one damaged byte in a genuine trace is one bounded error."""

from __future__ import annotations

import gzip

import pytest

import npumagic
from npumagic.analysis.sources import _stream
from npumagic.errors import TraceError

from ..conftest import CUDA, need


def test_a_syntax_error_near_the_start_is_refused_without_a_repair_pass_per_cut(tmp_path, monkeypatch):
    # GIVEN a genuine trace with one ',' between two events changed to ';' near the start
    text = gzip.decompress(next(need(CUDA / "alexnet_sync").glob("*.json.gz")).read_bytes())
    comma = text.find(b"},", text.find(b"traceEvents") + 2000)
    path = tmp_path / "semicolon.pt.trace.json"
    path.write_bytes(text[:comma + 1] + b";" + text[comma + 2:])
    scans = []
    repaired = _stream._repaired
    monkeypatch.setattr(_stream, "_repaired", lambda t: scans.append(len(t)) or repaired(t))
    # WHEN it is read THEN one error names the file and where, and the whole text was never
    # rescanned for inf/nan (one scan per candidate cut and block: minutes on a 26 MB trace)
    with pytest.raises(TraceError, match=r"semicolon\.pt\.trace\.json.*expected ',' or '\]'"):
        npumagic.load(path)
    assert scans == []


def test_a_long_unterminated_string_is_refused_in_memory_near_its_size(tmp_path):
    # GIVEN a trace cut inside a 4 MiB string (a malformed export)
    import tracemalloc

    path = tmp_path / "cut.pt.trace.json"
    path.write_bytes(b'{"traceEvents": [{"name": "x", "ph": "X", "ts": 1, "dur": 1}, {"name": "' + b"a" * 2**22)
    # WHEN it is read THEN one error says it may be truncated, without 130x its size in memory
    tracemalloc.start()
    try:
        with pytest.raises(TraceError, match="truncated"):
            npumagic.load(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**22, f"{peak / 2**20:.0f} MiB"


def _launching_trace(kernel: float, host: float) -> dict:
    """One step on an A100: aten::mm launching a kernel, then a device synchronize; the kernel's
    and the host ops' ``dur`` as given (in µs, as Kineto writes them)."""
    return {"traceEvents": [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 1000.0, "dur": 500.0},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1010.0, "dur": host,
         "args": {"External id": 3}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 1020.0, "dur": host,
         "args": {"correlation": 3, "External id": 3}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "pid": 1, "tid": 1, "ts": 1070.0,
         "dur": host, "args": {"correlation": 4}},
        {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 1100.0, "dur": kernel,
         "args": {"stream": 7, "device": 0, "correlation": 3}}],
        "deviceProperties": [{"name": "NVIDIA A100", "computeMajor": 8, "computeMinor": 0, "totalGlobalMem": 1 << 30}]}


@pytest.mark.parametrize("kernel, host", [(-0.0, 50.0), (-0.0, -0.0), (0.0, 0.0)], ids=["kernel", "all", "zeros"])
def test_durations_of_minus_zero_are_advised_on_without_dividing_by_zero(tmp_path, kernel, host):
    # GIVEN a trace whose only kernel (and, in "all", every host op) has a dur of -0.0 µs
    import json

    path = tmp_path / "zero.pt.trace.json"
    path.write_text(json.dumps(_launching_trace(kernel, host)))
    # WHEN it is advised on (the tensor-core rule divided by the kernels' total time; the
    # synchronize rule indexed an empty union of the host ops)
    advice = npumagic.advise(npumagic.summarize(npumagic.load(path)))
    # THEN no rule raises, and no share of a kernel time of 0 is reported
    assert "tensor_cores" not in {f.rule for f in advice.findings}


@pytest.mark.parametrize("trace_view", [True, False], ids=["with-trace-view", "kernel-details-only"])
def test_a_kernel_of_1e12_us_in_kernel_details_is_skipped_not_taken_as_real(tmp_path, trace_view):
    # GIVEN kernel_details.csv with a MatMul of 1e12 us (11.6 days) beside an Add of 10 us
    import warnings

    from ..fuzz_corpus import KD, KERNEL_HEADER, TV, _ascend

    rank = _ascend(**{KD: f"{KERNEL_HEADER}\n1,7,MatMul_1,MatMul,AI_CORE,1100.000,1000000000000,0\n"
                          "1,7,Add_2,Add,AI_VECTOR_CORE,1200.000,10,0\n", **({} if trace_view else {TV: None})})(tmp_path)
    # WHEN the rank is read and summarised
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trace = npumagic.load(rank)
        summary = npumagic.summarize(trace)
    # THEN the row is counted in the reader's one warning, and no figure holds its 11.6 days
    assert any("kernel_details.csv: 1 of 2 rows skipped (1 Duration longer than the capture)" in str(w.message)
               for w in caught)
    assert list(trace.events.loc[trace.events["kind"] == "kernel", "name"]) == ["Add_2"]
    assert summary.steps["wall_us"].max() < 1_000


@pytest.mark.parametrize("rows, shown", [
    ("1,900,0,0,0,10,500,0,0,20\n2,400,0,0,0,100,500,0,0,20\n", "1 longer than its Stage"),
    ("1,400,0,0,0,100,500,0,0,20\n1,300,0,0,0,200,500,0,0,20\n2,400,0,0,0,100,500,0,0,20\n",
     "2 step listed twice with different figures"),
], ids=["computing-longer-than-its-stage", "step-listed-twice"])
@pytest.mark.filterwarnings("ignore:.*only step_trace_time.csv:UserWarning")  # what such a rank is, said as it always is
def test_step_trace_time_alone_with_impossible_rows_warns_naming_the_file_and_keeps_sane_figures(tmp_path, rows, shown):
    # GIVEN a rank holding only step_trace_time.csv, one step computing 900 us in a 500 us Stage
    # or step 1 listed twice with different figures
    from ..fuzz_corpus import _step_trace_only

    rank = _step_trace_only(rows)(tmp_path)
    # WHEN it is analysed THEN the warning names the file and the rows, and the steps shown are
    # the ones a profiler writes: step 2 alone, computing 400 of its 500 us
    with pytest.warns(UserWarning, match=r"step_trace_time\.csv: \d of \d rows skipped \(" + shown):
        summary = npumagic.analyze(rank)
    steps = summary.steps
    assert list(steps["step"]) == [2] and (steps["computing_us"] <= steps["stage_us"]).all()
    assert steps["computing_us"].iat[0] == 400 and steps["wall_us"].iat[0] == 520


@pytest.mark.parametrize("text", [b"[1, 2, 3]",
                                  b'[{"name": "aten::add", "ph": "X", "cat": "cpu_op", "ts": 1, "dur": 1}, 5]'])
def test_a_whole_array_ending_in_no_event_is_not_called_truncated(tmp_path, text):
    path = tmp_path / "values.json"
    path.write_bytes(text)
    with pytest.raises(TraceError, match=r"values\.json: not a valid Chrome trace JSON \(the event array's last "
                                         r"item is not an event object\)$"):
        npumagic.load(path)
