"""The npuab fixture (npumagic/pytest_plugin.py), tested as a user runs it: pytest in a subprocess
on a small test file, the plugin enabled by its entry point with ``-p npumagic`` (the entry point
read from pyproject.toml into a dist-info folder on the child's path, so the checkout's own
declaration is what is tested). Only the direction of a 2x sleep difference is asserted."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib

from .conftest import ROOT

TESTS = '''
import math, random, time

def old_step():
    time.sleep(0.004)

def new_step():  # twice the time
    time.sleep(0.008)

rng = random.Random(0)

def noisy_step():  # 5% slower on average and far noisier than 3 blocks can judge
    time.sleep(0.004 * math.exp(rng.gauss(0.05, 0.7)))

def test_slower(npuab):
    npuab(old_step, new_step, threshold=5, max_steps=400).assert_not_slower()

def test_same(npuab):
    npuab(old_step, old_step, threshold=50, max_steps=400).assert_not_slower()

def test_undecided(npuab):
    npuab(old_step, noisy_step, threshold=5, max_steps=24).assert_not_slower()
'''


def _pytest(tmp_path, *options: str) -> subprocess.CompletedProcess:
    entry_points = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["pytest11"]
    dist = tmp_path / "site" / "npumagic_plugin_ep-0.dist-info"
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: npumagic-plugin-ep\nVersion: 0\n")
    (dist / "entry_points.txt").write_text("[pytest11]\n" + "".join(f"{k} = {v}\n" for k, v in entry_points.items()))
    (tmp_path / "test_perf.py").write_text(TESTS)
    path = os.pathsep.join([str(tmp_path / "site"), str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, PYTHONPATH=path, COLUMNS="1000")  # the summary lines uncut
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rfs", "-p", "no:cacheprovider",
                           "--disable-plugin-autoload", "-p", "npumagic", *options, "test_perf.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)


def _line(output: str, start: str) -> str:
    found = [line for line in output.splitlines() if line.startswith(start)]
    assert len(found) == 1, output[-3000:]
    return found[0]


def test_a_2x_slower_variant_fails_saying_by_how_much_and_identical_variants_pass(tmp_path):
    # GIVEN a variant that sleeps twice as long, and one compared with itself
    # WHEN the suite runs them through the fixture
    done = _pytest(tmp_path, "-k", "not undecided")
    # THEN the slower fails, saying how much slower with the interval and the steps spent
    failed = _line(done.stdout, "FAILED test_perf.py::test_slower")
    assert "new_step is " in failed and "x slower than old_step" in failed, failed
    slower = float(failed.split("new_step is ")[1].split("x slower")[0])
    assert slower > 1.05  # the direction of the 2x difference, not its size (load moves that)
    assert "95% CI" in failed and "steps interleaved of --max-steps 400" in failed
    # and the identical pair passes
    assert "FAILED test_perf.py::test_same" not in done.stdout
    assert "1 failed" in done.stdout


def test_an_undecided_comparison_fails_with_its_own_message_or_is_skipped_as_asked(tmp_path):
    # GIVEN a comparison that three ABBA blocks cannot decide
    # WHEN it runs by default THEN it fails, saying it is undecided (not that B is slower)
    done = _pytest(tmp_path, "-k", "undecided")
    failed = _line(done.stdout, "FAILED test_perf.py::test_undecided")
    assert "npuab undecided: noisy_step against old_step" in failed and "24 steps interleaved" in failed, failed
    # WHEN --npuab-undecided=skip THEN it is skipped with the same reason
    done = _pytest(tmp_path, "-k", "undecided", "--npuab-undecided=skip")
    assert done.returncode == 0, done.stdout[-3000:]
    skipped = _line(done.stdout, "SKIPPED")
    assert "npuab undecided: noisy_step against old_step" in skipped


def test_the_plugin_loads_without_the_analysis_stack():
    # GIVEN a fresh process WHEN pytest would load the plugin THEN numpy, pandas and torch stay unloaded
    code = ("import sys, npumagic.pytest_plugin\n"
            "print(sorted(m for m in ('numpy', 'pandas', 'torch', 'scipy') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
