"""A Trace's meta is declared (schema.TraceMeta, a frozen dataclass): finish refuses a key that is
no field or a value of another type, and once read it cannot change (a reader's answer no later
step rewrites); it pickles, copies and writes as JSON through ``as_dict``."""

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
    ({"backend": "cuda", "device_mode": True}, r"not fields of schema.TraceMeta: device_mode \("),
    ({"zeta": 1, "backend": "cuda", "alpha": 2}, r"not fields of schema.TraceMeta: alpha, zeta \("),
    ({"world_size": "8"}, r"world_size is str, not int$"),
    ({"backend": None}, r"backend is NoneType, not str$"),
    ({"device_memory_bytes": 1.5, "files": "a.json"}, r"device_memory_bytes is float, not int or NoneType; files is str"),
    ({"vendor": [1]}, r"vendor is list, not dict$"),
], ids=["unknown", "unknowns", "str-for-int", "none-for-str", "two-wrong", "list-for-dict"])
def test_finish_refuses_meta_against_its_declaration(meta, match):
    # GIVEN a reader's meta with a key that is no field, or a value of another type
    # WHEN finish builds the Trace; THEN a ValueError names each offending key
    with pytest.raises(ValueError, match=match):
        schema.finish(_events(), schema.empty(schema.STEP_COLUMNS), meta=meta)


def test_a_changed_field_is_checked_too():
    meta = schema.TraceMeta.of({"backend": "cuda"})
    with pytest.raises(ValueError, match=r"world_size is str, not int"):
        dataclasses.replace(meta, world_size="8")
    with pytest.raises(ValueError, match=r"not fields of schema.TraceMeta: rank"):
        schema.Trace(_events(), schema.empty(schema.STEP_COLUMNS), meta={"rank": 0})


@pytest.fixture(scope="module", params=[ASCEND / "level1" / "rank0_ascend_pt", CUDA / "alexnet_sync"],
                ids=["ascend", "cuda"])
def trace(request):
    return npumagic.load(need(request.param))


def test_every_reader_fills_only_declared_fields(trace):
    assert isinstance(trace.meta, schema.TraceMeta)
    assert {"backend", "format", "path", "files"} <= set(trace.meta.filled)
    assert trace.meta.backend in ("npu", "cuda") and trace.meta.path and trace.meta.files
    assert list(trace.meta.as_dict()) == list(trace.meta.filled)
    assert schema.TraceMeta.of(trace.meta.as_dict()) == trace.meta  # what it writes reads back the same


@pytest.mark.parametrize("change", [
    lambda m: setattr(m, "backend", "npu"),
    lambda m: delattr(m, "backend"),
    lambda m: setattr(m, "extra", 1),
], ids=["set", "delete", "add"])
def test_a_traces_meta_cannot_change_after_finish(trace, change):
    backend = trace.meta.backend
    with pytest.raises(dataclasses.FrozenInstanceError):
        change(trace.meta)
    assert trace.meta.backend == backend


def test_a_changed_meta_is_a_new_one(trace):
    # a new Trace with other meta is the way; the old one keeps its own
    other = dataclasses.replace(trace, meta=dataclasses.replace(trace.meta, world_size=3))
    assert other.meta.world_size == 3 and trace.meta.world_size != 3
    assert other.meta.as_dict() == {**trace.meta.as_dict(), "world_size": 3}
    assert isinstance(other.meta, schema.TraceMeta)


def test_meta_round_trips_through_pickle_and_copies(trace):
    meta = dataclasses.replace(trace.meta, world_size=3, vendor={})  # vendor: tables read when first looked up
    for again in (pickle.loads(pickle.dumps(meta)), copy.deepcopy(meta), copy.copy(meta)):
        assert isinstance(again, schema.TraceMeta) and again == meta
        assert list(again.as_dict()) == list(meta.as_dict()) and again.world_size == 3
        with pytest.raises(dataclasses.FrozenInstanceError):
            again.backend = "npu"
    assert json.loads(json.dumps(meta.as_dict(), default=str))["backend"] == trace.meta.backend


def test_as_dict_holds_what_the_reader_gave_and_what_changed_since():
    # GIVEN a reader's dict with a field at its default value
    meta = schema.TraceMeta.of({"format": "kineto", "settings": {}})
    # THEN it is written (a Summary's meta keeps it), and a field left out is not
    assert meta.as_dict() == {"format": "kineto", "settings": {}}
    assert dataclasses.replace(meta, world_size=4).as_dict() == {"format": "kineto", "settings": {}, "world_size": 4}
