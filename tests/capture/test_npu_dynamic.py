"""The profiler_config.json npumagic writes for torch_npu's dynamic profiler, read back by the
torch-npu 2.14.0 wheel's own ConfigContext (its Python source and its _ExperimentalConfig's
checks; only the compiled torch_npu._C, which needs CANN, is replaced by the two names it
exports to them)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from npumagic.capture import CaptureOptions
from npumagic.capture.npu_dynamic import INSTANT, profiler_config, write_config

from ..conftest import torch_npu_wheel

C_PROFILER = textwrap.dedent("""
    import enum
    class ProfilerActivity(enum.Enum):  # torch_npu._C._profiler.ProfilerActivity's members
        CPU = 0
        NPU = 1
    class _ExperimentalConfig:  # the compiled config the Python one builds when called
        def __init__(self, *args, **kwargs):
            pass
""")

READ_BACK = textwrap.dedent("""
    import json, sys
    from torch_npu.profiler._dynamic_profiler._dynamic_profiler_config_context import ConfigContext
    c = ConfigContext(json.load(open(sys.argv[1])))
    e = c.experimental_config
    print(json.dumps({"valid": c.valid(), "activities": sorted(a.name for a in c.activities()), "prof_dir": c.prof_path,
                      "active": c.active(), "warmup": c.warmup(), "start_step": c.start_step(), "instant": c.start(),
                      "analyse": c.analyse(), "record_shapes": c.record_shapes, "profile_memory": c.profile_memory,
                      "with_stack": c.with_stack, "level": e._profiler_level, "aic_metrics": e._aic_metrics,
                      "l2_cache": e._l2_cache, "export_type": sorted(e._export_type),
                      "data_simplification": e._data_simplification, "gc": e._gc_detect_threshold}))
""")


@pytest.fixture(scope="module")
def wheel_parser(tmp_path_factory) -> Path:
    """The wheel's profiler package (and the few modules it imports), importable without CANN."""
    root = tmp_path_factory.mktemp("torch_npu_parser")
    with zipfile.ZipFile(torch_npu_wheel()) as wheel:
        for name in wheel.namelist():
            if name.endswith(".py") and (name.startswith(("torch_npu/profiler/", "torch_npu/_init/common/"))
                                         or (name.startswith("torch_npu/utils/") and name.count("/") == 2)):
                wheel.extract(name, root)
    package = root / "torch_npu"
    for init in ("__init__.py", "_init/__init__.py", "utils/__init__.py", "profiler/__init__.py", "_C/__init__.py"):
        (package / init).parent.mkdir(parents=True, exist_ok=True)
        (package / init).write_text("")  # not the real ones: they import the compiled extension
    (package / "_C" / "_profiler.py").write_text(C_PROFILER)
    return root


def read_back(root: Path, config: dict, tmp_path: Path) -> dict:
    path = write_config(tmp_path / "cfg", config)
    env = {"PYTHONPATH": str(root), "PATH": "", "RANK": "0"}  # torch_npu warns when it finds no rank
    done = subprocess.run([sys.executable, "-c", READ_BACK, str(path)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "[WARNING]" not in done.stdout + done.stderr  # nothing of ours was reset or ignored
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_schedule_and_settings_read_back_as_given(wheel_parser, tmp_path):
    options = CaptureOptions(wait=2, warmup=1, steps=4, skip_first=3, level=1, aic_metrics="PipeUtilization",
                             shapes=True, memory=True, export=("text", "db"), l2_cache=True)
    got = read_back(wheel_parser, profiler_config(options, tmp_path / "prof"), tmp_path)
    assert got == {"valid": True, "activities": ["CPU", "NPU"], "prof_dir": str(tmp_path / "prof"), "active": 4,
                   "warmup": 1, "start_step": 6, "instant": False, "analyse": True, "record_shapes": True,
                   "profile_memory": True, "with_stack": False, "level": "Level1",
                   "aic_metrics": "ACL_AICORE_PIPE_UTILIZATION", "l2_cache": True, "export_type": ["db", "text"],
                   "data_simplification": True, "gc": None}


def test_on_demand_starts_at_the_next_step(wheel_parser, tmp_path):
    got = read_back(wheel_parser, profiler_config(CaptureOptions(steps=2, activities=("npu",), keep_raw=True),
                                                  tmp_path, start_step=INSTANT), tmp_path)
    assert (got["instant"], got["active"], got["activities"], got["data_simplification"]) == (True, 2, ["NPU"], False)


def test_repeat_is_refused_as_dynamic_profile_records_one_window():
    with pytest.raises(ValueError, match="--repeat 2"):
        profiler_config(CaptureOptions(repeat=2), "x")
