"""Memory snapshots (torch.cuda.memory._dump_snapshot's pickle) read as plain data only: a snapshot
in the layout torch/cuda/memory.py's _snapshot documents (no GPU here to write a real one) gives
its reserved, allocated and free-in-segment sizes, the blocks by the user's line and the OOM
traced; a pickle holding anything but plain data is refused naming the file, and what it would
have run never runs."""

from __future__ import annotations

import json
import os
import pickle

import pytest

from npumagic.analysis.memory_snapshot import snapshot_views
from npumagic.analysis.sources.memory_snapshot import load_snapshot
from npumagic.cli import main
from npumagic.errors import TraceError

MIB = 2**20
TORCH_FRAME = {"filename": "/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py", "line": 125, "name": "forward"}
USER_FRAME = {"filename": "/home/me/train.py", "line": 42, "name": "step"}


def _block(size, state, frames=()):
    return {"address": 0, "size": size, "requested_size": size, "state": state, "frames": list(frames)}


SNAPSHOT = {
    "segments": [
        {"device": 0, "address": 0, "total_size": 20 * MIB, "stream": 0, "segment_type": "large",
         "segment_pool_id": (0, 0), "allocated_size": 12 * MIB, "active_size": 12 * MIB,
         "blocks": [_block(8 * MIB, "active_allocated", [TORCH_FRAME, USER_FRAME]), _block(3 * MIB, "inactive"),
                    _block(4 * MIB, "active_allocated", [USER_FRAME]), _block(5 * MIB, "inactive")]},
        {"device": 0, "address": 2**30, "total_size": 2 * MIB, "stream": 0, "segment_type": "small",
         "segment_pool_id": (0, 0), "allocated_size": 512, "active_size": 512,
         "blocks": [_block(512, "active_allocated", [{"filename": "/home/me/data.py", "line": 7, "name": "load"}]),
                    _block(2 * MIB - 512, "inactive")]},
    ],
    "device_traces": [[{"action": "alloc", "addr": 0, "size": 8 * MIB, "stream": 0, "frames": []},
                       {"action": "oom", "size": 30 * 2**30, "stream": 0, "device_free": 2 * 2**30, "frames": []}]],
}


@pytest.fixture
def snapshot(tmp_path):
    path = tmp_path / "snapshot.pickle"
    path.write_bytes(pickle.dumps(SNAPSHOT))
    return path


def test_a_snapshot_gives_its_sizes_holders_and_ooms(snapshot):
    (view,) = snapshot_views(load_snapshot(snapshot))
    assert (view.segments, view.large_segments, view.reserved_bytes) == (2, 1, 22 * MIB)
    assert view.allocated_bytes == 12 * MIB + 512
    assert view.free_in_segments_bytes == 10 * MIB - 512 and view.largest_free_bytes == 5 * MIB
    assert view.fragmented_bytes == 5 * MIB - 512  # free, yet no block over 5 MiB fits in it
    # torch's own frame skipped: both blocks are the user's line 42
    assert view.holders.iloc[0].tolist() == ["/home/me/train.py:42 step", 2, 12 * MIB]
    assert view.ooms == ({"size": 30 * 2**30, "device_free": 2 * 2**30},)


def test_the_cli_reads_a_snapshot(snapshot, capsys):
    assert main(["memory", str(snapshot), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["kind"] == "memory_snapshot" and doc["devices"][0]["reserved_bytes"] == 22 * MIB


class _Runs:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.makedirs, (str(self.marker),))


@pytest.mark.parametrize("payload", ["object", "inside"])
def test_a_pickle_holding_anything_but_plain_data_is_refused_unrun(tmp_path, payload, capsys):
    marker = tmp_path / "ran"
    evil = _Runs(marker) if payload == "object" else {"segments": [{"blocks": [_Runs(marker)]}]}
    path = tmp_path / "snapshot.pickle"
    path.write_bytes(pickle.dumps(evil))
    with pytest.raises(TraceError, match="refused without being run") as caught:
        load_snapshot(path)
    assert str(path) in str(caught.value) and not marker.exists()
    assert main(["memory", str(path)]) == 2 and not marker.exists()
    err = capsys.readouterr().err
    assert f"{path}: holds a os.makedirs object" in err


@pytest.mark.parametrize("content, said", [(pickle.dumps([1, 2]), "not a memory snapshot"),
                                           (b"not a pickle", "not a readable pickle")])
def test_what_is_no_snapshot_is_said(tmp_path, content, said):
    path = tmp_path / "x.pickle"
    path.write_bytes(content)
    with pytest.raises(TraceError, match=said):
        load_snapshot(path)
