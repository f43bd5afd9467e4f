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
from typing import Any, Iterator

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
# a JSON string (kept as it is) or a bare non-finite number, which is no JSON but which Kineto wrote
# before 2021 (kineto#105: "memory bandwidth (GB/s)": inf for a zero-length copy)
# (unrolled, possessive: the alternation form kept a backtracking entry per character, 130x the text)
_STRING_OR_NONFINITE = re.compile(rb'"[^"\\]*+(?:\\.[^"\\]*+)*+"|-?\b(?:inf|Infinity|nan|NaN)\b')
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
        self.nonfinite = 0  # bare inf / nan numbers read as missing values (null)
        self.not_utf8 = 0  # characters that were bytes no UTF-8 (read as U+FFFD)
        self._events = msgspec.json.Decoder(list[event_type])

    def repairs(self) -> str:
        """What was read leniently, in words ("" when nothing was)."""
        said = []
        if self.nonfinite:
            said.append(f"{self.nonfinite} number{'s were' if self.nonfinite > 1 else ' was'} inf or nan (no JSON; "
                        "read as missing)")
        if self.not_utf8:
            said.append(f"{self.not_utf8} character{'s were' if self.not_utf8 > 1 else ' was'} bytes that are no "
                        "UTF-8 (shown as \ufffd)")
        return ", ".join(said)

    def __iter__(self) -> Iterator[list]:
        with open_trace(self.path) as fh:
            yield from self._decode(fh)

    def _decode(self, fh) -> Iterator[list]:
        buf = self._start(fh)
        if buf is None:  # no event array: the whole text was the header
            return
        yield from self._events_after(fh, *buf)

    def _events_after(self, fh, prefix: bytes | None, buf: bytes) -> Iterator[list]:
        """The events from ``buf`` (text at an event's start or a separator) on, then the header."""
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
        self._finish(prefix, buf[1:] + fh.read())

    def _finish(self, prefix: bytes | None, tail: bytes) -> None:
        """Read the fields around the event array (``prefix``, the text before it or None for a
        bare array; ``tail``, the text after its closing ``]``) into :attr:`header`."""
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
        """The events before the last event boundary in ``buf`` and where they end, or None.
        A syntax error inside the events (not one the cut made) moves the search before it, and
        with no boundary left before it is the error: reading more text cannot mend it."""
        end, broken = len(buf), None
        for _ in range(TRIES):
            pos = buf.rfind(b"}", 0, end)
            while pos >= 0 and not _BOUNDARY_AFTER.match(buf, pos + 1):
                pos = buf.rfind(b"}", 0, pos)
            if pos < 0:
                break
            try:
                return self._decode_events(b"[" + buf[:pos + 1] + b"]"), pos + 1
            except msgspec.ValidationError:
                raise  # a complete event of the wrong shape: a real error
            except msgspec.DecodeError as exc:
                at = _syntax_error_at(exc)
                if at is not None and at <= pos:  # text index at is buf[at - 1]: before the cut's "]"
                    end, broken = at - 1, exc
                else:
                    end = pos  # the "}" was inside a string or a nested object
        if broken is not None and pos < 0:
            raise _not_json(self.path, str(broken))
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
            self._lenient(_syntax, b"[" + buf)  # a whole array, yet none of its ends follows an event
            problem = "the event array's last item is not an event object"
        except msgspec.DecodeError as exc:
            problem = str(exc)
        raise _not_json(self.path, problem)

    def _decode_events(self, text: bytes) -> list:
        try:
            return decode_events(self._events, text, self, self.counters)
        except RecursionError:
            raise TraceError(self.path, "JSON nested too deeply to be a Chrome trace") from None

    def _lenient(self, decoder: msgspec.json.Decoder, text: bytes) -> tuple[Any, bytes]:
        return lenient(decoder, text, self)

    def _whole(self, text: bytes) -> RawTrace:
        try:
            return self._lenient(_raw_object, text)[0]
        except msgspec.ValidationError as exc:
            raise TraceError(self.path, f"JSON without the Chrome trace layout ({exc}); expected an object with a "
                                        "'traceEvents' array of event objects, or such an array") from None
        except msgspec.DecodeError as exc:
            raise _not_json(self.path, str(exc)) from None
        except RecursionError:
            raise TraceError(self.path, "JSON nested too deeply to be a Chrome trace") from None


def decode_events(decoder: msgspec.json.Decoder, text, tally, counters: list) -> list:
    """The events of ``text`` (an array, any buffer); its counter samples are added to
    ``counters``. Bare non-finite numbers (``inf``, ``nan``) are read as missing values, bytes
    that are no UTF-8 as U+FFFD, each counted in ``tally`` (``.nonfinite``, ``.not_utf8``)."""
    events, text = lenient(decoder, text, tally)
    if any(e.ph == "C" for e in events):  # the event Structs keep only selected args
        raws = _syntax.decode(text)
        counters += decode_counter_events([r for r, e in zip(raws, events) if e.ph == "C"])
    return events


def lenient(decoder: msgspec.json.Decoder, text, tally) -> tuple[Any, bytes]:
    """``decoder.decode(text)``, retried with bare inf/nan as null and bytes that are no UTF-8
    as U+FFFD (counted in ``tally``) where those made it fail: (the value, the text it was
    decoded from)."""
    try:
        return decoder.decode(text), text
    except msgspec.ValidationError:
        raise  # well-formed, of the wrong shape: nothing to repair
    except msgspec.DecodeError as exc:
        if "truncated" in str(exc) or not _repairable(exc, text):  # the repair scans the whole text:
            raise  # only where a non-finite number or a byte that is no UTF-8 made it fail
        fixed, nonfinite, not_utf8 = _repaired(bytes(text))
        if not (nonfinite or not_utf8):
            raise
        value = decoder.decode(fixed)  # still failing: not JSON for another reason
        tally.nonfinite += nonfinite
        tally.not_utf8 += not_utf8
        return value, fixed


_AT_BYTE = re.compile(r"\(byte (\d+)\)")
_NONFINITE_WORD = re.compile(rb"inf|Infinity|nan|NaN")


def _syntax_error_at(exc: msgspec.DecodeError) -> int | None:
    """Where text that is no JSON fails (msgspec's "(byte N)"); None where the text is only cut
    short or a complete array is followed by more (what a cut can cause)."""
    text = str(exc)
    found = _AT_BYTE.search(text)
    return int(found.group(1)) if found and "trailing characters" not in text else None


def _repairable(exc: msgspec.DecodeError, text: bytes) -> bool:
    """Whether :func:`_repaired` may mend what made ``text`` fail: bytes that are no UTF-8, or a
    bare inf/nan where the decoder stopped."""
    at = _syntax_error_at(exc)
    if at is None:
        return "UTF-8" in str(exc) or "utf-8" in str(exc)
    return _NONFINITE_WORD.search(text, max(0, at - 16), at + 16) is not None


def _not_json(path: Path, problem: str) -> TraceError:
    """The error for text that is no JSON; "truncated" only where the text ends too soon."""
    ends_early = "truncated" in problem or problem == "no end of the event array"
    return TraceError(path, f"not a valid Chrome trace JSON ({problem})" + ("; the file may be truncated" if ends_early
                                                                             else ""))


def _repaired(text: bytes) -> tuple[bytes, int, int]:
    """``text`` with each bare non-finite number (not inside a string) as ``null`` and each byte
    that is no UTF-8 as U+FFFD: (the text, non-finite numbers, characters replaced). Cuts fall
    between events, on ASCII, so no block splits a character."""
    not_utf8 = 0
    try:
        text.decode()
    except UnicodeDecodeError:
        fixed = text.decode(errors="replace")
        not_utf8 = fixed.count("\ufffd") - text.count("\ufffd".encode())
        text = fixed.encode()
    replaced = 0

    def swap(match: re.Match) -> bytes:
        nonlocal replaced
        if match.group()[:1] == b'"':
            return match.group()
        replaced += 1
        return b"null"

    return _STRING_OR_NONFINITE.sub(swap, text), replaced, not_utf8


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
