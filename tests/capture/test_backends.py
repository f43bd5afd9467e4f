"""Backend choice: torch_npu > CUDA > CPU, against the real import failures on this machine."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from npumagic.capture import CaptureOptions, choose_backend

from ..conftest import torch_npu_wheel



def test_without_torch_npu_or_cuda_the_cpu_backend_is_chosen_and_says_why():
    choice = choose_backend()
    assert choice.backend.name == "cpu"
    assert "torch_npu is not installed" in choice.reason
    assert "no CUDA device" in choice.reason
    assert str(choice).startswith("npumagic: profiling on cpu")


def test_npu_options_are_noted_on_the_cpu_backend():
    notes = choose_backend("cpu").backend.notes(CaptureOptions(level=1, aic_metrics="Memory", activities=("cpu", "npu")))
    assert any("ignored on cpu" in n for n in notes)
    assert any("--activities npu ignored" in n for n in notes)


def _unpacked_torch_npu(tmp_path: Path) -> Path:
    target = tmp_path / "site"
    with zipfile.ZipFile(torch_npu_wheel()) as wheel:
        wheel.extractall(target)
    return target


CHOOSE = "from npumagic.capture import choose_backend; c = choose_backend(); print(c.backend.name); print(c.reason)"


def _run_with(site: Path, **env_vars: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]), **env_vars)
    return subprocess.run([sys.executable, "-c", CHOOSE], env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # imports torch in a fresh process (~4 s)
def test_an_installed_torch_npu_without_cann_falls_back_cleanly(tmp_path):
    # The real torch_npu package on the path, without Ascend's CANN runtime (as on this machine).
    # torch itself refuses to import then unless device-backend auto-loading is off.
    done = _run_with(_unpacked_torch_npu(tmp_path), TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert done.returncode == 0, done.stderr
    name, reason = done.stdout.strip().splitlines()[-2:]
    assert name == "cpu"
    assert reason.startswith("torch_npu is installed but cannot initialise")
    assert ".so" in reason  # names the missing CANN library, e.g. libhccl.so


@pytest.mark.slow  # imports torch in a fresh process (~4 s)
def test_torch_npu_breaking_the_torch_import_gets_a_clear_error(tmp_path):
    done = _run_with(_unpacked_torch_npu(tmp_path))
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("npumagic.errors.NpumagicError: torch cannot be imported")
    assert "TORCH_DEVICE_BACKEND_AUTOLOAD=0" in last
