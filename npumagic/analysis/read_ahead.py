"""Read-ahead: a small trace file decoded by a worker process while this one imports pandas.

A command line run (``npumagic analyze trace.json.gz``) spends about as long importing pandas as
decoding a small trace; the two need not wait for each other. :func:`start` (called before
pandas is imported) has a decode worker (:mod:`.decode_worker`) decode the whole file into
columns; the Kineto reader asks :func:`take` for them and reads the file itself where there are
none, where the file changed since, or where the worker failed (its error then names the file,
as ever). A trace large enough for the pool (:mod:`.sources._pool`), or a machine with one core,
gets no read-ahead. A read-ahead never taken is stopped when the process ends.
"""

from __future__ import annotations

import atexit
import os
import pickle
import threading
from pathlib import Path

from . import decode_worker

TRACE_SUFFIXES = (".json", ".json.gz")
KINETO_FILES = (".pt.trace.json", ".pt.trace.json.gz")  # what torch.profiler's trace handler writes
_started: dict[tuple, "_ReadAhead"] = {}


class _ReadAhead:
    """A worker decoding one file, and a thread gathering its answers (still pickled: unpickling
    them would import the sources package, and pandas with it, in that thread)."""

    def __init__(self, path: str) -> None:
        self.process = decode_worker.start("file", path)
        self.process.stdin.close()
        self.answers: list[bytes] = []
        self.thread = threading.Thread(target=self._gather, daemon=True, name="npumagic-read-ahead")
        self.thread.start()

    def _gather(self) -> None:
        try:
            while (data := decode_worker.read_answer(self.process.stdout)) is not None:
                self.answers.append(data)
        except (OSError, ValueError):
            pass

    def outcome(self):
        """``(blocks, (header, counters, nonfinite, not_utf8))`` as the worker decoded them, or None
        where it failed (waits for it)."""
        self.thread.join()
        self.stop()
        answers = [pickle.loads(a) for a in self.answers]
        if not answers or answers[-1][0] != "end":
            return None
        return [block for _, block in answers[:-1]], answers[-1][1]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.process.stdout.close()


def _key(path: str | Path) -> tuple | None:
    try:
        found = os.stat(path)
    except OSError:
        return None
    return os.path.realpath(path), found.st_size, found.st_mtime_ns


def start(path: str | Path) -> None:
    """Decode the trace at ``path`` ahead, where it is one small Kineto trace file (a file named as
    one, or a folder holding one torch.profiler trace and no other), on a machine with two cores."""
    path = Path(path)
    if path.is_dir():
        try:
            traces = [p for p in path.iterdir() if p.name.endswith(KINETO_FILES) and p.is_file()]
        except OSError:
            return
        if len(traces) != 1:
            return
        path = traces[0]
    elif not (path.name.endswith(TRACE_SUFFIXES) and path.is_file()):  # no FIFO: opening one waits for a writer
        return
    key, largest = _key(path), decode_worker.POOL_FROM  # from there on the pool decodes it on every core
    if key is None or key in _started or decode_worker.cores() < 2 or (decode_worker.text_size(path) or largest) >= largest:
        return
    try:
        _started[key] = _ReadAhead(str(path))
    except OSError:  # no process to be had: the reader reads it
        pass


def take(path: str | Path):
    """What a read-ahead of the file at ``path`` decoded (see :meth:`_ReadAhead.outcome`), or None
    where none was started for it as it is now, or it failed."""
    ahead = _started.pop(_key(path), None) if _started else None
    return ahead.outcome() if ahead is not None else None


@atexit.register
def _stop_all() -> None:
    while _started:
        _started.popitem()[1].stop()
