"""One short capture of a script for ``npumagic ab``: the script runs unmodified in a fresh
process, started as ``npumagic run`` starts a command (:func:`npumagic.capture.launch.run`: its
bootstrap, its handling of Ctrl-C), with :mod:`npumagic.capture.timed` timing its steps instead
of a profiler recording them. Returns the wall time of each timed step; a script that fails,
or ends before its steps, is a :class:`ScriptFailed` naming it, its exit status and the tail of
its output."""

from __future__ import annotations

import collections
import json
import shlex
import tempfile
from pathlib import Path

from ..errors import NpumagicError
from . import launch
from .inject import Config
from .timed import TIMED_DIR

TAIL_LINES = 15  # of the script's output, in the message of a failed capture


class ScriptFailed(NpumagicError):
    """A capture whose script failed, or ended before the steps it was to time."""


class _Tail:
    """The last lines written to it (the script's stdout and stderr, merged by :func:`launch.run`)."""

    def __init__(self) -> None:
        self.lines: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)

    def write(self, text: str) -> None:
        self.lines.extend(text.splitlines())

    def flush(self) -> None:
        pass

    def text(self) -> str:
        return "\n".join("    " + line for line in self.lines) or "    (no output)"


def time_steps(argv: list[str], skip: int, steps: int, label: str) -> list[float]:
    """Run ``argv`` until ``skip + steps`` steps have ended and return the last ``steps``' wall
    times (s, those of its lowest rank). ``label`` names the script in errors ("A (python a.py)")."""
    tail = _Tail()
    with tempfile.TemporaryDirectory(prefix="npumagic-ab-") as run_dir:
        config = Config(run_dir, {}, timing={"skip": skip, "steps": steps})
        ended = launch.run(argv, launch.environment(config), output=tail)
        if ended.status == "interrupted":
            raise KeyboardInterrupt
        timed = _lowest_rank(Path(run_dir) / TIMED_DIR)
    if ended.returncode != 0:
        raise ScriptFailed(f"script {label} {ended.describe()}; the end of its output:\n{tail.text()}")
    if timed is None:
        raise ScriptFailed(f"script {label} ended before its first step boundary: no process called "
                           f"optimizer.step() or npumagic.step(); the end of its output:\n{tail.text()}")
    if len(timed["step_us"]) < steps:
        raise ScriptFailed(f"script {label} ended after {timed['boundaries']} step boundaries, before the "
                           f"{skip} skipped and {steps} timed steps of a capture: lower --steps-per-capture or "
                           f"--skip, or give it more steps ({shlex.join(argv)})")
    return [us / 1e6 for us in timed["step_us"]]


def _lowest_rank(folder: Path) -> dict | None:
    """The record of the lowest rank that wrote one (each process of the script writes its own)."""
    found = []
    for path in folder.glob("*.json"):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # a process killed while writing
        found.append(record)
    return min(found, key=lambda r: r.get("rank", 0)) if found else None
