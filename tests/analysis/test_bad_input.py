"""Bad input gives one clear TraceError naming the file; no input hangs or raises anything else."""

from __future__ import annotations

import shutil

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import npumagic
from npumagic.errors import TraceError

from ..conftest import ASCEND, examples, need, shared_summary, shared_trace


@pytest.mark.parametrize("name, text, message", [
    ("w.pt.trace.json", '{"traceEvents": [{"ph": "X", "name": "aten::mm", "ts": 1, "dur"',
     r"w\.pt\.trace\.json: not a valid Chrome trace JSON.*truncated"),
    ("notes.txt", "hello", r"notes\.txt: unknown format"),
    ("config.json", '{"lr": 0.1}', r"config\.json: no profiler events"),
    ("empty.json", "", r"empty\.json: the file is empty"),
], ids=["truncated", "unknown-format", "json-not-a-trace", "empty-file"])
def test_a_bad_file_names_itself_and_what_was_expected(tmp_path, name, text, message):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(TraceError, match=message):
        npumagic.load(path)


def test_empty_directory(tmp_path):
    with pytest.raises(TraceError, match="no profiler output found .*it is empty"):
        npumagic.load(tmp_path)


def test_the_search_below_a_folder_is_bounded(tmp_path, monkeypatch):
    """A folder of many folders holding no trace (a home directory) is refused after
    NESTED_ENTRIES entries, and a trace deeper than NESTED_DEPTH levels is not looked for."""
    from npumagic.analysis.sources import readers

    deep = tmp_path / "deep" / "a" / "b" / "c" / "d" / "e"  # 5 levels below
    deep.mkdir(parents=True)
    (deep / "w.pt.trace.json").write_text("{}")
    with pytest.raises(TraceError, match=r"no profiler output found .*searched 4 folder levels down"):
        npumagic.load(tmp_path / "deep")
    for i in range(60):
        (tmp_path / "wide" / f"d{i}").mkdir(parents=True)
    monkeypatch.setattr(readers, "NESTED_ENTRIES", 50)
    with pytest.raises(TraceError, match=r"wide: more than 50 files and folders below it, too many to search"):
        npumagic.load(tmp_path / "wide")


def test_missing_path(tmp_path):
    with pytest.raises(TraceError, match="no such file"):
        npumagic.load(tmp_path / "nope")


def test_another_tools_directory(tmp_path):
    (tmp_path / "report.nsys-rep").write_bytes(b"\0\1")
    (tmp_path / "perf.data").write_bytes(b"PERFILE2")
    with pytest.raises(TraceError, match=r"it holds perf\.data, report\.nsys-rep"):
        npumagic.load(tmp_path)


def _ascend_copy(tmp_path):
    src = need(ASCEND / "level1" / "rank0_ascend_pt")
    dst = tmp_path / "rank0_ascend_pt"
    shutil.copytree(src, dst)
    for p in dst.rglob("*"):
        p.chmod(0o644 if p.is_file() else 0o755)
    dst.chmod(0o755)
    return dst


def test_csv_with_missing_columns_names_file_and_columns(tmp_path):
    rank = _ascend_copy(tmp_path)
    (rank / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv").write_text("Step Id,Name\n50,foo\n")
    with pytest.raises(TraceError, match=r"kernel_details\.csv: missing columns \['Type', 'Accelerator Core'"):
        npumagic.load(rank)


def test_a_rank_with_nothing_readable_names_what_it_holds_and_what_is_needed(tmp_path):
    rank = _ascend_copy(tmp_path)
    out = rank / "ASCEND_PROFILER_OUTPUT"
    for name in ("trace_view.json", "kernel_details.csv", "step_trace_time.csv"):
        (out / name).unlink()
    with pytest.raises(TraceError, match=r"ASCEND_PROFILER_OUTPUT: nothing npumagic can read \(it holds "
                                         r"api_statistic\.csv, .*\); a torch_npu rank needs trace_view\.json"):
        npumagic.load(rank)


def test_missing_optional_file_degrades_with_one_warning(tmp_path):
    rank = _ascend_copy(tmp_path)
    (rank / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv").unlink()
    (rank / "ASCEND_PROFILER_OUTPUT" / "communication.json").unlink()
    with pytest.warns(UserWarning, match="no kernel_details.csv"):
        summary = npumagic.analyze(rank)
    # the Ascend Hardware compute tasks stand in for kernel_details
    assert summary.steps.iloc[0]["computing_us"] == pytest.approx(8873.756, rel=0.01)
    assert summary.steps.iloc[0]["communication_us"] == pytest.approx(105991.878, rel=0.01)


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(st.binary(max_size=400), st.text(max_size=400).map(str.encode),
                 st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
                              lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
                                  st.sampled_from(["traceEvents", "ph", "name", "ts", "dur", "cat", "args", "pid"]),
                                  inner, max_size=5), max_leaves=20).map(lambda v: __import__("json").dumps(v).encode())))
def test_fuzzed_trace_files_raise_only_trace_error(tmp_path, data):
    path = tmp_path / "fuzz.pt.trace.json"
    path.write_bytes(data)
    try:
        npumagic.summarize(npumagic.load(path))
    except TraceError:
        pass


EVENT = st.fixed_dictionaries({
    "ph": st.sampled_from(["X", "i", "M", "s", "f"]),
    "cat": st.sampled_from(["cpu_op", "kernel", "user_annotation", "cuda_runtime", "gpu_memcpy", "python_function"]),
    "name": st.sampled_from(["aten::mm", "ProfilerStep#1", "ProfilerStep#2", "ncclKernel_AllReduce", "[memory]",
                             "enumerate(DataLoader)#x", "cudaStreamSynchronize", "process_name"]),
    "ts": st.one_of(st.integers(0, 10**6), st.floats(0, 1e6, allow_nan=False), st.text(max_size=5)),
    "dur": st.one_of(st.integers(-5, 10**4), st.floats(0, 1e4, allow_nan=False)),
    "pid": st.integers(0, 3),
    "tid": st.integers(0, 3),
})


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(EVENT, max_size=40))
def test_fuzzed_event_lists_summarize_or_raise_trace_error(tmp_path, events):
    import json

    path = tmp_path / "fuzz.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    try:
        summary = npumagic.summarize(npumagic.load(path))
    except TraceError:
        return
    assert (summary.steps["computing_us"] >= 0).all()


def _level1_copy(tmp_path):
    """A writable copy of level1/rank0 and the path of its kernel_details.csv."""
    rank = tmp_path / "rank0_ascend_pt"
    shutil.copytree(need(ASCEND / "level1" / "rank0_ascend_pt"), rank, copy_function=shutil.copyfile)
    path = rank / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    path.chmod(0o644)
    return rank, path


def test_a_csv_cut_inside_its_last_row_loses_that_row_and_says_so(tmp_path):
    # GIVEN kernel_details.csv cut 30 kB in (inside a row), as a full disk or an interrupted copy leaves it
    rank, path = _level1_copy(tmp_path)
    text = path.read_bytes()[:30000]
    path.write_bytes(text)
    whole = text.decode().split("\n")[1:-1]  # the rows after the header, the cut one not
    # WHEN it is read THEN the cut row is left out and counted, the whole rows are kept as they are
    with pytest.warns(UserWarning, match=r"kernel_details\.csv: 1 of \d+ rows skipped \(1 cut short where the file ends\)"):
        kept = npumagic.load(rank).kernel_metrics
    assert len(kept) == sum(",HCCL," not in row for row in whole)  # collectives come from the HCCL lanes
    full = shared_trace(ASCEND / "level1" / "rank0_ascend_pt").kernel_metrics
    assert kept["dur_ns"].tolist() == full["dur_ns"].iloc[:len(kept)].tolist()


def test_a_task_listed_twice_counts_once_and_is_said(tmp_path):
    # GIVEN kernel_details.csv with every task row twice (two exports concatenated)
    rank, path = _level1_copy(tmp_path)
    header, *rows = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(header + b"".join(rows) + b"".join(rows))
    # THEN each kernel's count and total are the original's, and the repeats are counted
    with pytest.warns(UserWarning, match=rf"kernel_details\.csv: {len(rows)} of {2 * len(rows)} rows skipped "
                                         rf"\({len(rows)} repeated row\)"):
        twice = npumagic.analyze(rank).kernels
    once = shared_summary(ASCEND / "level1" / "rank0_ascend_pt").kernels
    assert twice[["name", "count", "total_us"]].equals(once[["name", "count", "total_us"]])


def test_a_byte_that_is_no_utf8_costs_its_cell_not_the_rank(tmp_path):
    rank, path = _level1_copy(tmp_path)
    path.write_bytes(path.read_bytes().replace(b"MatMulV2", b"MatMul\xff2", 1))
    with pytest.warns(UserWarning, match=r"kernel_details\.csv: 1 cell held bytes that are no UTF-8"):
        summary = npumagic.analyze(rank)
    assert len(summary.steps) == 1 and any("MatMul\ufffd2" in n for n in summary.kernels["name"])


# -- a device clock glitch: one task stamped an hour away ------------------------------------------
HOUR_US = 3.6e9


def _same_steps_and_kernels(a, b) -> None:
    pd.testing.assert_frame_equal(a.steps, b.steps)
    pd.testing.assert_frame_equal(a.kernels, b.kernels)


def test_a_kernel_stamped_an_hour_after_the_capture_is_read_as_left_out(tmp_path):
    import gzip
    import json

    src = next(need(ASCEND.parent / "cuda" / "rocm_mi250").glob("*.json.gz"))
    doc = json.loads(gzip.open(src).read())
    last = max((i for i, e in enumerate(doc["traceEvents"]) if e.get("cat") == "kernel"),
               key=lambda i: doc["traceEvents"][i]["ts"])  # the last step's last kernel
    (tmp_path / "without.pt.trace.json").write_text(json.dumps({**doc, "traceEvents": [
        e for i, e in enumerate(doc["traceEvents"]) if i != last]}))
    doc["traceEvents"][last]["ts"] += HOUR_US  # it would end its step an hour late
    (tmp_path / "wild.pt.trace.json").write_text(json.dumps(doc))
    with pytest.warns(UserWarning, match=r"wild\.pt\.trace\.json: 1 of \d+ events skipped \(1 device timestamp "
                                         r"outside the capture\)"):
        wild = npumagic.analyze(tmp_path / "wild.pt.trace.json")
    _same_steps_and_kernels(wild, npumagic.analyze(tmp_path / "without.pt.trace.json"))


def test_a_torch_npu_task_stamped_an_hour_away_is_read_as_left_out_and_said_so(tmp_path):
    import csv

    for name in ("wild", "without"):
        (tmp_path / name).mkdir()
        _, path = _level1_copy(tmp_path / name)
        with path.open(newline="") as fh:
            header, *rows = list(csv.reader(fh))
        start = header.index("Start Time(us)")
        if name == "wild":
            rows[50][start] = f"{float(rows[50][start]) + HOUR_US:.3f}"
        else:
            del rows[50]
        with path.open("w", newline="") as fh:
            csv.writer(fh).writerows([header, *rows])
    with pytest.warns(UserWarning, match=r"ASCEND_PROFILER_OUTPUT: 1 device event left out: its timestamp lies "
                                         r"outside the capture"):
        wild = npumagic.load(tmp_path / "wild" / "rank0_ascend_pt")
    without = npumagic.load(tmp_path / "without" / "rank0_ascend_pt")
    _same_steps_and_kernels(npumagic.summarize(wild), npumagic.summarize(without))
    # its AI Core metrics and its L2 sample (l2_cache.csv's row, at its start) went with it
    pd.testing.assert_frame_equal(wild.kernel_metrics, without.kernel_metrics, check_categorical=False)
    unchanged = shared_trace(ASCEND / "level1" / "rank0_ascend_pt").counters
    assert len(wild.counters) == len(unchanged) - 1 and wild.counters["ts_ns"].max() == unchanged["ts_ns"].max()


def test_device_times_offset_from_the_host_clock_as_a_whole_are_all_kept(tmp_path, recwarn):
    # a static offset between the GPU and host clocks (seen on ROCm): every device event is
    # outside the host's window, which is no glitch of one task
    import gzip
    import json

    src = next(need(ASCEND.parent / "cuda" / "rocm_mi250").glob("*.json.gz"))
    doc = json.loads(gzip.open(src).read())
    for e in doc["traceEvents"]:
        if e.get("cat") in ("kernel", "gpu_memcpy"):
            e["ts"] += 2e6
    (tmp_path / "offset.pt.trace.json").write_text(json.dumps(doc))
    trace = npumagic.load(tmp_path / "offset.pt.trace.json")
    assert not [w for w in recwarn if "outside the capture" in str(w.message)]
    assert (trace.events["kind"] == "kernel").sum() == (shared_trace(src).events["kind"] == "kernel").sum()


# -- values no profiler writes: each left out, counted, named, never a figure ----------------------
def _rocm_doc():
    import gzip
    import json

    return json.loads(gzip.open(next(need(ASCEND.parent / "cuda" / "rocm_mi250").glob("*.json.gz"))).read())


def _kernels(doc) -> list[int]:
    return [i for i, e in enumerate(doc["traceEvents"]) if e.get("cat") == "kernel"]


def _huge(doc, dur):
    doc["traceEvents"][_kernels(doc)[-1]]["dur"] = dur
    return doc, _kernels(doc)[-1:]


def _negative_start(doc):
    doc["traceEvents"][_kernels(doc)[-1]]["ts"] = -5.0
    return doc, _kernels(doc)[-1:]


def _every_kernel_twice(doc):
    doc["traceEvents"] += [dict(doc["traceEvents"][i]) for i in _kernels(doc)]
    return doc, list(range(len(doc["traceEvents"]) - len(_kernels(doc)) // 2, len(doc["traceEvents"])))


def _nested_step(doc):
    step = next(e for e in doc["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#"))
    doc["traceEvents"].append({**step, "name": "ProfilerStep#99", "ts": step["ts"] + 1, "dur": step["dur"] / 2})
    return doc, [len(doc["traceEvents"]) - 1]


@pytest.mark.parametrize("edit, said", [
    (lambda d: _huge(d, 2**53), r"1 device timestamp outside the capture"),
    (lambda d: _huge(d, 1e15), r"1 device timestamp outside the capture"),
    (_negative_start, r"1 negative timestamp"),
    (_every_kernel_twice, r"(\d+) repeated device event"),
    (_nested_step, r"1 ProfilerStep inside another"),
], ids=["kernel-2^53-us", "kernel-1e15-us", "negative-start", "every-kernel-twice", "nested-profiler-step"])
def test_a_kineto_value_no_profiler_writes_is_left_out_counted_and_named(tmp_path, edit, said):
    import json

    # GIVEN the ROCm trace with one kind of impossible value, and the same trace without those events
    doc, bad = edit(_rocm_doc())
    (tmp_path / "bad.pt.trace.json").write_text(json.dumps(doc))
    (tmp_path / "without.pt.trace.json").write_text(json.dumps({**doc, "traceEvents": [
        e for i, e in enumerate(doc["traceEvents"]) if i not in set(bad)]}))
    # THEN the warning names them and counts them, and no figure carries them
    with pytest.warns(UserWarning, match=r"bad\.pt\.trace\.json: \d+ of \d+ events skipped \(" + said):
        summary = npumagic.analyze(tmp_path / "bad.pt.trace.json")
    _same_steps_and_kernels(summary, npumagic.analyze(tmp_path / "without.pt.trace.json"))


def _csv_rows(path):
    import csv

    with path.open(newline="") as fh:
        return list(csv.reader(fh))


def _write_rows(path, rows):
    import csv

    with path.open("w", newline="") as fh:
        csv.writer(fh).writerows(rows)


@pytest.mark.parametrize("what", ["task-of-1e12-us", "three-extra-fields"])
def test_a_torch_npu_task_no_profiler_writes_is_left_out_counted_and_named(tmp_path, what):
    # GIVEN level1/rank0 with one kernel_details.csv row broken, and the same rank without that row
    for name in ("bad", "without"):
        (tmp_path / name).mkdir()
        _, path = _level1_copy(tmp_path / name)
        header, *rows = _csv_rows(path)
        if name == "without":
            del rows[50]
        elif what == "task-of-1e12-us":
            rows[50][header.index("Duration(us)")] = "1000000000000"
        else:  # three more fields than the header: pandas shifted every row's cells by them
            rows[50] += ["x", "y", "z"]
            rows.insert(0, rows.pop(50))
        _write_rows(path, [header, *rows])
    said = (r"kernel_details\.csv: 1 of \d+ rows skipped \(1 Duration longer than the capture\)"
            if what == "task-of-1e12-us"
            else r"kernel_details\.csv: 1 of \d+ rows skipped \(1 more fields than the header\)")
    with pytest.warns(UserWarning, match=said):
        bad = npumagic.analyze(tmp_path / "bad" / "rank0_ascend_pt")
    _same_steps_and_kernels(bad, npumagic.analyze(tmp_path / "without" / "rank0_ascend_pt"))


def test_a_collective_with_a_negative_time_or_size_is_left_out_counted_and_named(tmp_path):
    import json

    rank, _ = _level1_copy(tmp_path)
    path = rank / "ASCEND_PROFILER_OUTPUT" / "communication.json"
    path.chmod(0o644)
    doc = json.loads(path.read_text())
    ops = doc["step50"]["collective"]
    first, second = list(ops)[:2]
    ops[first]["Communication Time Info"]["Elapse Time(ms)"] = -79.0
    ops[second]["Communication Bandwidth Info"]["HCCS"]["Transit Size(MB)"] = -28.6
    path.write_text(json.dumps(doc))
    with pytest.warns(UserWarning, match=r"communication\.json: 2 of \d+ collective calls skipped "
                                         r"\(2 negative time or size\)"):
        summary = npumagic.analyze(rank)
    assert (summary.comm["elapsed_us"] >= 0).all() and (summary.comm["transit_mb"] >= 0).all()
    assert (summary.links["transit_mb"] >= 0).all()
    whole = shared_summary(ASCEND / "level1" / "rank0_ascend_pt").comm
    assert summary.comm["count"].sum() == whole["count"].sum() - 2


@pytest.mark.parametrize("rows, said", [
    (lambda r: [r[0], r[0][:1] + [str(float(r[0][1]) * 2)] + r[0][2:]], r"2 step listed twice with different figures"),
    (lambda r: [r[0][:1] + [str(float(r[0][6]) * 3)] + r[0][2:]], r"1 longer than its Stage"),
    (lambda r: [r[0][:1] + ["-5"] + r[0][2:]], r"1 negative time"),
], ids=["step-listed-twice", "computing-longer-than-the-step", "negative-computing"])
def test_a_step_trace_time_row_no_profiler_writes_is_left_out_counted_and_named(tmp_path, rows, said):
    # GIVEN level1/rank0 whose step_trace_time.csv holds an impossible row
    rank, _ = _level1_copy(tmp_path)
    path = rank / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv"
    path.chmod(0o644)
    header, *body = _csv_rows(path)
    assert header[1] == "Computing" and header[6] == "Stage"
    _write_rows(path, [header, *rows(body)])
    # THEN it is named and counted, and the breakdown is the tasks' own (the file's figures are not used)
    with pytest.warns(UserWarning, match=r"step_trace_time\.csv: \d+ of \d+ rows skipped \(" + said):
        summary = npumagic.analyze(rank)
    whole = shared_summary(ASCEND / "level1" / "rank0_ascend_pt")
    pd.testing.assert_frame_equal(summary.steps, whole.steps)
