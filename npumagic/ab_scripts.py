"""``npumagic ab``'s experiment: short captures of two scripts alternated A B B A B A A B ...
(:mod:`npumagic.capture.script_timing`), decided after every pair (:mod:`npumagic.analysis.ab_scripts`;
capture never imports analysis, this module joins them)."""

from __future__ import annotations

import statistics
import sys
from typing import Callable

from .analysis.ab_scripts import MIN_PAIRS, ScriptsResult, decide, side_of
from .analysis.ab import THRESHOLD
from .capture.script_timing import time_steps
from .errors import NpumagicError

Progress = Callable[[int, str, float, ScriptsResult | None], None]  # capture (from 1), side, its median, the decision


def alternate_scripts(commands: dict[str, list[str]], names: tuple[str, str], steps: int, skip: int,
                      max_captures: int, threshold: float = THRESHOLD,
                      progress: Progress | None = None) -> ScriptsResult:
    """Alternate captures of ``commands["a"]`` and ``commands["b"]`` (argv lists) until decided
    or ``max_captures`` are spent; ``steps`` timed steps a capture after ``skip``."""
    if max_captures < 2 * MIN_PAIRS:
        raise NpumagicError(f"--max-captures {max_captures}: at least {2 * MIN_PAIRS} are needed ({MIN_PAIRS} pairs, "
                            "the fewest the test can decide on)")
    if steps < 1 or skip < 0:
        raise NpumagicError(f"--steps-per-capture {steps} and --skip {skip}: at least 1 step, and no negative skip")
    medians: dict[str, list[float]] = {"a": [], "b": []}
    result = decide([], [], names, threshold, steps, max_captures)
    for k in range(max_captures - max_captures % 2):
        side = side_of(k)
        name = names[0] if side == "a" else names[1]
        label = side.upper() if name == side.upper() else f"{side.upper()} ({name})"
        median = statistics.median(time_steps(commands[side], skip, steps, label))
        medians[side].append(median)
        paired = k % 2 == 1
        if paired:
            result = decide(medians["a"], medians["b"], names, threshold, steps, max_captures)
        if progress is not None:
            progress(k + 1, side, median, result if paired else None)
        if paired and result.decided:
            break
    return result


def python_command(script: str, args: list[str]) -> list[str]:
    """The argv that runs ``script`` with this interpreter."""
    return [sys.executable, script, *args]
