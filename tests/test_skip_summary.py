"""The suite says why it skipped: one line per reason with its count (tests/conftest.py), not bare ``s``."""

from __future__ import annotations

import os
import subprocess
import sys

from .conftest import NEED_CHROMIUM, NEED_SHARED, ROOT, skip_lines


def test_skips_group_by_what_they_need_whatever_the_detail():
    # GIVEN three skips for absent shared files, two for chromium and one of another kind
    reasons = [f"{NEED_SHARED} — /x/ascend/level{i} is absent" for i in range(3)]
    reasons += [f"{NEED_CHROMIUM} — no chromium", f"{NEED_CHROMIUM} — chromium cannot start: boom", "level 0"]
    # WHEN they are summarised THEN one line each, most first, counted and worded as a sentence
    assert skip_lines(reasons) == ["3 tests need ../shared/data (or NPUMAGIC_SHARED)", "2 tests need Debian's chromium",
                                   "1 skipped: level 0"]
    assert skip_lines([f"{NEED_CHROMIUM} — no chromium"]) == ["1 test needs Debian's chromium"]


def test_the_test_command_prints_why_it_skipped(tmp_path):
    # GIVEN no shared data WHEN a test module that reads it runs, on two workers as the README's command does
    env = dict(os.environ, NPUMAGIC_SHARED=str(tmp_path / "absent"))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "no:cacheprovider",
                           "tests/render/test_live_lod.py"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    # THEN the summary names the reason once with its count
    assert done.returncode == 0, done.stdout[-2000:]
    lines = done.stdout.splitlines()
    counted = [line for line in lines if line.endswith("need ../shared/data (or NPUMAGIC_SHARED)")
               or line.endswith("needs ../shared/data (or NPUMAGIC_SHARED)")]
    assert len(counted) == 1, done.stdout[-2000:]
    assert int(counted[0].split()[0]) >= 1
