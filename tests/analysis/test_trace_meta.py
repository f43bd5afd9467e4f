"""A Trace's meta is declared (schema.TRACE_META): finish refuses an undeclared key or a value of
another type, and once read it is read-only (a reader's answer no later step rewrites)."""

from __future__ import annotations

import copy
import dataclasses
import json
import pickle

import pandas as pd
import pytest

import npumagic
from npumagic.analysis import schema

from ..conftest import ASCEND, CUDA, need


def _events() -> pd.DataFrame:
    return pd.DataFrame({"name": ["k"], "kind": ["kernel"], "ts_ns": [0], "dur_ns": [10], "rank": [0], "device": [0],
                         "stream": [7], "lane": ["GPU 0/Stream 7"]})


@pytest.mark.parametrize("meta, match", [
    ({"backend": "cuda", "device_mode": True}, r"not declared in schema.TRACE_META: device_mode"),
    ({"world_size": "8"}, r"world_size is str, not int"),
    ({"backend": None}, r"backend is NoneType, not str"),
    ({"device_memory_bytes": 1.5, "files": "a.json"}, r"device_memory_bytes is float, not int or NoneType; files is str"),
])
def test_finish_refuses_meta_against_its_declaration(meta, match):
    with pytest.raises(ValueError, match=match):
        schema.finish(_events(), schema.empty(schema.STEP_COLUMNS), meta=meta)


@pytest.mark.parametrize("path", [ASCEND / "level1" / "rank0_ascend_pt", CUDA / "alexnet_sync"], ids=["ascend", "cuda"])
def test_every_reader_fills_only_declared_meta_and_it_is_read_only(path):
    trace = npumagic.load(need(path))
    assert set(trace.meta) <= set(schema.TRACE_META) and {"backend", "format", "path", "files"} <= set(trace.meta)
    schema.check_meta(trace.meta)
    for change in (lambda m: m.__setitem__("backend", "npu"), lambda m: m.update(backend="npu"),
                   lambda m: m.pop("backend"), lambda m: m.setdefault("x", 1), lambda m: m.clear()):
        with pytest.raises(TypeError, match="read-only"):
            change(trace.meta)
    assert trace.meta["backend"] in ("npu", "cuda")
    # a new Trace with other meta is the way; it is read-only too, and it pickles, copies and writes as JSON
    other = dataclasses.replace(trace, meta={**trace.meta, "world_size": 3})
    assert other.meta["world_size"] == 3 and trace.meta["world_size"] != 3
    assert isinstance(other.meta, schema.TraceMeta)
    for again in (pickle.loads(pickle.dumps(other.meta)), copy.deepcopy(other.meta), copy.copy(other.meta)):
        assert isinstance(again, schema.TraceMeta) and list(again) == list(other.meta)
        assert again["path"] == other.meta["path"] and again["world_size"] == 3
    assert json.loads(json.dumps(other.meta, default=str))["backend"] == trace.meta["backend"]
