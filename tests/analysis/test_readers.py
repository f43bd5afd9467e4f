"""Readers register: a reader for a made-up format, added to the one list, is found by detect and
used by the job reader; a format no reader has is refused by name, never handed to another."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import npumagic
from npumagic.analysis import job as job_reader
from npumagic.analysis import schema, sources
from npumagic.analysis.sources import readers
from npumagic.errors import TraceError


class StepsReader:
    """A made-up format: ``*.steps`` files, one rank each, a line ``name start_ns dur_ns`` per kernel."""

    name, unit, leaves_out_unreadable, outline = "steps-text", "rank", False, None

    def __init__(self) -> None:
        self.read_calls: list[list[Path]] = []

    def sniff(self, path: Path) -> list[Path] | None:
        files = sorted(path.glob("*.steps")) if path.is_dir() else [path] if path.suffix == ".steps" else []
        return files or None

    def read(self, paths: list[Path], progress=None) -> schema.Trace:
        self.read_calls.append(list(paths))
        rows = [{"name": name, "kind": "kernel", "ts_ns": int(ts), "dur_ns": int(dur), "rank": rank, "stream": 7,
                 "device": 0, "lane": "made-up stream"}
                for rank, p in enumerate(paths) for name, ts, dur in (line.split() for line in p.read_text().splitlines())]
        return schema.finish(pd.DataFrame(rows), schema.empty(schema.STEP_COLUMNS),
                             meta={"backend": "cpu", "format": self.name, "path": str(paths[0])})

    def rank_groups(self, paths: list[Path]) -> list[list[Path]]:
        return [[p] for p in paths]

    def merge_meta(self, paths, metas, unreadable=None) -> dict:
        return dict(metas[0], path=str(paths[0].parent))


@pytest.fixture
def steps_reader(monkeypatch):
    reader = StepsReader()
    monkeypatch.setattr(readers, "READERS", [*readers.READERS, reader])
    return reader


def _job(folder: Path) -> Path:
    folder.mkdir()
    (folder / "a.steps").write_text("matmul 1000 400\nrelu 1500 100\n")
    (folder / "b.steps").write_text("matmul 1000 900\n")
    return folder


def test_a_registered_reader_is_found_and_used_by_the_job_reader(tmp_path, steps_reader):
    job = _job(tmp_path / "job")
    assert sources.detect(job) == ("steps-text", [job / "a.steps", job / "b.steps"])
    summary = job_reader.analyze(job, rank=1, scheduler="serial")
    assert steps_reader.read_calls == [[job / "a.steps", job / "b.steps"]]
    assert sorted(summary.per_rank) == [0, 1]
    assert summary.meta["format"] == "steps-text"
    assert not job_reader.reads_apart(job, scheduler="serial")
    # one rank read apart, as a Dask task reads it: the reader's own groups and its meta merge
    per_rank, meta, _, error = job_reader.summarize_group(steps_reader, [job / "b.steps"])
    assert error is None and list(per_rank) == [0] and meta["format"] == "steps-text"
    assert sources.merge_meta("steps-text", [job / "a.steps", job / "b.steps"], [meta, meta])["path"] == str(job)


def test_without_its_reader_the_made_up_format_is_no_profiler_output(tmp_path):
    job = _job(tmp_path / "job")
    with pytest.raises(TraceError, match=r"no profiler output found \(it holds a.steps, b.steps\)"):
        npumagic.load(job)


def test_a_format_no_reader_has_is_refused_by_name(tmp_path):
    trace = tmp_path / "w.pt.trace.json"
    trace.write_text('{"traceEvents": []}')
    for call in (lambda: sources.read("nsys", [trace]), lambda: sources.rank_groups("nsys", [trace]),
                 lambda: sources.merge_meta("nsys", [trace], [{}])):
        with pytest.raises(TraceError, match=r"w\.pt\.trace\.json: no reader for format 'nsys'; readers: ascend, kineto"):
            call()


def test_a_fifo_is_refused_not_waited_on(tmp_path):
    # GIVEN a FIFO named as a trace, given itself or lying in a folder below the one given (reading
    # one waits for a writer: the analysis would hang)
    import os

    os.mkfifo(tmp_path / "rank-0.pt.trace.json")
    (tmp_path / "below").mkdir()
    os.mkfifo(tmp_path / "below" / "rank-1.pt.trace.json")
    with pytest.raises(TraceError, match="neither a file nor a folder") as raised:
        sources.detect(tmp_path / "rank-0.pt.trace.json")
    assert str(tmp_path / "rank-0.pt.trace.json") in str(raised.value)
    with pytest.raises(TraceError, match=r"no profiler output found \(it holds below, rank-0\.pt\.trace\.json; "
                                         r"rank-0\.pt\.trace\.json is neither a file nor a folder\)"):
        sources.detect(tmp_path)  # the folder that holds it says why it was passed over
    (tmp_path / "rank-0.pt.trace.json").unlink()
    with pytest.raises(TraceError, match="no profiler output found"):
        sources.detect(tmp_path)
