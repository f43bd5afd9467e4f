"""One block of a Kineto trace's events as numpy columns: the per-block work of the Kineto
reader, done in the reading process for a small file and in decode workers (:mod:`._pool`) for
a large one. numpy and msgspec only (no pandas, unless a block holds ids of a rare type).

Every per-event step is a C loop (``map`` of an attribute getter, ``itertools.compress``,
``dict.fromkeys``): names and shapes become codes into the block's own string table, which the
reader remaps by the distinct strings only (:meth:`Block.remap`).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from itertools import compress
from operator import attrgetter

import msgspec
import numpy as np

from ._kineto_decode import ABSENT, KinetoArgs, KinetoEvent, StrictKinetoEvent
from ._numbers import floats_to_ns
from ._stream import _ARRAY_END, _syntax, decode_events

# Event categories by Kineto schema -> npumagic kind: see kineto.py for their sources
HOST_CATS = {"cpu_op": "host_op", "user_annotation": "annotation", "python_function": "python",
             "cuda_runtime": "runtime", "cuda_driver": "runtime", "privateuse1_runtime": "runtime",
             "privateuse1_driver": "runtime", "xpu_runtime": "runtime", "xpu_driver": "runtime",
             "mtia_runtime": "runtime", "glow_runtime": "runtime", "hpu_op": "runtime"}
DEVICE_CATS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memcpy", "cuda_sync": "sync",
               "mtia_ccp_events": "kernel"}
LEGACY_CATS = {"Operator": "cpu_op", "User annotation": "user_annotation", "Python": "python_function",
               "Runtime": "cuda_runtime", "Driver": "cuda_driver", "Kernel": "kernel", "Memcpy": "gpu_memcpy",
               "Memset": "gpu_memset"}
CATS = list(HOST_CATS) + list(DEVICE_CATS)
CAT_INDEX = {c: i for i, c in enumerate(CATS)}
CAT_INDEX.update({old: CAT_INDEX[new] for old, new in LEGACY_CATS.items()})

_PH, _CAT, _NAME, _TS, _DUR, _PID, _TID, _ARGS = (attrgetter(f) for f in ("ph", "cat", "name", "ts", "dur", "pid",
                                                                          "tid", "args"))
_STREAM, _DEVICE, _CORRELATION, _EXTERNAL, _DIMS = (attrgetter(f) for f in ("stream", "device", "correlation",
                                                                              "external_id", "input_dims"))
_NO_ARGS = KinetoArgs()
_events = msgspec.json.Decoder(list[KinetoEvent])
_strict_events = msgspec.json.Decoder(list[StrictKinetoEvent])


@dataclasses.dataclass
class Block:
    """The columns of one block's complete events of known categories (``spans``), with the
    block's other findings. ``name`` and ``shapes`` are codes into ``names`` and ``shapes``."""

    events: int = 0  # all events of the block, for progress
    columns: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    names: list[str] = dataclasses.field(default_factory=list)
    shapes: list[str] = dataclasses.field(default_factory=list)
    bad: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)  # reason -> mask over the spans
    unread: Counter = dataclasses.field(default_factory=Counter)  # categories of complete events not read
    memory: list = dataclasses.field(default_factory=list)  # "[memory]" instant events
    process_names: dict = dataclasses.field(default_factory=dict)
    counters: list = dataclasses.field(default_factory=list)  # counter samples (ph "C"), all their args
    nonfinite: int = 0  # repairs of the decode (:func:`._stream.lenient`)
    not_utf8: int = 0


def decode_block(text, last: bool = False) -> tuple[Block, int]:
    """Decode ``text`` (a buffer: ``[``, whole events, then ``]``; for the ``last`` block ``[``
    and the rest of the file) into a :class:`Block`, and where its events end in ``text`` (the
    last block: the array's closing ``]``). Raises msgspec's errors for text that is no such array."""
    end = len(text)
    if last:
        for found in _ARRAY_END.finditer(text, 1):  # the first "}]" that closes a decodable array
            end = found.end() - 1
            try:
                _syntax.decode(memoryview(text)[:end + 1])
                break
            except msgspec.DecodeError:
                continue
        else:
            raise msgspec.DecodeError("no end of the event array")
    text = memoryview(text)[:end + 1] if last else text
    block = Block()
    try:
        events = decode_events(_strict_events, text, block, block.counters)
    except msgspec.ValidationError:  # ids as text, null values: each value's type is looked at
        block = Block()
        events = decode_events(_events, text, block, block.counters)
    fill(block, events)
    return block, end


def fill(block: Block, events: list) -> Block:
    """Add the columns of ``events`` (KinetoEvent Structs) to ``block``."""
    block.events = len(events)
    ph_codes, phs = _codes(list(map(_PH, events)))
    if "i" in phs or "M" in phs:
        _instants(block, compress(events, np.isin(ph_codes, [phs.index(p) for p in ("i", "M") if p in phs]).tolist()))
    if "X" not in phs:
        return block
    complete = list(compress(events, (ph_codes == phs.index("X")).tolist()))
    cat_codes, cats = _codes(list(map(_CAT, complete)))
    cat = np.array([CAT_INDEX.get(c, -1) for c in cats], dtype=np.int8)[cat_codes]
    known = cat >= 0
    if not known.all():
        seen = np.bincount(cat_codes[~known], minlength=len(cats))
        block.unread.update({c: int(n) for c, n in zip(cats, seen.tolist()) if n})
        complete, cat = list(compress(complete, known.tolist())), cat[known]
    if complete:
        _spans(block, complete, cat)
    return block


def _instants(block: Block, events) -> None:
    for e in events:
        if e.ph == "i":
            if e.name == "[memory]" and e.args is not None:
                block.memory.append(e)
        elif e.name == "process_name" and e.args is not None:
            block.process_names[e.pid] = str(e.args.name)


def _spans(block: Block, spans: list, cat: np.ndarray) -> None:
    strict = type(spans[0]) is StrictKinetoEvent
    ts, ts_ok = _ns(spans, _TS, strict)
    dur, dur_ok = _ns(spans, _DUR, strict)
    block.bad = {"bad_timestamp": ~ts_ok, "bad_duration": ~dur_ok, "negative_duration": dur < 0,
                 "negative_timestamp": ts < 0}
    args = list(map(_ARGS, spans))
    if not strict and None in args:
        args = [_NO_ARGS if a is None else a for a in args]
    name, block.names = _codes(list(map(_NAME, spans)))
    block.columns = {"cat": cat, "name": name, "ts": ts, "dur": dur,
                     "pid": _narrow(_ints(spans, _PID, 0, strict)), "tid": _narrow(_ints(spans, _TID, 0, strict)),
                     "stream": _narrow(_ints(args, _STREAM, -1, strict)),
                     "device": _narrow(_ints(args, _DEVICE, -1, strict)),
                     "correlation": _narrow(_correlation(args, strict))}
    if strict:  # the JSON text of each, printed once per distinct text
        block.columns["shapes"], block.shapes = _shape_codes(list(map(bytes, map(_DIMS, args))))
    else:
        block.columns["shapes"], block.shapes = _shape_codes(list(map(msgspec.json.encode, map(_DIMS, args))))


def _correlation(args: list, strict: bool) -> np.ndarray:
    """The correlation id of each event, else its External id (-1 where neither is)."""
    if strict:
        correlation, external = _ints(args, _CORRELATION, ABSENT, True), _ints(args, _EXTERNAL, ABSENT, True)
        absent = correlation == ABSENT
        correlation[absent] = external[absent]
        correlation[correlation == ABSENT] = -1
        return correlation
    correlation = np.array(list(map(_CORRELATION, args)), dtype=object)
    absent = np.equal(correlation, None)
    if absent.any():
        correlation[absent] = np.array(list(map(_EXTERNAL, args)), dtype=object)[absent]
    return _ints(correlation, None, -1, False)


def _codes(texts: list) -> tuple[np.ndarray, list]:
    """Codes of ``texts`` into their distinct values, in order of first appearance."""
    table = dict.fromkeys(texts)
    distinct = list(table)
    table.update(zip(distinct, range(len(distinct))))
    return np.fromiter(map(table.__getitem__, texts), np.int32, len(texts)), distinct


def _shape_codes(texts: list[bytes]) -> tuple[np.ndarray, list[str]]:
    """``str(input_dims)`` ("" where absent or empty) as codes, from the JSON text of each:
    each distinct text decoded and printed once (lists are no dict keys)."""
    codes, distinct = _codes(texts)
    shown = [str(v) if v else "" for v in (msgspec.json.decode(t) if t else None for t in distinct)]
    return codes, shown


def _ns(objects: list, field: attrgetter, strict: bool) -> tuple[np.ndarray, np.ndarray]:
    """Microsecond times (numbers, decimal strings or None) -> (int64 ns, mask of valid ones)."""
    if strict:
        return floats_to_ns(np.fromiter(map(field, objects), np.float64, len(objects)))
    values = list(map(field, objects))
    if set(map(type, values)) <= {float, type(None)}:  # msgspec reads every JSON number of a float field as float
        return floats_to_ns(np.array(values, dtype=np.float64))
    from ._columns import to_ns_checked  # strings: exact decimal conversion (pandas)
    return to_ns_checked(values)


def _ints(objects, field: attrgetter | None, missing: int, strict: bool) -> np.ndarray:
    """Ids (ints, numeric strings or None) of ``objects`` (their ``field``) -> int64, ``missing`` where absent."""
    if strict:
        try:
            return np.fromiter(map(field, objects), np.int64, len(objects))
        except (OverflowError, ValueError):  # past int64 (JSON integers reach 2**64 - 1), a pid as text
            strict = False
    values = objects if field is None else list(map(field, objects))
    kinds = set(map(type, values))
    if kinds <= {int, type(None)}:
        try:
            if type(None) not in kinds:
                return np.array(values, dtype=np.int64) if len(values) else np.empty(0, np.int64)
            values = np.array(values, dtype=object)
            values[np.equal(values, None)] = missing
            return values.astype(np.int64)
        except OverflowError:
            pass
    from ._columns import to_int  # ids as text, or past int64 (pandas)
    return to_int(list(values), missing)


def _narrow(ids: np.ndarray) -> np.ndarray:
    """A block's ids as int32 where they all fit (most traces): the blocks' columns are all alive
    together until joined, and joining int32 with int64 blocks gives int64."""
    if ids.size and (ids.min() < -2**31 or ids.max() >= 2**31):
        return ids
    return ids.astype(np.int32)
