"""The streaming trace decoder: what it yields does not depend on where the blocks end, equals a
one-shot decode of the whole text, and gives today's Summary on every shared trace."""

from __future__ import annotations

import gzip
import json

import msgspec
import pandas as pd
import pytest

import npumagic
from npumagic.analysis.sources import _stream
from npumagic.analysis.sources._kineto_decode import AscendEvent, KinetoEvent, RawTrace
from npumagic.analysis.sources._stream import EventStream
from npumagic.errors import TraceError

from ..conftest import ASCEND, CUDA, need, sampled

KINETO = sorted(CUDA.glob("**/*.json.gz")) if CUDA.exists() else []
TRACE_VIEWS = sorted(ASCEND.glob("level*/rank*_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json")) if ASCEND.exists() else []
TABLES = ("steps", "kernels", "host_ops", "syncs", "comm", "memory", "memory_timeline", "hardware", "l2",
          "frequency_drops", "temporal", "events")


class _Whole(msgspec.Struct):
    traceEvents: list[KinetoEvent] = []


def _one_shot(path, event_type):
    text = gzip.open(path).read() if path.suffix == ".gz" else path.read_bytes()
    if text.lstrip()[:1] == b"[":
        return msgspec.json.decode(text, type=list[event_type]), None
    whole = msgspec.json.decode(text, type=msgspec.defstruct("W", [("traceEvents", list[event_type], [])]))
    return whole.traceEvents, msgspec.json.decode(text, type=RawTrace)


# a current, a legacy and a ROCm Kineto trace and a torch_npu trace_view.json in the quick loop
@pytest.mark.parametrize("path", sampled(sorted(KINETO + TRACE_VIEWS, key=lambda p: not any(
    k in str(p) for k in ("alexnet_sync", "resnet50_nw4", "rocm", "level0/rank0"))), keep=4),
    ids=lambda p: f"{p.parent.parent.name}/{p.name}")
@pytest.mark.parametrize("block", sampled([4096, 65537]))
def test_streamed_events_equal_a_one_shot_decode(path, block):
    # GIVEN a genuine trace WHEN it is streamed in small blocks (thousands of cuts, some inside
    # strings and nested args) THEN the events and header are those of one decode of the text
    event_type = AscendEvent if path.name == "trace_view.json" else KinetoEvent
    expected, header = _one_shot(path, event_type)
    stream = EventStream(path, event_type, block=block)
    got = [e for chunk in stream for e in chunk]
    assert len(got) == len(expected) and got == expected
    # counter samples keep all their args, wherever the blocks end
    whole = EventStream(path, event_type, block=2**30)
    list(whole)
    assert stream.counters == whole.counters
    assert len(stream.counters) == sum(e.ph == "C" for e in expected)
    if header is not None:
        assert stream.header.deviceProperties == header.deviceProperties
        assert stream.header.distributedInfo == header.distributedInfo


# a Kineto trace and a torch_npu rank in the quick loop, every shared trace under --slow
_WHOLE = [p for p in KINETO if "legacy" not in str(p)] + (sorted(ASCEND.glob("level*/rank*_ascend_pt"))
                                                          if ASCEND.exists() else [])


@pytest.mark.parametrize("path", sampled(sorted(_WHOLE, key=lambda p: ("alexnet_sync" not in str(p),
                                                                           "level1/rank0" not in str(p))), keep=2), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_summary_does_not_depend_on_the_block_size(path, monkeypatch):
    whole = npumagic.summarize(npumagic.load(path))
    monkeypatch.setattr(_stream, "BLOCK", 4096)
    monkeypatch.setattr(EventStream.__init__, "__defaults__", (4096,))
    small = npumagic.summarize(npumagic.load(path))
    for table in TABLES:
        pd.testing.assert_frame_equal(getattr(whole, table), getattr(small, table), obj=table)
    assert whole.meta == small.meta


TRICKY = [
    {"ph": "X", "cat": "cpu_op", "name": 'a}, {"b": 1}, {', "pid": 1, "tid": 1, "ts": 1.5, "dur": 2,
     "args": {"Input Dims": [[1, 2], []], "nested": [{"x": "}, {"}, {"y": "}]"}]}},
    {"ph": "X", "cat": "kernel", "name": "k}]", "pid": 0, "tid": 7, "ts": 2, "dur": 1, "args": {"stream": 7}},
    {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": 3,
     "args": {"Total Allocated": 10, "Device Type": 0}},
    {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python}, {"}},
]


@pytest.mark.parametrize("layout", ["object", "object-fields-after", "array", "pretty"])
def test_every_block_size_gives_the_same_events(tmp_path, layout):
    # a "}, {" or "}]" inside strings and nested objects is never taken for an event boundary
    if layout == "array":
        text = json.dumps(TRICKY)
    elif layout == "pretty":
        text = json.dumps({"schemaVersion": 1, "traceEvents": TRICKY}, indent=2)
    elif layout == "object":
        text = json.dumps({"deviceProperties": [{"name": "GPU]"}], "traceEvents": TRICKY})
    else:
        text = json.dumps({"traceEvents": TRICKY, "traceName": "x}]", "distributedInfo": {"rank": 3},
                           "logs": ["[a] }]", "]"]})
    path = tmp_path / "t.pt.trace.json"
    path.write_text(text)
    expected = msgspec.json.decode(json.dumps(TRICKY), type=list[KinetoEvent])
    for block in range(1, len(text) + 2):
        stream = EventStream(path, KinetoEvent, block=block)
        assert [e for chunk in stream for e in chunk] == expected, block
        if layout == "object-fields-after":
            assert stream.header.distributedInfo == {"rank": 3}


@pytest.mark.parametrize("text, message", [
    ('{"traceEvents": [{"ph": "X"}, {"ph": "X", "na', "not a valid Chrome trace JSON.*truncated"),
    ('[{"ph": "X"}] [', "not a valid Chrome trace JSON \\(text after the event array"),
    ('{"traceEvents": [{"ph": "X"}], "deviceProperties": 5}', "JSON without the Chrome trace layout"),
    ("   \n ", "the file is empty"),
    # malformed, not cut short: no word of truncation
    ('{"traceEvents": [{"ph": "X", "ts": 1 2}]}', "not a valid Chrome trace JSON \\(JSON is malformed: .*\\(byte 21\\)\\)$"),
])
def test_bad_text_is_a_trace_error_naming_the_file(tmp_path, text, message):
    path = tmp_path / "bad.pt.trace.json"
    path.write_text(text)
    with pytest.raises(TraceError, match=f"bad\\.pt\\.trace\\.json: {message}"):
        list(EventStream(path, KinetoEvent, block=7))


def test_an_event_of_the_wrong_shape_is_a_validation_error(tmp_path):
    path = tmp_path / "bad.pt.trace.json"
    path.write_text('{"traceEvents": [{"ph": "X", "name": 5}, {"ph": "X"}]}')
    with pytest.raises(msgspec.ValidationError, match="Expected `str`"):
        list(EventStream(path, KinetoEvent, block=8))


def test_text_with_no_end_of_an_event_is_refused_without_reading_it_all(tmp_path, monkeypatch):
    monkeypatch.setattr(_stream, "MAX_EVENT_BYTES", 1000)
    path = tmp_path / "bad.pt.trace.json"
    path.write_text('{"traceEvents": [{"name": "' + "x" * 5000 + '"}]}')
    with pytest.raises(TraceError, match="no end of an event"):
        list(EventStream(path, KinetoEvent, block=100))


def test_the_shared_samples_are_there():
    need(CUDA)
    need(ASCEND)
    assert KINETO and TRACE_VIEWS


def test_counter_samples_are_decoded_with_all_their_args(tmp_path):
    events = [{"ph": "C", "name": "HBM 0", "pid": 3, "ts": 1.0, "args": {"Read": 1.5, "Write": "2"}},
              {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 2},
              {"ph": "C", "name": "AI Core Freq", "pid": 3, "ts": 2.0, "args": {"MHz": 1800}}]
    path = tmp_path / "c.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    for block in (1, 7, 64, 4096):
        stream = EventStream(path, KinetoEvent, block=block)
        list(stream)
        assert [(c.name, c.args) for c in stream.counters] == [("HBM 0", {"Read": 1.5, "Write": "2"}),
                                                               ("AI Core Freq", {"MHz": 1800})], block


def test_a_gzip_bomb_is_refused_while_streaming(tmp_path):
    # the stream reads through _inflate: its ratio limit holds without the whole text in memory
    path = tmp_path / "bomb.pt.trace.json.gz"
    with gzip.open(path, "wb") as fh:
        fh.write(b'{"traceEvents": [' + b" " * (80 * 2**20) + b"]}")
    with pytest.raises(TraceError, match="bomb\\.pt\\.trace\\.json\\.gz: inflates more than 100:1"):
        list(EventStream(path, KinetoEvent))


def test_a_bom_is_skipped(tmp_path):
    path = tmp_path / "bom.pt.trace.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"traceEvents": TRICKY[:2]}).encode())
    assert [e for chunk in EventStream(path, KinetoEvent, block=5) for e in chunk] == \
        msgspec.json.decode(json.dumps(TRICKY[:2]), type=list[KinetoEvent])


def test_whitespace_longer_than_a_block_before_and_between_events_is_skipped(tmp_path):
    # blocks of nothing but whitespace are dropped as they come (a whitespace bomb is refused in
    # a fraction of a second), never taken for the end of the text
    pad = b" \n\t" * 5000
    text = pad + b'{"traceEvents": [' + pad + json.dumps(TRICKY[0]).encode() + b"," + pad \
        + json.dumps(TRICKY[1]).encode() + pad + b"]}" + pad
    path = tmp_path / "padded.pt.trace.json"
    path.write_bytes(text)
    expected = msgspec.json.decode(json.dumps(TRICKY[:2]), type=list[KinetoEvent])
    for block in (4096, 65537):
        assert [e for chunk in EventStream(path, KinetoEvent, block=block) for e in chunk] == expected, block
