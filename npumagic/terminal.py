"""Text shown in a terminal, made inert: a trace's kernel names, a note or a cell's source can
hold escape sequences (OSC 52 writes the clipboard, OSC 8 hides a link, CSI clears the screen)
and bidirectional overrides that reorder what is read. Every text output passes through
:func:`safe_text` (the CLI's streams through :class:`SafeStream`)."""

from __future__ import annotations

import functools
import re
import shutil
import sys
import textwrap
from typing import Callable, TextIO

# C0 controls but tab and newline, DEL, C1 controls (0x9b is an 8-bit CSI), bidi overrides
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
REPLACEMENT = "\ufffd"


def safe_text(text: object) -> str:
    """``text`` as a string with every control character replaced by U+FFFD."""
    return _UNSAFE.sub(REPLACEMENT, str(text))


# what starts a new line where text is read as lines (str.splitlines): newline, CR and the C0/C1
# separators safe_text already replaces, tab, and Unicode's line and paragraph separators
_BREAKS = re.compile("[\t\n\u2028\u2029]")


def one_line(text: object) -> str:
    """``text`` as :func:`safe_text` makes it, and one line: its newlines, tabs and Unicode line
    separators replaced by U+FFFD too, so a name or a note shown in a row or a sentence can never
    start a line of its own (where an answer is read by a model, a line that reads as an
    instruction)."""
    return _BREAKS.sub(REPLACEMENT, safe_text(text))


def terminal_safe(func: Callable[..., str]) -> Callable[..., str]:
    """Decorate a function returning text for a terminal so that its result is :func:`safe_text`."""

    @functools.wraps(func)
    def safe(*args, **kwargs) -> str:
        return safe_text(func(*args, **kwargs))

    return safe


class SafeStream:
    """A text stream that writes :func:`safe_text` of what it is given to ``stream``."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        return self._stream.write(safe_text(text))

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


DEFAULT_WIDTH = 100  # columns when neither COLUMNS nor a terminal says (output piped to a file)


def terminal_width() -> int:
    """The terminal's width in columns: ``COLUMNS``, else the terminal's own, else 100."""
    return shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns


def display_width() -> int | None:
    """The width to wrap shown text to: the terminal's where output goes to one (a terminal
    IPython, a script); None elsewhere (a notebook's output area wraps by itself, a pipe or a
    file keeps whole lines)."""
    try:
        return terminal_width() if sys.stdout.isatty() else None
    except (AttributeError, ValueError):  # no stdout, or a closed one
        return None


def wrap(line: str, width: int | None, indent: int | str = 4) -> str:
    """``line`` wrapped to ``width`` columns, its continuation lines indented by ``indent``
    (spaces, or the text to indent with); unchanged when ``width`` is None. Words are never
    broken (a kernel name or a URL stays whole and may overrun the width)."""
    if width is None or len(line) <= width:
        return line
    hang = indent if isinstance(indent, str) else " " * indent
    return textwrap.fill(line, width, subsequent_indent=hang, break_long_words=False, break_on_hyphens=False)
