"""Figure titles that wrap onto more lines instead of running off the figure's right edge."""

from __future__ import annotations

import textwrap

CHAR_WIDTH_EM = 0.55  # DejaVu Sans' average character, in em


def wrap_title(text: str, width_in: float, fontsize: float) -> str:
    """``text`` broken into lines that fit ``width_in`` inches at ``fontsize`` points."""
    chars = max(20, int(width_in * 72 * 0.95 / (fontsize * CHAR_WIDTH_EM)))
    return "\n".join(textwrap.fill(line, chars) for line in text.splitlines() or [""])
