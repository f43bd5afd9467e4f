"""Blocks decoded by worker processes (:mod:`npumagic.analysis.sources._pool`): the same frame as
the reading process alone gives, the same errors naming the file, and no process left behind
when the read is interrupted. The pool is forced onto small files with small blocks."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pandas as pd
import pytest

import npumagic
from npumagic.analysis import decode_worker
from npumagic.analysis.sources import _pool
from npumagic.errors import TraceError

from ..conftest import CUDA, need

V100 = CUDA / "ns_resolution" / "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
SHARED = [V100, CUDA / "legacy_kineto" / "resnet50_nw4.pt.trace.json.gz",
          CUDA / "hta_more" / "mtia_trace_single_rank" / "mtia_rank_0.json.gz",
          CUDA / "rocm_mi250" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"]


def _children() -> set[int]:
    found = set()
    for task in os.listdir(f"/proc/{os.getpid()}/task"):
        with open(f"/proc/{os.getpid()}/task/{task}/children") as fh:
            found |= {int(pid) for pid in fh.read().split()}
    return found


def _pooled(monkeypatch, block: int = 65536) -> list:
    """Every file read by two workers in blocks of ``block`` bytes; the blocks they decoded."""
    decoded = []
    monkeypatch.setattr(_pool, "POOL_FROM", 0)
    monkeypatch.setattr(_pool, "BLOCK", block)
    monkeypatch.setattr(decode_worker.os, "sched_getaffinity", lambda _: {0, 1}, raising=False)
    real = _pool._Worker.result
    monkeypatch.setattr(_pool._Worker, "result", lambda self: decoded.append(real(self)) or decoded[-1])
    return decoded


def _same(a, b) -> None:
    for table in ("events", "steps", "memory", "counters"):
        pd.testing.assert_frame_equal(getattr(a, table), getattr(b, table))
    assert a.meta == b.meta


@pytest.mark.parametrize("path", SHARED, ids=lambda p: p.parent.name)
def test_workers_give_the_frame_the_reading_process_gives(path, monkeypatch):
    need(path)
    alone = npumagic.load(path)
    decoded = _pooled(monkeypatch)
    pooled = npumagic.load(path)
    assert decoded and all(status == "ok" for status, _ in decoded)  # the workers did decode it
    _same(alone, pooled)


def _plain_copy(tmp_path: Path, edit=None) -> Path:
    trace = json.loads(gzip.open(V100).read())
    if edit:
        edit(trace["traceEvents"])
    path = tmp_path / "rank-0.pt.trace.json"
    path.write_text(json.dumps(trace, indent=1))
    return path


def test_a_name_holding_an_event_boundary_is_read_whole(tmp_path, monkeypatch):
    # GIVEN names that hold "}, {" (a cut there makes an unterminated block) and a header after the array
    need(V100)

    def edit(events):
        for e in events[::50]:
            e["name"] = e["name"] + '"}, {"name": "x'
    path = _plain_copy(tmp_path, edit)
    alone = npumagic.load(path)
    decoded = _pooled(monkeypatch, 4096)
    pooled = npumagic.load(path)
    # THEN a worker's decode failed on such a cut and the rest was read here, to the same frame
    assert any(status == "failed" for status, _ in decoded)
    _same(alone, pooled)


def test_repairs_in_a_workers_block_are_counted(tmp_path, monkeypatch):
    need(V100)
    path = _plain_copy(tmp_path)
    text = path.read_text()
    at = text.index('"dur": ', len(text) // 2)
    path.write_text(text[:at] + '"dur": inf, "was": ' + text[at + 7:])
    decoded = _pooled(monkeypatch)
    with pytest.warns(UserWarning, match="1 number was inf or nan"):
        npumagic.load(path)
    assert all(status == "ok" for status, _ in decoded)  # a worker repaired it


@pytest.mark.parametrize("broken, message", [('"ts": tru', "not a valid Chrome trace JSON"),
                                             ('"ts": [1]', "an event does not match the Chrome trace format")])
def test_a_malformed_event_in_a_workers_block_names_the_file(tmp_path, monkeypatch, broken, message):
    need(V100)
    path = _plain_copy(tmp_path)
    text = path.read_text()
    at = text.index('"ts": ', len(text) // 2)
    path.write_text(text[:at] + broken + ", " + text[at:])
    _pooled(monkeypatch)
    with pytest.raises(TraceError, match=message) as raised:
        npumagic.load(path)
    assert str(path) in str(raised.value)


def test_an_interrupted_read_leaves_no_worker(monkeypatch):
    need(V100)
    before = _children()
    decoded = _pooled(monkeypatch, 8192)

    class Interrupt:
        def update(self, n):
            if decoded:
                assert _children() - before  # the workers are running
                raise KeyboardInterrupt

    from npumagic.analysis.sources import kineto
    with pytest.raises(KeyboardInterrupt):
        kineto.read([V100], progress=Interrupt())
    assert _children() == before


def test_a_small_file_starts_no_worker(monkeypatch):
    need(V100)

    def refuse():
        raise AssertionError("a worker started for a small file")
    monkeypatch.setattr(_pool, "_Worker", refuse)
    assert len(npumagic.load(V100).events)


def test_workers_one_a_core_for_large_text(tmp_path, monkeypatch):
    monkeypatch.setattr(decode_worker.os, "sched_getaffinity", lambda _: {0, 1, 2}, raising=False)
    plain, packed = tmp_path / "a.json", tmp_path / "a.json.gz"
    plain.write_bytes(b" " * (_pool.POOL_FROM // 4))
    packed.write_bytes(decode_worker.GZIP_MAGIC + b" " * (_pool.POOL_FROM // 4))  # its text guessed from the gzip ratio
    assert (_pool.worker_count(plain), _pool.worker_count(packed)) == (0, 3)
    monkeypatch.setenv("NPUMAGIC_DECODE_WORKERS", "1")
    assert _pool.worker_count(packed) == 0


def test_what_a_later_block_first_shows_is_read_as_in_one_block(tmp_path, monkeypatch):
    # GIVEN a trace whose blocking call first appears near its end, whose process is named after its
    # last event, and whose second thread starts late: each block's kinds and lanes are made as it
    # arrives (while the workers decode the next), from what the blocks before it showed
    ops = [{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 7, "tid": 1, "ts": 10 * i, "dur": 5,
            "args": {}} for i in range(3000)]
    late = [{"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "pid": 7, "tid": 2,
             "ts": 30000 + 10 * i, "dur": 5, "args": {"correlation": i}} for i in range(50)]
    named = {"ph": "M", "name": "process_name", "pid": 7, "tid": 0, "args": {"name": "trainer"}}
    path = tmp_path / "rank-0.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": [*ops, *late, named]}))
    decoded = _pooled(monkeypatch, 8192)
    # WHEN it is read in blocks of 8 kB by two workers
    ev = npumagic.load(path).events
    assert len(decoded) > 20
    # THEN the late calls are syncs, and every lane carries the process's name given last
    syncs = ev[ev["name"] == "cudaDeviceSynchronize"]
    assert len(syncs) == 50 and (syncs["kind"] == "sync").all()
    assert (ev.loc[ev["name"] == "aten::add", "kind"] == "host_op").all()
    assert sorted(ev["lane"].astype(str).unique()) == ["trainer/Thread 1", "trainer/Thread 2"]
