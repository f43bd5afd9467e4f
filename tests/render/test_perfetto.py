"""The Perfetto / chrome://tracing export (``npumagic trace PATH --perfetto FILE``) of a real
Kineto trace and a real two-rank torch_npu job. Perfetto's own trace_processor cannot run here
(the ``perfetto`` package downloads its binary from the internet), so the file is checked
independently: by the Trace Event format's rules with json, and re-read by HolisticTraceAnalysis's
Chrome trace parser; its slice counts and step tracks equal the run's."""

from __future__ import annotations

import collections
import json

import numpy as np
import pytest

from npumagic.analysis.marks import GAP, marks
from npumagic.analysis.schema import KINDS
from npumagic.cli import main

from ..conftest import ASCEND, CUDA, need, shared_trace

SOURCES = {"kineto": CUDA / "alexnet_sync", "torch_npu": ASCEND / "level1"}
PHASES = {"X", "M", "i", "C", "s", "f"}


def exported(tmp_path, source: str, capsys) -> tuple[dict, dict]:
    out = tmp_path / f"{source}.json"
    assert main(["trace", str(need(SOURCES[source])), "--perfetto", str(out), "--json"]) == 0
    said = json.loads(capsys.readouterr().out)
    return json.loads(out.read_bytes()), said


def tracks(doc: dict) -> dict[tuple[int, int], str]:
    """(pid, tid) -> 'rank N: PROCESS/THREAD' from the metadata events."""
    processes = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    return {(e["pid"], e["tid"]): f"{processes[e['pid']]}/{e['args']['name']}"
            for e in doc["traceEvents"] if e["name"] == "thread_name"}


def crossing(spans: list[tuple[float, float]]) -> int:
    """How many spans start inside another and end after it (ends within 1 ns are one)."""
    open_ends, bad = [], 0
    for start, end in sorted(spans, key=lambda s: (s[0], -s[1])):
        while open_ends and open_ends[-1] <= start + 1e-3:
            open_ends.pop()
        if open_ends and end > open_ends[-1] + 1e-3:
            bad += 1
        else:
            open_ends.append(end)
    return bad


@pytest.mark.parametrize("source", list(SOURCES))
def test_the_export_follows_the_trace_event_format_and_holds_every_event_and_step(source, tmp_path, capsys):
    trace = shared_trace(SOURCES[source])
    doc, said = exported(tmp_path, source, capsys)
    events = doc["traceEvents"]
    named = tracks(doc)
    # GIVEN the file WHEN read by the format's rules THEN each event has a known phase, ids that
    # name a track, a time from 0 (µs); a slice a duration of 0 or more
    for e in events:
        assert e["ph"] in PHASES and isinstance(e["pid"], int) and isinstance(e["tid"], int)
        if e["ph"] != "M":
            assert e["ts"] >= 0 and (e["ph"] == "C" or (e["pid"], e["tid"]) in named)
        if e["ph"] == "X":
            assert e["dur"] >= 0 and isinstance(e["name"], str)
    # every event of the run's tables is one slice, named and timed as in the tables
    slices = [e for e in events if e["ph"] == "X" and e["cat"] in KINDS]
    assert len(slices) == len(trace.events) == said["slices"]
    assert collections.Counter(e["name"] for e in slices) == collections.Counter(trace.events["name"].astype(str))
    origin = doc["otherData"]["origin_ns"]
    assert sorted(round(e["ts"] * 1e3) + origin for e in slices) == sorted(trace.events["ts_ns"].tolist())
    # each rank's steps track holds its steps, as the step table has them
    for rank, steps in trace.steps.groupby("rank"):
        mine = [e for e in events if e["ph"] == "X" and named[(e["pid"], e["tid"])] == f"rank {rank}: npumagic/steps"]
        assert [e["name"] for e in mine] == [f"step {s}" for s in steps["step"]]
        assert [round(e["dur"] * 1e3) for e in mine] == (steps["end_ns"] - steps["start_ns"]).tolist()
    # npumagic's own tracks nest as Perfetto needs (no two slices of one track cross)
    ours = collections.defaultdict(list)
    for e in events:
        if e["ph"] == "X" and named[(e["pid"], e["tid"])].split("/")[0].endswith("npumagic"):
            ours[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    for spans in ours.values():
        assert crossing(spans) == 0
    # the flows pair each launch with one device event, and (torch_npu) each Enqueue with its Dequeue
    starts = {e["id"] for e in events if e["ph"] == "s"}
    assert starts == {e["id"] for e in events if e["ph"] == "f"}
    assert len(starts) == said["flows"] + said["queue_flows"] and said["flows"] > 0
    ev = trace.events
    queued = {(r, c) for r, c, n in zip(ev["rank"], ev["correlation"], ev["name"].astype(str)) if n == "Enqueue"}
    run = {(r, c) for r, c, n in zip(ev["rank"], ev["correlation"], ev["name"].astype(str)) if n.startswith("Dequeue")}
    assert said["queue_flows"] == len(queued & run) and (said["queue_flows"] > 0) == (source == "torch_npu")
    ts = {(e["pid"], e["tid"], e["ts"]): e["name"] for e in slices}
    for e in events:
        if e["ph"] in ("s", "f") and e["name"] == "task queue":  # each end on the queue call it binds to
            assert ts[(e["pid"], e["tid"], e["ts"])].startswith("Enqueue" if e["ph"] == "s" else "Dequeue")


@pytest.mark.parametrize("source", list(SOURCES))
def test_the_idle_gaps_findings_and_marks_are_tracks_of_their_own(source, tmp_path, capsys):
    trace = shared_trace(SOURCES[source])
    doc, said = exported(tmp_path, source, capsys)
    named = tracks(doc)
    table = marks(trace)
    by_track = collections.defaultdict(list)
    for e in doc["traceEvents"]:
        if e["ph"] in ("X", "i") and (e["pid"], e["tid"]) in named:
            by_track[named[(e["pid"], e["tid"])]].append(e)
    for rank in sorted(set(trace.events["rank"])):
        gaps = by_track[f"rank {rank}: npumagic/{GAP}s"]
        mine = table[(table["rank"] == rank) & (table["kind"] == GAP)]
        assert len(gaps) == len(mine) > 0
        # a gap says its cause, and lies inside a step where the device of its rank runs nothing
        assert all(e["name"].split(": ")[-1] in ("DataLoader wait", "sync", "host operators", "nothing traced")
                   for e in gaps)
        ev = trace.events[(trace.events["rank"] == rank) & trace.events["kind"].isin(["kernel", "comm", "memcpy"])
                          & (trace.events["device"] >= 0)]
        s, e_ = ev["ts_ns"].to_numpy(), (ev["ts_ns"] + ev["dur_ns"]).to_numpy()
        origin = doc["otherData"]["origin_ns"]
        for g in gaps[:50]:
            lo, hi = round(g["ts"] * 1e3) + origin, round((g["ts"] + g["dur"]) * 1e3) + origin
            assert not np.any((s < hi - 1) & (e_ > lo + 1)), g["name"]
    findings = [e for t, es in by_track.items() if t.endswith("npumagic/findings") for e in es]
    assert len(findings) == said["findings"] > 0 and all(e["ph"] == "i" for e in findings)
    assert sum(said["marks"].values()) == len(table)


def test_the_export_is_re_read_by_holistic_trace_analysis(tmp_path, capsys):
    """HTA's parser (an independent reader of Chrome trace JSON) finds every slice: the run's
    events, its steps and its marks drawn as slices."""
    hta_trace = pytest.importorskip("hta.common.trace", reason="need HolisticTraceAnalysis")
    doc, said = exported(tmp_path, "torch_npu", capsys)
    folder = tmp_path / "hta"
    folder.mkdir()
    (folder / "rank0.json").write_text(json.dumps(doc))
    read = hta_trace.Trace(trace_files={0: str(folder / "rank0.json")}, trace_dir=str(folder))
    read.parse_traces(max_ranks=1, use_multiprocessing=False)
    frame = read.get_trace(0)
    cats = frame["cat"].map(lambda i: read.symbol_table.sym_table[i])
    trace = shared_trace(SOURCES["torch_npu"])
    assert int(cats.isin(KINDS).sum()) == len(trace.events)
    assert int((cats == "npumagic.step").sum()) == len(trace.steps)
    table = marks(trace)
    assert int(cats.str.startswith("npumagic.").sum()) == len(trace.steps) + int((table["kind"] != "memory peak").sum())


def test_a_run_of_the_history_is_exported_from_the_magic_and_the_mcp_server_writes_only_in_its_folder(shell, tmp_path):
    from npumagic.commands.base import ERRORS
    from npumagic.mcp_server import Profiles

    shell.run_line_magic("npuload", f"{need(SOURCES['kineto'])} --name sync --no-plot")
    result = shell.run_line_magic("npu", "trace sync")
    written = tmp_path / "sync.perfetto.json"  # the default name, in the working directory
    assert result.to_dict()["path"] == "sync.perfetto.json" and written.is_file()
    assert str(result).startswith("wrote sync.perfetto.json: 867 slices of sync, 1 step,")
    doc = json.loads(written.read_bytes())
    assert sum(e["ph"] == "X" and e["cat"] in KINDS for e in doc["traceEvents"]) == 867
    profiles = Profiles(tmp_path / "runs")
    assert profiles.destination("x.json") == (tmp_path / "runs" / "x.json").resolve()
    for outside in ("../x.json", str(tmp_path / "x.json"), "/etc/passwd", "."):
        with pytest.raises(ERRORS, match="writes files only in its output directory"):
            profiles.destination(outside)
