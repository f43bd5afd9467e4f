"""bench/device_check.py, the accelerator path's end-to-end check, run here on the CPU path: the
same script a GPU machine runs (its printout from an H200 is in the README), so it cannot rot."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_device_check_passes_every_check_on_the_cpu_path(tmp_path):
    # GIVEN no accelerator WHEN the device check runs every part (shell capture, compare, live index,
    # %npuab, npumagic run of a torchrun job) THEN each of its checks passes and it exits 0
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "device_check.py"), "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("device check: ") and " 0 failed" in last, last
    assert "no CUDA device: the CPU path" in done.stdout
    assert "[FAIL]" not in done.stdout
    assert "npumagic ddp: ok" in done.stdout  # the torchrun job was captured and recorded
