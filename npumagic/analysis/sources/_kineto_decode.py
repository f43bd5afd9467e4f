"""Typed, field-selective decoding of Chrome-trace JSON (Kineto and torch_npu trace_view.json).

msgspec decodes straight into small Structs holding only the fields the analyses use, one block
of the file at a time (:mod:`._stream`); the Kineto reader turns each chunk into numpy columns
and drops it (:mod:`.kineto`). Structs use ``gc=False``: they never form reference cycles, and
a million GC-tracked objects would make every collection walk them all.
"""

from __future__ import annotations

from typing import Any, Union

import msgspec

Num = Union[float, str, None]  # torch_npu writes timestamps as strings; Kineto as numbers
Id = Union[int, str, None]


class KinetoArgs(msgspec.Struct, gc=False):
    external_id: Id = msgspec.field(default=None, name="External id")
    correlation: Id = None
    stream: Id = None
    device: Id = None
    input_dims: Any = msgspec.field(default=None, name="Input Dims")
    name: Any = None  # process_name / thread_name metadata
    # memory instant events ("[memory]")
    total_allocated: Num = msgspec.field(default=None, name="Total Allocated")
    total_reserved: Num = msgspec.field(default=None, name="Total Reserved")
    device_id: Id = msgspec.field(default=None, name="Device Id")
    device_type: Id = msgspec.field(default=None, name="Device Type")


def _event_struct(name: str, args: type) -> type:
    """A Chrome-trace event Struct whose ``args`` decode as ``args``."""
    fields = [("ph", str, ""), ("name", str, ""), ("cat", str, ""), ("pid", Id, None), ("tid", Id, None),
              ("ts", Num, None), ("dur", Num, None), ("args", Union[args, None], None)]
    return msgspec.defstruct(name, fields, gc=False)


KinetoEvent = _event_struct("KinetoEvent", KinetoArgs)

ABSENT = -2**63  # an id field the event does not have (:class:`StrictKinetoArgs`)


class StrictKinetoArgs(msgspec.Struct, gc=False):
    """:class:`KinetoArgs` as today's Kineto writes them (ids as integers, never null), with an
    absent field as a value of its type: a block of such events becomes columns without a type
    check per value (:mod:`._kineto_block`). A block that does not fit is decoded again as
    :class:`KinetoEvent`."""

    external_id: int = msgspec.field(default=ABSENT, name="External id")
    correlation: int = ABSENT
    stream: int = -1
    device: int = -1
    input_dims: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Input Dims")  # its JSON text
    name: Any = None
    total_allocated: Num = msgspec.field(default=None, name="Total Allocated")
    total_reserved: Num = msgspec.field(default=None, name="Total Reserved")
    device_id: Id = msgspec.field(default=None, name="Device Id")
    device_type: Id = msgspec.field(default=None, name="Device Type")


StrictKinetoEvent = msgspec.defstruct(
    "StrictKinetoEvent", [("ph", str, ""), ("name", str, ""), ("cat", str, ""), ("pid", Union[int, str], 0),
                          ("tid", Union[int, str], 0),
                          ("ts", float, float("nan")), ("dur", float, float("nan")),
                          ("args", StrictKinetoArgs, msgspec.field(default_factory=StrictKinetoArgs))], gc=False,
    module=__name__)


class AscendArgs(msgspec.Struct, gc=False):
    input_dims: Any = msgspec.field(default=None, name="Input Dims")
    call_stack: Any = msgspec.field(default=None, name="Call stack")
    name: Any = None
    task_type: Any = msgspec.field(default=None, name="Task Type")
    connection_id: Id = None
    correlation_id: Id = None
    # HCCL plane tasks (Memcpy, Reduce_Inline, Notify_*): what each transfer moved and over what
    hccl_task_type: Any = msgspec.field(default=None, name="task type")
    size_bytes: Num = msgspec.field(default=None, name="size(Byte)")
    transport_type: Any = msgspec.field(default=None, name="transport type")
    link_type: Any = msgspec.field(default=None, name="link type")


AscendEvent = _event_struct("AscendEvent", AscendArgs)


class CounterEvent(msgspec.Struct, gc=False):
    """A Chrome-trace counter sample (``ph: "C"``): every numeric arg is one series."""

    name: str = ""
    pid: Id = None
    ts: Num = None
    args: dict[str, Any] = {}


class RawTrace(msgspec.Struct, gc=False):
    traceEvents: list[msgspec.Raw] = []
    deviceProperties: Union[list[dict[str, Any]], None] = None
    distributedInfo: Union[dict[str, Any], None] = None
    baseTimeNanoseconds: Any = None  # Kineto's ts are us from this epoch time


_counter_events = msgspec.json.Decoder(list[CounterEvent])


def decode_counter_events(parts: list[msgspec.Raw]) -> list[CounterEvent]:
    """Counter events with all their args (the event Structs above keep only selected args)."""
    return _counter_events.decode(b"[" + b",".join(parts) + b"]") if parts else []
