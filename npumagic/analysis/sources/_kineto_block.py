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

from ._kineto_decode import KinetoArgs, KinetoEvent
from ._numbers import floats_to_ns
from ._stream import _ARRAY_END, decode_events

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
    block = Block()
    if not last:
        events, end = decode_events(_events, text, block, block.counters), len(text)
    else:
        for found in _ARRAY_END.finditer(text, 1):  # the first "}]" that closes a decodable array
            end = found.end() - 1
            try:
                events = decode_events(_events, memoryview(text)[:end + 1], block, block.counters)
                break
            except msgspec.DecodeError as exc:
                if isinstance(exc, msgspec.ValidationError):
                    raise
        else:
            raise msgspec.DecodeError("no end of the event array")
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
    ts, ts_ok = _ns(list(map(_TS, spans)))
    dur, dur_ok = _ns(list(map(_DUR, spans)))
    block.bad = {"bad_timestamp": ~ts_ok, "bad_duration": ~dur_ok, "negative_duration": dur < 0,
                 "negative_timestamp": ts < 0}
    args = list(map(_ARGS, spans))
    if None in args:
        args = [_NO_ARGS if a is None else a for a in args]
    name, block.names = _codes(list(map(_NAME, spans)))
    correlation = np.array(list(map(_CORRELATION, args)), dtype=object)
    absent = np.equal(correlation, None)
    if absent.any():
        correlation[absent] = np.array(list(map(_EXTERNAL, args)), dtype=object)[absent]
    block.columns = {
        "cat": cat, "name": name, "ts": ts, "dur": dur,
        "pid": _narrow(_ints(list(map(_PID, spans)), 0)),
        "tid": _narrow(_ints(list(map(_TID, spans)), 0)),
        "stream": _narrow(_ints(list(map(_STREAM, args)), -1)),
        "device": _narrow(_ints(list(map(_DEVICE, args)), -1)),
        "correlation": _narrow(_ints(correlation, -1)),
    }
    block.columns["shapes"], block.shapes = _shape_codes(list(map(_DIMS, args)))


def _codes(texts: list) -> tuple[np.ndarray, list]:
    """Codes of ``texts`` into their distinct values, in order of first appearance."""
    table = dict.fromkeys(texts)
    distinct = list(table)
    table.update(zip(distinct, range(len(distinct))))
    return np.fromiter(map(table.__getitem__, texts), np.int32, len(texts)), distinct


def _shape_codes(dims: list) -> tuple[np.ndarray, list[str]]:
    """``str(input_dims)`` ("" where absent or empty) as codes: each distinct value printed once
    (lists are no dict keys: the distinct ones are found by their JSON text)."""
    text = list(map(msgspec.json.encode, dims))
    codes, distinct = _codes(text)
    shown = [str(v) if v else "" for v in map(msgspec.json.decode, distinct)]
    return codes, shown


def _ns(values: list) -> tuple[np.ndarray, np.ndarray]:
    """Microsecond times (numbers, decimal strings or None) -> (int64 ns, mask of valid ones)."""
    if set(map(type, values)) <= {float, type(None)}:  # msgspec reads every JSON number of a float field as float
        return floats_to_ns(np.array(values, dtype=np.float64))
    from ._columns import to_ns_checked  # strings: exact decimal conversion (pandas)
    return to_ns_checked(values)


def _ints(values, missing: int) -> np.ndarray:
    """Ids (ints, numeric strings or None) -> int64, ``missing`` where absent."""
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
