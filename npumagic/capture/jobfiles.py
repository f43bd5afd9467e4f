"""Reading the small JSON files of an on-demand job's folder (the job file, the trigger file,
each process's record) as what they are: files that anyone who can write the folder may have
edited or planted while the job runs.

One reader serves them all. It opens a file without following a link at its name and without
blocking on a planted FIFO, refuses one another user owns (npumagic writes them as the user
who runs it), reads at most :data:`MAX_BYTES`, and checks each field it knows against what
npumagic writes there (type, range, null or not): an integer field is never a bool, a text,
a float or a number too large for a pid. What it returns holds only the fields checked. A
file that fails is a :class:`BadFile` naming the file and the field, never a ``KeyError`` or
an ``OverflowError`` from deep inside the job's parent; :func:`said_once` reports one that is
skipped, once per file and fault, so a job's parent that reads its folder every 0.2 s says
it once."""

from __future__ import annotations

import json
import math
import os
import reprlib
import stat
import sys
import warnings
from pathlib import Path
from typing import Callable

from ..errors import NpumagicError

MAX_BYTES = 1 << 20  # npumagic's own records are a few kB; a bigger file is not one of them
PID_MAX = 2**31 - 1  # above any platform's pid (Linux caps pid_max at 2**22)
COUNT_MAX = 2**31 - 1  # steps, ranks, boundaries: a larger one is no count a job could reach
ID_MAX = 999_999_999  # trigger ids: trigger-ID folder names of at most nine digits

_short = reprlib.Repr()
_short.maxstring = _short.maxother = _short.maxlong = 40


class BadFile(NpumagicError):
    """A job-folder file that is not what npumagic writes there: names the file and the fault."""

    def __init__(self, path: object, problem: str) -> None:
        self.path, self.problem = str(path), problem
        super().__init__(f"{self.path}: {problem}")

    def __reduce__(self):
        return type(self), (self.path, self.problem)


Check = Callable[[object], "str | None"]  # a field's check: None when the value is fine, else why not


def integer(low: int, high: int) -> Check:
    def check(value: object) -> str | None:
        if type(value) is not int or not low <= value <= high:
            return f"must be an integer from {low} to {high}, not {_shown(value)}"
        return None
    return check


def number(value: object) -> str | None:
    if type(value) not in (int, float) or not math.isfinite(value) or abs(value) > 1e15:
        return f"must be a finite number, not {_shown(value)}"
    return None


def text(value: object) -> str | None:
    return None if isinstance(value, str) else f"must be a text, not {_shown(value)}"


def texts(value: object) -> str | None:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return f"must be a list of texts, not {_shown(value)}"
    return None


def mapping(value: object) -> str | None:
    return None if isinstance(value, dict) else f"must be an object, not {_shown(value)}"


def mappings(value: object) -> str | None:
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        return f"must be a list of objects, not {_shown(value)}"
    return None


def one_of(*allowed: str) -> Check:
    def check(value: object) -> str | None:
        return None if value in allowed else f"must be one of {', '.join(allowed)}, not {_shown(value)}"
    return check


def nullable(check: Check) -> Check:
    return lambda value: None if value is None else check(value)


# name: (check, required); what npumagic itself writes in each (see on_demand, launch, inject)
JOB_FIELDS: dict[str, tuple[Check, bool]] = {
    "pid": (integer(1, PID_MAX), True), "started": (nullable(number), True), "command": (texts, True),
    "steps": (integer(1, COUNT_MAX), True), "output_dir": (text, True), "created": (number, False)}
TRIGGER_FIELDS: dict[str, tuple[Check, bool]] = {
    "id": (integer(1, ID_MAX), True), "steps": (integer(1, COUNT_MAX), True), "written": (number, False)}
PROCESS_FIELDS: dict[str, tuple[Check, bool]] = {
    "pid": (integer(1, PID_MAX), True), "created": (nullable(number), False), "state": (one_of("running", "done"), True),
    "rank": (integer(0, COUNT_MAX), False), "host": (nullable(text), False),
    "trigger": (nullable(integer(1, ID_MAX)), False), "backend": (nullable(text), False),
    "device": (nullable(text), False), "versions": (mapping, False), "notes": (texts, False),
    "started": (number, False), "finished": (number, False), "steps": (integer(0, COUNT_MAX), False),
    "recorded": (integer(0, COUNT_MAX), False), "wanted": (integer(0, COUNT_MAX), False),
    "boundaries": (integer(0, COUNT_MAX), False), "error": (nullable(text), False),
    "stopped": (nullable(text), False), "dataloaders": (mappings, False)}


def read_json(path: str | Path) -> object:
    """The JSON value in ``path``. FileNotFoundError when there is none; :class:`BadFile` when
    it is a link, not a regular file, another user's, larger than :data:`MAX_BYTES` or not JSON."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise
    except OSError as exc:  # ELOOP: a link at the name
        raise BadFile(path, "a symbolic link" if os.path.islink(path) else f"cannot be read ({exc.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise BadFile(path, "not a regular file")
        euid = getattr(os, "geteuid", None)
        if euid is not None and st.st_uid != euid():
            raise BadFile(path, f"owned by another user (uid {st.st_uid}): npumagic reads only its own user's files here")
        data = b""
        while len(data) <= MAX_BYTES:
            chunk = os.read(fd, MAX_BYTES + 1 - len(data))
            if not chunk:
                break
            data += chunk
    except OSError as exc:
        raise BadFile(path, f"cannot be read ({exc.strerror})") from None
    finally:
        os.close(fd)
    if len(data) > MAX_BYTES:
        raise BadFile(path, f"larger than {MAX_BYTES // 1024} KiB: not one of npumagic's records")
    try:
        return json.loads(data)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError; a deep nest, RecursionError
        raise BadFile(path, "not JSON") from None


def read_record(path: str | Path, fields: dict[str, tuple[Check, bool]], what: str) -> dict:
    """The fields of ``fields`` that the JSON object in ``path`` holds, each checked; ``what``
    names the file in the message (e.g. "a process record"). FileNotFoundError or BadFile."""
    value = read_json(path)
    if not isinstance(value, dict):
        raise BadFile(path, f"not {what}: a JSON {type(value).__name__ if value is not None else 'null'}, "
                            "not an object")
    out = {}
    for name, (check, required) in fields.items():
        if name not in value:
            if required:
                raise BadFile(path, f"not {what}: it has no {name!r}")
            continue
        problem = check(value[name])
        if problem is not None:
            raise BadFile(path, f"not {what}: {name!r} {problem}")
        out[name] = value[name]
    return out


_said: set[tuple[str, str]] = set()


def said_once(error: BadFile, doing: str = "skipped", stderr: bool = False) -> None:
    """Report ``error`` (a file passed over) once per file and fault in this process: as a
    warning, or with ``stderr`` as one line there (inside a job's own processes, which
    must not meet a warnings filter that turns it into an error)."""
    key = (error.path, error.problem)
    if key in _said:
        return
    _said.add(key)
    message = f"{doing} {error}"
    if stderr:
        print(f"npumagic: {message}", file=sys.stderr)
    else:
        warnings.warn(message, stacklevel=2)


def _shown(value: object) -> str:
    if value is None:
        return "null"
    if type(value) is int and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    return f"{type(value).__name__} {_short.repr(value)}"
