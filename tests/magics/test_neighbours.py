"""Other processes on the accelerator, as the driver's own tool lists them: a fake nvidia-smi and
npu-smi on PATH print what the real ones print, and a run that shared its device says so."""

from __future__ import annotations

import os
import stat

import npumagic
from npumagic.analysis.run_facts import RunFacts
from npumagic.analysis.trust import caveat
from npumagic.capture.neighbours import other_device_processes

from ..conftest import CUDA, shared_summary

NPU_SMI = """+------------------------------------------------------------------------------------------------+
| npu-smi 23.0.0                   Version: 23.0.0                                               |
+---------------------------+---------------+----------------------------------------------------+
| NPU     Chip              | Process id    | Process name             | Process memory(MB)      |
+===========================+===============+====================================================+
| 0       0                 | 4242          | python3                  | 3021                    |
| 0       0                 | {own}         | python3                  | 1200                    |
+===========================+===============+====================================================+
"""


def _tool(tmp_path, monkeypatch, name, output):
    tool = tmp_path / name
    (tmp_path / f"{name}.out").write_text(output)
    tool.write_text(f"#!/bin/sh\ncat '{tmp_path / name}.out'\n")
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")


def test_other_processes_on_a_gpu_are_listed_without_this_one(tmp_path, monkeypatch):
    _tool(tmp_path, monkeypatch, "nvidia-smi", f"4242, /usr/bin/python3, 30210\n{os.getpid()}, python, 512\n")
    assert other_device_processes("cuda") == [{"pid": 4242, "name": "python3", "memory_mib": 30210.0}]
    assert other_device_processes("cpu") == []


def test_other_processes_on_an_npu_are_read_from_npu_smi(tmp_path, monkeypatch):
    _tool(tmp_path, monkeypatch, "npu-smi", NPU_SMI.format(own=os.getpid()))
    assert other_device_processes("npu") == [{"pid": 4242, "name": "python3", "memory_mib": 3021.0}]


def test_without_the_drivers_tool_nothing_is_said(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert other_device_processes("cuda") == [] and other_device_processes("npu") == []


def test_a_run_that_shared_its_device_says_its_step_times_are_unreliable():
    base = shared_summary(CUDA / "ns_resolution")
    shared = RunFacts(device_neighbours=[{"pid": 4242, "name": "python3", "memory_mib": 30210.0}])
    assert "1 other process used the device while it ran (python3 (pid 4242, 30,210 MiB))" in caveat(base, shared)
    assert "unreliable" in npumagic.checklist(base, facts=shared).steps[0][1]
    assert caveat(base) == "" and caveat(base, RunFacts()) == ""
