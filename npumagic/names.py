"""Run names, the one place they are checked: a run name becomes part of file and directory
names (``OUTPUT_DIR/NAME``, ``NAME_timeline.png``), so it may hold no path separator, no
``..`` and nothing a shell or file system treats specially."""

from __future__ import annotations

import re

from .errors import NpumagicError

DB_NAME = "history.sqlite"  # the history in an output directory (here, so the CLI names it without pandas)
OUTPUT_DIR = "npumagic_runs"  # where the magics write their runs by default (NpuMagics.output_dir)
DEMO_DIR = "npumagic_demo"
PERFETTO_SUFFIX = ".perfetto.json"  # npumagic trace's default file: NAME.perfetto.json
RUN_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")
RULE = "letters, digits, '_', '-' or '.', starting with a letter or '_', at most 64 characters"


class BadName(NpumagicError, ValueError):
    """A run name that cannot be used as part of a path."""


def check_name(name: str) -> str:
    """Return ``name`` when it is a valid run name, else raise :class:`BadName` saying why."""
    if not isinstance(name, str) or not RUN_NAME.match(name) or ".." in name:
        raise BadName(f"invalid run name {str(name)[:80]!r}: use {RULE}")
    return name


def file_stem(name: str) -> str:
    """A file-name-safe form of a stored run name (histories may predate :func:`check_name`,
    or have been edited): every other character becomes '_', and no leading dot."""
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", str(name)).replace("..", "__").lstrip(".")
    return stem[:64] or "run"
