"""Bounded reading of trace files: gzip bombs, truncated and corrupt members are refused with a
TraceError naming the file, before the memory is spent; real traces read byte for byte."""

from __future__ import annotations

import gzip
import zlib

import pytest

import npumagic
from npumagic.analysis.sources import _inflate
from npumagic.analysis.sources._inflate import open_trace, read_trace
from npumagic.errors import TraceError

from ..conftest import CUDA, need


def _bomb(path, megabytes: int, byte: bytes = b" ") -> None:
    """A gzip member of ``megabytes`` MiB of one byte, written without holding it in memory."""
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = byte * 2**20
    with open(path, "wb") as fh:
        for _ in range(megabytes):
            fh.write(z.compress(block))
        fh.write(z.flush())


@pytest.mark.parametrize("sample", ["ns_resolution", "legacy_kineto", "rocm_mi250"])
def test_a_real_gzip_trace_reads_exactly_as_gzip_does(sample):
    path = sorted(need(CUDA / sample).glob("*.gz"))[0]
    with gzip.open(path, "rb") as fh:
        assert read_trace(path) == fh.read()


def test_a_whitespace_bomb_is_refused_by_its_ratio_before_it_is_inflated(tmp_path):
    # GIVEN 80 MiB of spaces in a ~80 KB gzip member (1000:1)
    path = tmp_path / "bomb.pt.trace.json.gz"
    _bomb(path, 80)
    stream = open_trace(path)
    # WHEN it is read THEN it is refused once the ratio floor is passed, not at the end
    with pytest.raises(TraceError, match=r"bomb\.pt\.trace\.json\.gz: inflates more than 100:1"):
        while stream.read1(2**20):
            pass
    assert stream.raw.inflated <= _inflate.RATIO_FLOOR + 2**20  # one read past the floor
    with pytest.raises(TraceError, match="gzip bomb"):
        npumagic.load(path)


def test_the_size_limit_refuses_a_member_that_inflates_past_it(tmp_path, monkeypatch):
    path = tmp_path / "big.pt.trace.json.gz"
    path.write_bytes(gzip.compress(b'{"traceEvents": [' + b'{"ph": "X"},' * 300000 + b'{}]}'))
    monkeypatch.setenv("NPUMAGIC_MAX_TRACE_BYTES", str(2**20))
    with pytest.raises(TraceError, match=r"big\.pt\.trace\.json\.gz: inflates past 1,048,576 bytes"):
        npumagic.load(path)


def test_a_plain_file_past_the_size_limit_is_refused_unread(tmp_path, monkeypatch):
    path = tmp_path / "plain.pt.trace.json"
    path.write_bytes(b" " * 5000)
    monkeypatch.setenv("NPUMAGIC_MAX_TRACE_BYTES", "4096")
    with pytest.raises(TraceError, match=r"plain\.pt\.trace\.json: is 5,000 bytes, past the 4,096-byte limit"):
        read_trace(path)


def test_a_truncated_member_says_so(tmp_path):
    path = tmp_path / "cut.pt.trace.json.gz"
    data = gzip.compress(b'{"traceEvents": []}' * 1000)
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceError, match=r"cut\.pt\.trace\.json\.gz: truncated gzip data"):
        npumagic.load(path)


@pytest.mark.parametrize("damage, message", [
    (lambda d: d[:-8] + bytes(8), "corrupt gzip data"),  # CRC and size zeroed
    (lambda d: d[:2] + b"\x00" + d[3:], "corrupt gzip data after 0 inflated bytes"),  # unknown compression method
], ids=["bad-crc", "bad-method"])
def test_corrupt_gzip_names_the_file(tmp_path, damage, message):
    path = tmp_path / "bad.pt.trace.json.gz"
    path.write_bytes(damage(gzip.compress(b'{"traceEvents": []}' * 50)))
    with pytest.raises(TraceError, match=rf"bad\.pt\.trace\.json\.gz: {message}"):
        npumagic.load(path)


def test_gzip_is_recognised_by_content_and_members_concatenate(tmp_path):
    text = b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, "dur": 2, "pid": 1, "tid": 1}]}'
    gz = tmp_path / "named_plain.pt.trace.json"  # gzip data under a plain name
    gz.write_bytes(gzip.compress(text[:40]) + gzip.compress(text[40:]) + bytes(16))  # two members, zero padding
    plain = tmp_path / "named_gzip.pt.trace.json.gz"  # plain JSON under a .gz name
    plain.write_bytes(text)
    assert read_trace(gz) == read_trace(plain) == text
    assert len(npumagic.load(gz).events) == 1


def test_a_bom_before_the_json_is_skipped(tmp_path):
    path = tmp_path / "bom.pt.trace.json"
    path.write_bytes(b'\xef\xbb\xbf{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", '
                     b'"ts": 1, "dur": 2, "pid": 1, "tid": 1}]}')
    assert npumagic.load(path).events["name"].tolist() == ["aten::mm"]


@pytest.mark.parametrize("value", ["abc", "-5", "0"])
def test_a_limit_that_is_not_a_positive_size_is_said_not_ignored(monkeypatch, value):
    from npumagic.analysis.sources._inflate import max_bytes
    from npumagic.errors import NpumagicError

    monkeypatch.setenv("NPUMAGIC_MAX_TRACE_BYTES", value)
    with pytest.raises(NpumagicError, match=f"NPUMAGIC_MAX_TRACE_BYTES='{value}': expected a positive number of bytes"):
        max_bytes()
    monkeypatch.setenv("NPUMAGIC_MAX_TRACE_BYTES", "8e9")
    assert max_bytes() == 8_000_000_000
