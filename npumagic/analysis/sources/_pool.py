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

The reading process writes each worker's tasks and reads its results in two threads of its own,
so it goes on cutting and appending while a worker decodes: a worker holds its GIL through a
decode, and reads its next task only between decodes (a reading thread in the worker waited for
its GIL, and the reading process, blocked writing to it, for the decode: the two took turns, each
under half busy). A worker ignores SIGINT and ends when its input closes: an interrupted read
kills the workers it started and leaves none behind.
"""

from __future__ import annotations

import os
import pickle
import queue
import re
import signal
import struct
import sys
import threading
from collections import deque
from pathlib import Path
from typing import Iterator

from .. import decode_worker
from ._inflate import open_trace
from ._kineto_block import Block, decode_block, fill
from ._kineto_decode import KinetoEvent
from ._stream import EventStream, _skip_separator

POOL_FROM = decode_worker.POOL_FROM
BLOCK = 4 * 2**20
READ_BLOCKS = 4  # blocks read at a time: the unsent rest of the last read is copied once a read
IN_FLIGHT = 2  # tasks per worker
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_TASK = struct.Struct("<q?")  # payload length, last block


def worker_count(path: Path) -> int:
    """Decode workers for the file at ``path``: one a core (at most ``NPUMAGIC_DECODE_WORKERS``),
    none for a small file, on one core, or where this Python cannot start itself again."""
    cores = decode_worker.cores()
    return cores if cores >= 2 and (decode_worker.text_size(path) or 0) >= POOL_FROM else 0


def serve(argv: list[str]) -> None:
    """A worker's loop: tasks from stdin, results (pickled Blocks) to stdout, until stdin closes;
    with ``argv`` ``["file", PATH]``, the whole file at PATH (:func:`serve_file`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the reading process handles Ctrl-C and ends us
    tasks_in, results = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing else may write to the results pipe
    if argv[:1] == ["file"]:
        serve_file(argv[1], results)
        return
    while len(head := tasks_in.read(_TASK.size)) == _TASK.size:
        size, last = _TASK.unpack(head)
        text = bytearray(size + 2)
        text[0] = ord("[")
        text[-1] = ord("]")
        if tasks_in.readinto(memoryview(text)[1:-1]) != size:
            return
        try:
            answer = ("ok", decode_block(text if last is False else memoryview(text)[:-1], last))
        except Exception as exc:  # noqa: BLE001 - any failure: the reading process reads that block itself
            answer = ("failed", f"{type(exc).__name__}: {exc}")
        del text
        _answer(results, answer)


def serve_file(path: str, results) -> None:
    """Decode the whole trace file at ``path`` as the reading process would (:class:`._stream.EventStream`,
    one Block per chunk): each Block as ``("block", Block)``, then ``("end", (header, counters,
    nonfinite, not_utf8))``, the stream's own findings; ``("failed", why)`` on any error (the
    reading process then reads the file itself, for the error naming it)."""
    try:
        for answer in _file_answers(path):
            _answer(results, answer)
    except BrokenPipeError:  # the reading process has ended: nothing to say, and no traceback at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), results.fileno())


def _file_answers(path: str) -> Iterator[tuple]:
    events = EventStream(path, KinetoEvent)
    try:
        with open_trace(Path(path)) as fh:
            for chunk in events._decode(fh):
                yield "block", fill(Block(), chunk)
    except Exception as exc:  # noqa: BLE001 - any failure: the reading process reads the file itself
        yield "failed", f"{type(exc).__name__}: {exc}"
        return
    yield "end", (events.header, events.counters, events.nonfinite, events.not_utf8)


def _answer(results, answer) -> None:
    data = pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL)
    results.write(decode_worker.ANSWER.pack(len(data)))
    results.write(data)
    results.flush()


class _Worker:
    """A decode worker, with this process's thread writing its tasks and one reading its results."""

    def __init__(self) -> None:
        self.process = decode_worker.start()
        self.tasks: queue.SimpleQueue = queue.SimpleQueue()
        self.results: queue.SimpleQueue = queue.SimpleQueue()
        self.threads = [threading.Thread(target=target, daemon=True, name="npumagic-decode-pipe")
                        for target in (self._write, self._read)]
        for thread in self.threads:
            thread.start()

    def send(self, payload: memoryview, last: bool) -> None:
        """Queue a task (a view of a buffer that is never resized); the writing thread sends it while
        this process goes on."""
        self.tasks.put((payload, last))

    def result(self) -> tuple[str, object]:
        """The worker's next answer, in the order of its tasks (waits for it)."""
        data = self.results.get()
        if data is None:
            return "failed", f"worker ended (exit status {self.process.poll()})"
        return pickle.loads(data)

    def _write(self) -> None:
        try:
            while (task := self.tasks.get()) is not None:
                payload, last = task
                for data in (memoryview(_TASK.pack(len(payload), last)), memoryview(payload)):
                    while data:  # a raw pipe write may take part of it
                        data = data[self.process.stdin.write(data):]
        except (OSError, ValueError):  # the worker ended, or was stopped: its results say so
            pass

    def _read(self) -> None:
        try:
            while (data := decode_worker.read_answer(self.process.stdout)) is not None:
                self.results.put(data)
        except (OSError, ValueError):
            pass
        self.results.put(None)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.tasks.put(None)
        for thread in self.threads:  # the pipes end with the process: no thread reads a closed descriptor
            thread.join(timeout=5)
        for pipe in (self.process.stdin, self.process.stdout):
            try:
                pipe.close()
            except OSError:
                pass
        self.process.wait()


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
    # the text is held as views of buffers never resized (each read makes a new one, with the unsent
    # rest of the last before it): a block is sent as a view, without a copy, while the cutting goes on
    pending: deque = deque()  # (worker, span, last) sent, in order; span: its text and the separator after
    unsent = memoryview(text)  # from a block's start on
    searched = 0  # no boundary starts in unsent[BLOCK:searched - 64] past a scan
    eof = done = False
    turn = 0
    while True:
        while not done and len(pending) < IN_FLIGHT * len(pool):
            found = _BOUNDARY.search(unsent, max(BLOCK, searched - 64)) if not eof else None
            if found is None and not eof:
                searched, kept = len(unsent), len(unsent)
                grown = bytearray(kept + READ_BLOCKS * BLOCK)
                grown[:kept] = unsent
                with memoryview(grown) as whole, whole[kept:] as free:
                    got = fh.readinto(free)
                eof = not got
                unsent = memoryview(grown)[:kept + got]
                continue
            end, last = (found.start() + 1, False) if found else (len(unsent), True)
            worker = pool[turn % len(pool)]
            turn += 1
            worker.send(unsent[:end], last)
            step = found.end() - 1 if found else end
            pending.append((worker, unsent[:step], last))
            unsent, searched, done = unsent[step:], max(0, searched - step), last
        if not pending:
            break
        worker, span, last = pending.popleft()
        status, answer = worker.result()
        if status != "ok":  # this block's text on, with every later one's, is read here
            yield from _serial_from(stream, fh, prefix, b"".join([span, *(p[1] for p in pending), unsent]))
            return
        block, closed = answer
        if last:
            stream._finish(prefix, bytes(span[closed:]) + fh.read())
        yield block


def _serial_from(stream: EventStream, fh, prefix: bytes | None, text: bytes) -> Iterator[Block]:
    """The rest of the trace read in this process from ``text`` (a block's start) on."""
    for events in stream._events_after(fh, prefix, text):
        yield fill(Block(), events)
