"""The adversarial reader corpus: each case is a small valid Kineto trace or torch_npu rank
directory with one thing broken, written on demand (no stored binaries).

``python tests/fuzz_corpus.py DIR`` writes every case under DIR; the tests call :func:`build`.
Each case says what it must give: a TraceError whose message matches ``expect`` (and names the
file), or ``note``: it loads, and a warning counting its bad rows matches ``expect``.
"""

from __future__ import annotations

import gzip
import json
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

DEEP = 100_000  # far past any JSON parser's recursion limit
HUGE = 10**30  # past int64 and uint64


@dataclass(frozen=True)
class Case:
    name: str
    write: Callable[[Path], Path]  # writes the case under a directory, returns the path to load
    expect: str  # regex the message must match
    kind: str = "error"  # "error": TraceError; "note": loads, with one warning counting bad rows; "ok": loads


def kineto_events(step: object = 1, ts: object = 1000.0, dur: object = 500.0) -> list[dict]:
    return [
        {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1, "tid": 1, "ts": ts, "dur": dur},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1010.0, "dur": 50.0,
         "args": {"External id": 3, "Input Dims": [[4, 4], [4, 4]]}},
        {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 1100.0, "dur": 40.0,
         "args": {"stream": 7, "device": 0, "correlation": 3}},
    ]


def kineto_trace(**overrides) -> dict:
    trace = {"traceEvents": kineto_events(), "deviceProperties": [{"name": "Fuzz GPU", "totalGlobalMem": 1 << 30}],
             "distributedInfo": {"rank": 0, "world_size": 1}}
    trace.update(overrides)
    return trace


def _kineto(text: str | bytes | Callable[[], bytes], name: str = "fuzz.pt.trace.json") -> Callable[[Path], Path]:
    """Writes ``text`` (or what calling it returns: a bomb is made only when its case runs)."""
    def write(directory: Path) -> Path:
        path = directory / name
        data = text() if callable(text) else text
        path.write_bytes(data if isinstance(data, bytes) else data.encode())
        return path
    return write


def _kj(obj: object, name: str = "fuzz.pt.trace.json") -> Callable[[Path], Path]:
    return _kineto(json.dumps(obj), name)


def _bomb(megabytes: int) -> bytes:
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    return b"".join(z.compress(b" " * 2**20) for _ in range(megabytes)) + z.flush()


# -- a minimal torch_npu rank directory --------------------------------------------------------------
KERNEL_HEADER = "Step Id,Stream ID,Name,Type,Accelerator Core,Start Time(us),Duration(us),Wait Time(us)"


def ascend_files() -> dict[str, str]:
    trace_view = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "Python"}},
        {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "Ascend Hardware"}},
        {"ph": "M", "name": "thread_name", "pid": 2, "tid": 7, "args": {"name": "Stream 7"}},
        {"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": "1000.000", "dur": "500"},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": "1010.000", "dur": "50"},
        {"ph": "X", "name": "MatMul_1", "pid": 2, "tid": 7, "ts": "1100.000", "dur": "40",
         "args": {"Task Type": "AI_CORE"}},
        {"ph": "X", "name": "Add_2", "pid": 2, "tid": 7, "ts": "1200.000", "dur": "10",
         "args": {"Task Type": "AI_VECTOR_CORE"}},
    ]
    return {
        "ASCEND_PROFILER_OUTPUT/trace_view.json": json.dumps(trace_view),
        "ASCEND_PROFILER_OUTPUT/kernel_details.csv": (f"{KERNEL_HEADER}\n1,7,MatMul_1,MatMul,AI_CORE,1100.000,40,0\n"
                                                      "1,7,Add_2,Add,AI_VECTOR_CORE,1200.000,10,0\n"),
        "ASCEND_PROFILER_OUTPUT/communication.json": json.dumps({"step1": {"collective": {}, "p2p": {}}}),
        "ASCEND_PROFILER_OUTPUT/memory_record.csv": ("Component,Timestamp(us),Total Allocated(MB),Total Reserved(MB),"
                                                     "Device Type\nPTA,1000.000,1.5,2.0,NPU:0\n"),
        "profiler_info_0.json": json.dumps({"rank_id": 0, "config": {}}),
        "profiler_metadata.json": json.dumps({"ENV_VARIABLES": {"TASK_QUEUE_ENABLE": "1"}}),
    }


def _ascend(**changes: str | bytes | None) -> Callable[[Path], Path]:
    """A rank directory with files replaced (``a__b`` for ``a/b``); None removes the file."""
    def write(directory: Path) -> Path:
        rank = directory / "rank0_ascend_pt"
        files: dict[str, str | bytes | None] = dict(ascend_files())
        files.update({k.replace("__", "/").replace("_DOT_", "."): v for k, v in changes.items()})
        for rel, text in files.items():
            if text is None:
                continue
            path = rank / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(text if isinstance(text, bytes) else text.encode())
        return rank
    return write


TV = "ASCEND_PROFILER_OUTPUT__trace_view_DOT_json"
KD = "ASCEND_PROFILER_OUTPUT__kernel_details_DOT_csv"
CJ = "ASCEND_PROFILER_OUTPUT__communication_DOT_json"
MR = "ASCEND_PROFILER_OUTPUT__memory_record_DOT_csv"
PI = "profiler_info_0_DOT_json"
PM = "profiler_metadata_DOT_json"


ST = "ASCEND_PROFILER_OUTPUT__step_trace_time_DOT_csv"
STEP_TRACE_HEADER = ("Step,Computing,Communication(Not Overlapped),Overlapped,Communication,Free,Stage,Bubble,"
                     "Communication(Not Overlapped and Exclude Receive),Preparing")


def _step_trace_only(rows: str) -> Callable[[Path], Path]:
    """A rank holding step_trace_time.csv alone (torch_npu's own breakdown) with these rows."""
    return _ascend(**{ST: f"{STEP_TRACE_HEADER}\n{rows}", TV: None, KD: None, CJ: None})


def _comm(op: dict) -> str:
    return json.dumps({"step1": {"collective": {"hcom_allReduce__1@2": op}, "p2p": {}}})


def _tv_with(**fields) -> str:
    events = json.loads(ascend_files()["ASCEND_PROFILER_OUTPUT/trace_view.json"])
    events[5].update(fields)
    return json.dumps(events)


def cases() -> list[Case]:
    """Every corpus case, named by what is broken."""
    deep = "[" * DEEP + "]" * DEEP
    return [
        # -- Kineto: JSON and gzip ------------------------------------------------------------------
        Case("kineto-truncated", _kineto(json.dumps(kineto_trace())[:150]), r"fuzz\.pt\.trace\.json: not a valid"),
        Case("kineto-deep-document", _kineto(deep), r"fuzz\.pt\.trace\.json: .*nested too deeply"),
        Case("kineto-deep-args", _kineto(json.dumps(kineto_trace()).replace('"Input Dims": [[4, 4], [4, 4]]',
                                                                               f'"Input Dims": {deep}')),
             r"fuzz\.pt\.trace\.json: .*nested too deeply"),
        # no JSON, but Python's json.dumps writes NaN and Kineto before 2021 wrote inf (kineto#105)
        Case("kineto-nan-literal", _kineto(json.dumps(kineto_trace()).replace("1010.0", "NaN")),
             r"fuzz\.pt\.trace\.json: .*1 number was inf or nan \(no JSON; read as missing\)", kind="note"),
        Case("kineto-inf-bandwidth", _kineto(json.dumps(kineto_trace()).replace(
            '"correlation": 3}', '"correlation": 3, "memory bandwidth (GB/s)": inf}')),
             r"fuzz\.pt\.trace\.json: 1 number was inf or nan", kind="note"),
        Case("kineto-inf-in-header", _kineto(json.dumps(kineto_trace()).replace('"totalGlobalMem": 1073741824',
                                                                                '"totalGlobalMem": inf')),
             r"fuzz\.pt\.trace\.json: 1 number was inf or nan", kind="note"),
        Case("kineto-latin1-name", _kineto(json.dumps(kineto_trace()).encode().replace(b"gemm", b"gemm\xe9")),
             r"fuzz\.pt\.trace\.json: 1 character was bytes that are no UTF-8", kind="note"),
        Case("kineto-gzip-truncated", _kineto(gzip.compress(json.dumps(kineto_trace()).encode())[:60],
                                              "fuzz.pt.trace.json.gz"), r"fuzz\.pt\.trace\.json\.gz: truncated gzip"),
        Case("kineto-gzip-bad-crc", _kineto(gzip.compress(json.dumps(kineto_trace()).encode())[:-8] + bytes(8),
                                            "fuzz.pt.trace.json.gz"), r"fuzz\.pt\.trace\.json\.gz: corrupt gzip"),
        Case("kineto-gzip-bomb", _kineto(lambda: _bomb(80), "fuzz.pt.trace.json.gz"), r"fuzz\.pt\.trace\.json\.gz: .*gzip bomb"),
        Case("kineto-bom", _kineto(b"\xef\xbb\xbf" + json.dumps(kineto_trace()).encode()), r"", kind="ok"),
        # -- Kineto: shapes ---------------------------------------------------------------------------
        Case("kineto-events-object", _kj(kineto_trace(traceEvents={"a": 1})), r"fuzz\.pt\.trace\.json: .*traceEvents"),
        Case("kineto-events-not-objects", _kj(kineto_trace(traceEvents=[1, "x", None])),
             r"fuzz\.pt\.trace\.json: .*event"),
        Case("kineto-device-properties-object", _kj(kineto_trace(deviceProperties={"name": "x"})),
             r"fuzz\.pt\.trace\.json: .*deviceProperties"),
        Case("kineto-distributed-info-list", _kj(kineto_trace(distributedInfo=[0, 1])),
             r"fuzz\.pt\.trace\.json: .*distributedInfo"),
        Case("kineto-args-list", _kj(kineto_trace(traceEvents=[{**e, "args": [1, 2]} for e in kineto_events()])),
             r"fuzz\.pt\.trace\.json: .*event"),
        Case("kineto-document-list-of-numbers", _kj([1, 2, 3]), r"fuzz\.pt\.trace\.json: .*event"),
        Case("kineto-document-string", _kj("traceEvents"), r"fuzz\.pt\.trace\.json: .*(object|Chrome)"),
        # -- Kineto: numbers ------------------------------------------------------------------------
        Case("kineto-huge-rank", _kj(kineto_trace(distributedInfo={"rank": HUGE})), r"fuzz\.pt\.trace\.json: .*rank"),
        Case("kineto-text-rank", _kj(kineto_trace(distributedInfo={"rank": "zero"})), r"fuzz\.pt\.trace\.json: .*rank"),
        Case("kineto-huge-world-size", _kj(kineto_trace(distributedInfo={"rank": 0, "world_size": HUGE})),
             r"fuzz\.pt\.trace\.json: .*world_size"),
        Case("kineto-huge-step-number", _kj(kineto_trace(traceEvents=kineto_events(step=HUGE))),
             r"1 of 3 events .*step number", kind="note"),
        Case("kineto-huge-ts", _kj(kineto_trace(traceEvents=kineto_events(ts=HUGE))), r"1 of 3 events", kind="note"),
        Case("kineto-huge-float-ts", _kj(kineto_trace(traceEvents=kineto_events(ts=1e300))), r"1 of 3 events",
             kind="note"),
        Case("kineto-text-ts", _kj(kineto_trace(traceEvents=kineto_events(ts="soon"))), r"1 of 3 events", kind="note"),
        Case("kineto-nan-text-ts", _kj(kineto_trace(traceEvents=kineto_events(ts="NaN"))), r"1 of 3 events",
             kind="note"),
        Case("kineto-negative-duration", _kj(kineto_trace(traceEvents=kineto_events(dur=-5))),
             r"1 of 3 events .*negative duration", kind="note"),
        Case("kineto-missing-duration", _kj(kineto_trace(traceEvents=kineto_events(dur=None))), r"1 of 3 events",
             kind="note"),
        # -- torch_npu: JSON side files ---------------------------------------------------------------
        Case("ascend-communication-deep", _ascend(**{CJ: deep}), r"communication\.json: .*nested too deeply"),
        Case("ascend-communication-list", _ascend(**{CJ: "[1, 2]"}), r"communication\.json: .*expected a JSON object"),
        Case("ascend-communication-step-list", _ascend(**{CJ: json.dumps({"step1": [1]})}),
             r"communication\.json: .*expected a JSON object"),
        Case("ascend-communication-group-list", _ascend(**{CJ: json.dumps({"step1": {"collective": [1]}})}),
             r"communication\.json: .*expected a JSON object"),
        Case("ascend-communication-text-time",
             _ascend(**{CJ: _comm({"Communication Time Info": {"Elapse Time(ms)": "slow"}})}),
             r"communication\.json: .*Elapse Time\(ms\)"),
        Case("ascend-communication-huge-step", _ascend(**{CJ: json.dumps({f"step{HUGE}": {"collective": {}}})}),
             r"communication\.json: .*step"),
        Case("ascend-communication-info-list",
             _ascend(**{CJ: _comm({"Communication Time Info": [1], "Communication Bandwidth Info": []})}),
             r"communication\.json: .*expected a JSON object"),
        Case("ascend-metadata-deep", _ascend(**{PM: deep}), r"profiler_metadata\.json: .*nested too deeply"),
        Case("ascend-metadata-list", _ascend(**{PM: "[]"}), r"profiler_metadata\.json: .*expected a JSON object"),
        Case("ascend-metadata-env-list", _ascend(**{PM: json.dumps({"ENV_VARIABLES": [1]})}),
             r"profiler_metadata\.json: .*ENV_VARIABLES"),
        Case("ascend-info-huge-rank", _ascend(**{PI: json.dumps({"rank_id": HUGE})}), r"profiler_info_0\.json: .*rank_id"),
        Case("ascend-info-text-rank", _ascend(**{PI: json.dumps({"rank_id": "zero"})}),
             r"profiler_info_0\.json: .*rank_id"),
        Case("ascend-info-config-list", _ascend(**{PI: json.dumps({"rank_id": 0, "config": [1]})}),
             r"profiler_info_0\.json: .*config"),
        Case("ascend-info-bom", _ascend(**{PI: b"\xef\xbb\xbf" + json.dumps({"rank_id": 0}).encode()}), r"", kind="ok"),
        # -- torch_npu: trace_view.json -----------------------------------------------------------------
        # a damaged trace_view.json: the rank is read from kernel_details.csv, as without it, and said
        Case("ascend-trace-view-object-events", _ascend(**{TV: json.dumps({"traceEvents": {"a": 1}})}),
             r"trace_view\.json unreadable \(.*traceEvents.*\), so read with no trace_view\.json", kind="note"),
        Case("ascend-trace-view-deep", _ascend(**{TV: deep}),
             r"trace_view\.json unreadable \(.*nested too deeply.*\), so read with no trace_view\.json", kind="note"),
        Case("ascend-trace-view-bom", _ascend(**{TV: b"\xef\xbb\xbf" + ascend_files()[
            "ASCEND_PROFILER_OUTPUT/trace_view.json"].encode()}), r"", kind="ok"),
        Case("ascend-trace-view-text-ts", _ascend(**{TV: _tv_with(ts="soon")}), r"1 of 4 events", kind="note"),
        Case("ascend-trace-view-nan-ts", _ascend(**{TV: _tv_with(ts="nan")}), r"1 of 4 events", kind="note"),
        Case("ascend-trace-view-huge-ts", _ascend(**{TV: _tv_with(ts="9" * 40)}), r"1 of 4 events", kind="note"),
        Case("ascend-trace-view-negative-dur", _ascend(**{TV: _tv_with(dur="-3")}), r"1 of 4 events .*negative",
             kind="note"),
        # -- torch_npu: kernel_details.csv --------------------------------------------------------------
        Case("ascend-kernels-header-only", _ascend(**{KD: KERNEL_HEADER + "\n"}), r"kernel_details\.csv: no kernel rows",
             kind="note"),
        Case("ascend-kernels-bom", _ascend(**{KD: "\ufeff" + ascend_files()["ASCEND_PROFILER_OUTPUT/kernel_details.csv"]}),
             r"", kind="ok"),
        Case("ascend-kernels-empty-file", _ascend(**{KD: ""}), r"kernel_details\.csv: not a readable CSV"),
        Case("ascend-kernels-binary", _ascend(**{KD: b"\x00\xff\xfe" * 100}), r"kernel_details\.csv: not a readable CSV"),
        Case("ascend-kernels-text-duration",
             _ascend(**{KD: f"{KERNEL_HEADER}\n1,7,MatMul_1,MatMul,AI_CORE,1100.000,forty,0\n"
                            "1,7,Add_2,Add,AI_VECTOR_CORE,1200.000,10,0\n"}),
             r"kernel_details\.csv: 1 of 2 rows .*Duration", kind="note"),
        Case("ascend-kernels-negative-duration",
             _ascend(**{KD: f"{KERNEL_HEADER}\n1,7,MatMul_1,MatMul,AI_CORE,1100.000,-40,0\n"
                            "1,7,Add_2,Add,AI_VECTOR_CORE,1200.000,10,0\n"}),
             r"kernel_details\.csv: 1 of 2 rows .*negative", kind="note"),
        Case("ascend-kernels-huge-start",
             _ascend(**{KD: f"{KERNEL_HEADER}\n1,7,MatMul_1,MatMul,AI_CORE,{'9' * 40},40,0\n"
                            "1,7,Add_2,Add,AI_VECTOR_CORE,1200.000,10,0\n"}),
             r"kernel_details\.csv: 1 of 2 rows", kind="note"),
        # a duration of 1e12 us (11.6 days) beside a task of 10 us: skipped and counted, with the
        # host lanes of trace_view.json and without them (nothing but the file to judge it by)
        Case("ascend-kernels-absurd-duration",
             _ascend(**{KD: f"{KERNEL_HEADER}\n1,7,MatMul_1,MatMul,AI_CORE,1100.000,1000000000000,0\n"
                            "1,7,Add_2,Add,AI_VECTOR_CORE,1200.000,10,0\n"}),
             r"kernel_details\.csv: 1 of 2 rows .*Duration longer than the capture", kind="note"),
        Case("ascend-kernels-absurd-duration-no-trace-view",
             _ascend(**{KD: f"{KERNEL_HEADER}\n1,7,MatMul_1,MatMul,AI_CORE,1100.000,1000000000000,0\n"
                            "1,7,Add_2,Add,AI_VECTOR_CORE,1200.000,10,0\n", TV: None}),
             r"kernel_details\.csv: 1 of 2 rows .*Duration longer than the capture", kind="note"),
        Case("ascend-kernels-repeated-header",
             _ascend(**{KD: f"{KERNEL_HEADER}\n1,7,MatMul_1,MatMul,AI_CORE,1100.000,40,0\n{KERNEL_HEADER}\n"
                            "1,7,Add_2,Add,AI_VECTOR_CORE,1200.000,10,0\n"}),
             r"kernel_details\.csv: 1 of 3 rows .*header", kind="note"),
        Case("ascend-kernels-duplicate-column",
             _ascend(**{KD: f"{KERNEL_HEADER},Name\n1,7,MatMul_1,MatMul,AI_CORE,1100.000,40,0,x\n"
                            "1,7,Add_2,Add,AI_VECTOR_CORE,1200.000,10,0,y\n"}),
             r"kernel_details\.csv: duplicate column 'Name'", kind="note"),
        # -- torch_npu: step_trace_time.csv alone ----------------------------------------------------------
        Case("ascend-step-trace-computing-longer-than-stage",
             _step_trace_only("1,900,0,0,0,10,500,0,0,20\n2,400,0,0,0,100,500,0,0,20\n"),
             r"step_trace_time\.csv: 1 of 2 rows skipped \(1 longer than its Stage\)", kind="note"),
        Case("ascend-step-trace-step-listed-twice",
             _step_trace_only("1,400,0,0,0,100,500,0,0,20\n1,300,0,0,0,200,500,0,0,20\n2,400,0,0,0,100,500,0,0,20\n"),
             r"step_trace_time\.csv: 2 of 3 rows skipped \(2 step listed twice with different figures\)", kind="note"),
        Case("ascend-step-trace-no-good-row", _step_trace_only("1,900,0,0,0,10,500,0,0,20\n"),
             r"step_trace_time\.csv: none of its 1 step rows is one a profiler writes"),
        Case("ascend-memory-text", _ascend(**{MR: "Component,Timestamp(us),Total Allocated(MB),Total Reserved(MB)\n"
                                                  "PTA,1000.000,lots,2.0\nPTA,1001.000,1.0,2.0\n"}),
             r"memory_record\.csv: 1 of 2 rows", kind="note"),
    ]


def build(directory: Path) -> list[tuple[Case, Path]]:
    """Write every case into its own folder under ``directory``; return (case, path to load)."""
    out = []
    for case in cases():
        folder = Path(directory) / case.name
        folder.mkdir(parents=True, exist_ok=True)
        out.append((case, case.write(folder)))
    return out


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "fuzz_corpus")
    for case, path in build(target):
        print(f"{case.kind:5} {case.name:40} {path}")
