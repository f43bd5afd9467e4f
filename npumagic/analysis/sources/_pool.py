"""A large Kineto trace decoded on every core: worker processes turn blocks of its event array
into columns (:func:`._kineto_block.decode_block`) while the reading process inflates and cuts
the text and appends the columns, in order.

msgspec holds the GIL while it decodes (two threads decoding take twice as long as one), so the
workers are processes: fresh interpreters (``python -c``) importing numpy and msgspec only, not
forks (a fork of a notebook kernel copies its threads' locks and its memory, and counts that
memory again) nor ``multiprocessing`` children (which re-run the user's ``__main__``).

The text is cut after a ``}`` followed by ``,`` and the next ``{`` without decoding it: a cut
inside a string or a nested object leaves its block unterminated, the worker's decode fails, and
the read goes on in this process from that block's start (:class:`._stream.EventStream`), which
also gives a malformed file its error message naming the file.

Each worker reads its next task in a thread while it decodes, so the reading process never
blocks writing a task while the worker blocks writing a result. A worker ignores SIGINT and ends
when its input closes: an interrupted read kills the workers it started and leaves none behind.
"""

from __future__ import annotations

import os
import pickle
import re
import signal
import struct
import subprocess
import sys
import threading
from collections import deque
from pathlib import Path
from typing import Iterator

from ._inflate import GZIP_MAGIC
from ._kineto_block import Block, decode_block, fill
from ._stream import EventStream, _skip_separator

POOL_FROM = 32 * 2**20  # bytes of text: a smaller file is decoded in the reading process (no pool start)
GZIP_RATIO = 8  # a gzip trace's text per byte on disk, to guess its size (Kineto traces compress 5-20:1)
BLOCK = 4 * 2**20
IN_FLIGHT = 2  # tasks per worker
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_TASK = struct.Struct("<q?")  # payload length, last block
_RESULT = struct.Struct("<q")
_SOURCES = Path(__file__).resolve().parent
# the worker imports the block decoder without this package's __init__ (which imports pandas)
_BOOT = """import sys, types
sys.path[:] = [sys.argv[1]] + [p for p in sys.path if p]
package = types.ModuleType("npumagic.analysis.sources")
package.__path__ = [sys.argv[2]]
sys.modules[package.__name__] = package
from npumagic.analysis.sources._pool import serve
serve()
"""


def worker_count(path: Path) -> int:
    """Decode workers for the file at ``path``: one a core (at most ``NPUMAGIC_DECODE_WORKERS``),
    none for a small file, on one core, or where this Python cannot start itself again."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    cores = min(cores, int(os.environ.get("NPUMAGIC_DECODE_WORKERS", cores)))
    if cores < 2 or not sys.executable:
        return 0
    try:
        with open(path, "rb") as fh:
            text = os.fstat(fh.fileno()).st_size * (GZIP_RATIO if fh.read(2) == GZIP_MAGIC else 1)
    except OSError:  # said by the reader, naming the file
        return 0
    return cores if text >= POOL_FROM else 0


def serve() -> None:
    """A worker's loop: tasks from stdin, results (pickled Blocks) to stdout, until stdin closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the reading process handles Ctrl-C and ends us
    tasks_in, results = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing else may write to the results pipe
    tasks: deque = deque()
    ready = threading.Condition()

    def read_tasks() -> None:
        while True:
            head = tasks_in.read(_TASK.size)
            task = None
            if len(head) == _TASK.size:
                size, last = _TASK.unpack(head)
                text = bytearray(size + 2)
                text[0] = ord("[")
                text[-1] = ord("]")
                got = tasks_in.readinto(memoryview(text)[1:-1])
                task = (text if last is False else memoryview(text)[:-1], last) if got == size else None
            with ready:
                tasks.append(task)
                ready.notify()
            if task is None:
                return

    threading.Thread(target=read_tasks, daemon=True).start()
    while True:
        with ready:
            ready.wait_for(lambda: tasks)
            task = tasks.popleft()
        if task is None:
            return
        try:
            answer = ("ok", decode_block(*task))
        except Exception as exc:  # noqa: BLE001 - any failure: the reading process reads that block itself
            answer = ("failed", f"{type(exc).__name__}: {exc}")
        del task
        data = pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL)
        results.write(_RESULT.pack(len(data)))
        results.write(data)
        results.flush()


class _Worker:
    def __init__(self) -> None:
        root = str(_SOURCES.parents[2])
        self.process = subprocess.Popen([sys.executable, "-c", _BOOT, root, str(_SOURCES)], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, bufsize=0)

    def send(self, payload: memoryview, last: bool) -> None:
        for data in (memoryview(_TASK.pack(len(payload), last)), payload):
            while data:  # a raw pipe write may take part of it
                data = data[self.process.stdin.write(data):]

    def result(self) -> tuple[str, object]:
        head = _read_exactly(self.process.stdout, _RESULT.size)
        if head is None:
            return "failed", f"worker ended (exit status {self.process.poll()})"
        data = _read_exactly(self.process.stdout, _RESULT.unpack(head)[0])
        return ("failed", "worker ended") if data is None else pickle.loads(data)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        for pipe in (self.process.stdin, self.process.stdout):
            try:
                pipe.close()
            except OSError:
                pass
        self.process.wait()


def _read_exactly(pipe, size: int) -> bytes | None:
    data = bytearray(size)
    view, got = memoryview(data), 0
    while got < size:
        n = pipe.readinto(view[got:])
        if not n:
            return None
        got += n
    return data


def pool_blocks(stream: EventStream, fh, workers: int) -> Iterator[Block]:
    """The blocks of the trace open as ``fh`` (past nothing yet), decoded by ``workers``
    processes, in order; ``stream`` gets the header, counters and repairs of any part read here."""
    start = stream._start(fh)
    if start is None:
        return
    prefix, buf = start
    text = bytearray(_skip_separator(buf))
    if text[:1] != b"{":  # no event, or whitespace longer than a block: nothing to share out
        yield from _serial_from(stream, fh, prefix, bytes(text))
        return
    pool: list[_Worker] = []
    try:
        try:
            pool += [_Worker() for _ in range(workers)]
        except OSError:  # no process to be had: read it here
            yield from _serial_from(stream, fh, prefix, bytes(text))
            return
        yield from _run(stream, fh, prefix, text, pool)
    finally:
        for worker in pool:
            worker.stop()


def _run(stream: EventStream, fh, prefix: bytes | None, text: bytearray, pool: list[_Worker]) -> Iterator[Block]:
    pending: deque = deque()  # (worker, start, end, last): sent, in order
    sent = searched = 0  # text[:sent] is sent; no boundary starts in text[sent + BLOCK:searched] past a scan
    eof, done = False, False
    turn = 0
    while True:
        while not done and len(pending) < IN_FLIGHT * len(pool):
            found = _BOUNDARY.search(text, max(sent + BLOCK, searched - 64)) if not eof else None
            if found is None and not eof:
                searched = len(text)
                more = fh.read(BLOCK)
                eof = not more
                text += more
                continue
            end, last = (found.start() + 1, False) if found else (len(text), True)
            worker = pool[turn % len(pool)]
            turn += 1
            worker.send(memoryview(text)[sent:end], last)
            pending.append((worker, sent, end, last))
            sent, done = (found.end() - 1, False) if found else (end, True)
        if not pending:
            break
        worker, start, end, last = pending.popleft()
        status, answer = worker.result()
        if status != "ok":
            yield from _serial_from(stream, fh, prefix, bytes(text[start:]))
            return
        block, closed = answer
        if last:
            stream._finish(prefix, bytes(text[start + closed:]) + fh.read())
        yield block
        drop = pending[0][1] if pending else sent  # the text before is no longer needed
        if drop:
            del text[:drop]
            pending = deque((w, s - drop, e - drop, la) for w, s, e, la in pending)
            sent, searched = sent - drop, max(0, searched - drop)


def _serial_from(stream: EventStream, fh, prefix: bytes | None, text: bytes) -> Iterator[Block]:
    """The rest of the trace read in this process from ``text`` (a block's start) on."""
    for events in stream._events_after(fh, prefix, text):
        yield fill(Block(), events)
