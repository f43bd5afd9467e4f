"""Autograd's sequence numbers, which the normalized events table leaves out: each operator of a
Kineto trace that carries one (``args["Sequence number"]``), as (thread, ts_ns, dur_ns, name,
seq). A forward operator and the backward node autograd made of it share the number, so the
backward work can be charged to the module the forward ran in (:mod:`..modules`)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import numpy as np
import pandas as pd

from ._columns import to_int, to_ns
from ._kineto_decode import Id, _event_struct
from ._stream import EventStream


class _SequenceArgs(msgspec.Struct, gc=False):
    seq: Id = msgspec.field(default=None, name="Sequence number")


_SequenceEvent = _event_struct("SequenceEvent", _SequenceArgs)
COLUMNS = ["thread", "ts_ns", "dur_ns", "name", "seq"]


def sequenced_ops(paths: list[Path]) -> pd.DataFrame:
    """The ``cpu_op`` events of ``paths`` that carry a sequence number (:data:`COLUMNS`); Kineto
    and torch_npu's trace_view.json alike."""
    picked = []
    for path in paths:
        stream = EventStream(path, _SequenceEvent)
        for chunk in stream:
            picked += [e for e in chunk if e.ph == "X" and e.cat == "cpu_op" and e.args is not None
                       and e.args.seq is not None]
    if not picked:
        return pd.DataFrame(columns=COLUMNS)
    ops = pd.DataFrame({"thread": [f"Thread {e.tid}" for e in picked], "ts_ns": to_ns([e.ts for e in picked]),
                        "dur_ns": to_ns([e.dur for e in picked]), "name": [e.name for e in picked],
                        "seq": to_int([e.args.seq for e in picked])}).astype({"seq": np.int64})
    return ops[ops["seq"] >= 0].reset_index(drop=True)  # torch_npu writes -1 for none
