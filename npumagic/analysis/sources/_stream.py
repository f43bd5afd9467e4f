"""Streaming decode of a Chrome trace's event array (Kineto ``*.pt.trace.json[.gz]``, torch_npu
``trace_view.json``): memory holds one block of the text, never the whole of it.

The (inflated, size-limited: :mod:`._inflate`) file is read in blocks. The ``traceEvents`` array
(or the top-level array) is cut after the last ``}`` in the block that is followed by ``,`` and
the next ``{``; ``[`` + that prefix + ``]`` is decoded by msgspec straight into event Structs,
which also proves the cut: a ``}`` inside a string or a nested object leaves the prefix
unterminated, the decode fails, and the next earlier candidate is tried. The fields around the
array (``deviceProperties``, ``distributedInfo``, ...) are decoded at the end as the object with
an empty array. Counter samples (``ph: "C"``) are also decoded with all their args
(:class:`~._kineto_decode.CounterEvent`, into :attr:`EventStream.counters`), block by block, so
no slice of the text outlives its block.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

import msgspec

from ...errors import TraceError
from ._inflate import open_trace
from ._kineto_decode import CounterEvent, RawTrace, decode_counter_events

BLOCK = 4 * 2**20  # a block's decoded events cost ~10x its text: keep it small
MAX_EVENT_BYTES = 256 * 2**20  # no profiler event is this long: past it the text is not a trace
TRIES = 8  # candidate cuts per block before reading more
_ARRAY_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_FIRST = re.compile(rb"\S")
_BOUNDARY_AFTER = re.compile(rb"\s*,\s*\{")
_ARRAY_END = re.compile(rb"\}\s*\]")
_BOM = b"\xef\xbb\xbf"
_raw_object = msgspec.json.Decoder(RawTrace)
_syntax = msgspec.json.Decoder(list[msgspec.Raw])


class EventStream:
    """Iterate over the events of a Chrome trace file in decoded chunks.

    Parameters
    ----------
    path : the trace file (plain or gzip).
    event_type : the msgspec Struct each event decodes into.
    block : bytes read at a time (a chunk holds the events of about one block).

    After iteration, :attr:`header` holds the trace's other top-level fields (its
    ``traceEvents`` empty) and :attr:`counters` the counter samples (``ph: "C"``) with all their
    args. Iterating raises :class:`TraceError` naming the file for a file that is empty, not
    JSON, truncated, nested too deeply or past the size limits of :mod:`._inflate`, and
    ``msgspec.ValidationError`` for events of the wrong shape.
    """

    def __init__(self, path: str | Path, event_type: type, block: int = BLOCK) -> None:
        self.path = Path(path)
        self.block = block
        self.header = RawTrace()
        self.counters: list[CounterEvent] = []
        self._events = msgspec.json.Decoder(list[event_type])

    def __iter__(self) -> Iterator[list]:
        with open_trace(self.path) as fh:
            yield from self._decode(fh)

    def _decode(self, fh) -> Iterator[list]:
        buf = self._start(fh)
        if buf is None:  # no event array: the whole text was the header
            return
        prefix, buf = buf
        eof = False
        while True:
            buf = _skip_separator(buf)
            if buf[:1] == b"]":
                break
            cut = self._cut(buf)
            if cut is not None:
                events, end = cut
                yield events
                buf = buf[end:]
                continue
            if eof:
                events, end = self._last(buf)
                if events:
                    yield events
                buf = buf[end:]
                break
            more = fh.read(self.block)
            if not more:
                eof = True
            elif len(buf) > MAX_EVENT_BYTES:
                raise TraceError(self.path, f"not a valid Chrome trace JSON (no end of an event in "
                                            f"{MAX_EVENT_BYTES // 2**20} MiB)")
            buf += more
        tail = buf[1:] + fh.read()
        if prefix is not None:
            self.header = self._whole(prefix + b"[]" + tail)
            self.header.traceEvents = []
        elif _FIRST.search(tail):
            raise TraceError(self.path, "not a valid Chrome trace JSON (text after the event array)")

    def _start(self, fh) -> tuple[bytes | None, bytes] | None:
        """Read up to the event array: (the text before it or None for a bare array, the rest)."""
        buf = fh.read(self.block)
        if buf[:3] == _BOM:
            buf = buf[3:]
        while True:
            if buf.isspace():  # nothing but whitespace yet (bytes.isspace is C; a regex scan is 30x slower)
                buf = b""
            first = _FIRST.search(buf)
            if first is not None:
                if first.group() == b"[":
                    return None, buf[first.end():]
                found = _ARRAY_KEY.search(buf)
                if found is not None:
                    return buf[:found.end() - 1], buf[found.end():]
            more = fh.read(self.block)
            if not more:
                break
            buf += more
        if first is None:
            raise TraceError(self.path, "the file is empty; expected a Chrome trace JSON (torch.profiler output)")
        self.header = self._whole(buf)  # an object without an event array
        return None

    def _cut(self, buf: bytes) -> tuple[list, int] | None:
        """The events before the last event boundary in ``buf`` and where they end, or None."""
        end = len(buf)
        for _ in range(TRIES):
            pos = buf.rfind(b"}", 0, end)
            while pos >= 0 and not _BOUNDARY_AFTER.match(buf, pos + 1):
                pos = buf.rfind(b"}", 0, pos)
            if pos < 0:
                return None
            try:
                return self._decode_events(b"[" + buf[:pos + 1] + b"]"), pos + 1
            except msgspec.ValidationError:
                raise  # a complete event of the wrong shape: a real error
            except msgspec.DecodeError:
                end = pos  # the "}" was inside a string or a nested object
        return None

    def _last(self, buf: bytes) -> tuple[list, int]:
        """At the end of the file: the remaining events up to the array's closing ``]``."""
        # the first "}]" that closes a decodable array: later ones may sit in the fields after it
        for found in _ARRAY_END.finditer(buf):
            pos = found.end() - 1
            try:
                return self._decode_events(b"[" + buf[:pos + 1]), pos
            except msgspec.ValidationError:
                raise
            except msgspec.DecodeError:
                continue
        try:
            _syntax.decode(b"[" + buf)
            problem = "no end of the event array"
        except msgspec.DecodeError as exc:
            problem = str(exc)
        raise TraceError(self.path, f"not a valid Chrome trace JSON ({problem}); the file may be truncated")

    def _decode_events(self, text: bytes) -> list:
        """The events of ``text`` (an array); its counter samples go to :attr:`counters`."""
        try:
            events = self._events.decode(text)
            if any(e.ph == "C" for e in events):  # the event Structs keep only selected args
                raws = _syntax.decode(text)
                self.counters += decode_counter_events([r for r, e in zip(raws, events) if e.ph == "C"])
        except RecursionError:
            raise TraceError(self.path, "JSON nested too deeply to be a Chrome trace") from None
        return events

    def _whole(self, text: bytes) -> RawTrace:
        try:
            return _raw_object.decode(text)
        except msgspec.ValidationError as exc:
            raise TraceError(self.path, f"JSON without the Chrome trace layout ({exc}); expected an object with a "
                                        "'traceEvents' array of event objects, or such an array") from None
        except msgspec.DecodeError as exc:
            raise TraceError(self.path, f"not a valid Chrome trace JSON ({exc}); the file may be truncated") from None
        except RecursionError:
            raise TraceError(self.path, "JSON nested too deeply to be a Chrome trace") from None


def _skip_separator(buf: bytes) -> bytes:
    if buf.isspace():
        return b""
    first = _FIRST.search(buf)
    if first is None:
        return b""
    if first.group() == b",":
        nxt = _FIRST.search(buf, first.end())
        return buf[nxt.start():] if nxt else b""
    return buf[first.start():] if first.start() else buf
