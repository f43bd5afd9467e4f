"""The torch_npu profiler arguments: built by a pure function for every option combination (with
the refusals), and checked against the real torch_npu 2.14.0 wheel's source: every argument and
enum member npumagic passes exists there, and torch_npu's own _ExperimentalConfig (run from the
wheel's source, without CANN) keeps every configuration npumagic builds exactly as given."""

from __future__ import annotations

import ast
import itertools
import sys
import types
import zipfile
from pathlib import Path

import pytest

from npumagic.capture.npu_args import EXPORT, HOST_SYS, Enum, materialize, npu_profile_spec
from npumagic.capture.options import AIC_METRICS, CaptureOptions

from ..conftest import torch_npu_wheel

LEVELS = (0, 1, 2)
METRICS = (None, "AiCoreNone", "PipeUtilization", "L2Cache", "MemoryAccess")
ACTIVITIES = (None, ("cpu",), ("npu",), ("cpu", "npu"))
GC = (None, 0.0, 5.0)
HOSTS = (None, ("cpu", "mem"), ("cpu", "mem", "disk", "network", "osrt"))
EXPORTS = (("text",), ("db",), ("text", "db"))
FLAGS = (False, True)  # l2_cache, keep_raw, and record_shapes/profile_memory/with_stack/with_modules together


def _combinations():
    return itertools.product(LEVELS, METRICS, ACTIVITIES, GC, HOSTS, EXPORTS, FLAGS, FLAGS, FLAGS)


def _build(level, metrics, activities, gc, host_sys, export, l2, keep_raw, recording) -> CaptureOptions:
    return CaptureOptions(wait=2, warmup=1, steps=3, repeat=2, skip_first=4, level=level, aic_metrics=metrics,
                          activities=activities, gc_threshold_ms=gc, host_sys=host_sys, export=export, l2_cache=l2,
                          keep_raw=keep_raw, shapes=recording, memory=recording, stack=recording, modules=recording)


def _refusal(level, metrics, activities, gc) -> str | None:
    if metrics not in (None, "AiCoreNone") and level == 0:
        return "needs --level 1 or 2"
    if gc is not None and activities is not None and "cpu" not in activities:
        return "--gc-threshold needs the cpu activity"
    return None


def test_every_option_combination_builds_the_arguments_it_names_or_is_refused(tmp_path):
    built = refused = 0
    for combo in _combinations():
        level, metrics, activities, gc, host_sys, export, l2, keep_raw, recording = combo
        expected_refusal = _refusal(level, metrics, activities, gc)
        if expected_refusal:
            with pytest.raises(ValueError, match=expected_refusal.replace("-", r"\-")):
                _build(*combo)
            refused += 1
            continue
        spec = npu_profile_spec(_build(*combo), tmp_path / "run", "node7")
        built += 1
        config = spec["experimental_config"]
        assert config["profiler_level"] == f"ProfilerLevel.Level{level}"
        assert config["aic_metrics"] == f"AiCMetrics.{metrics or ('AiCoreNone' if level == 0 else 'PipeUtilization')}"
        assert config["l2_cache"] is l2 and config["data_simplification"] is (not keep_raw)
        assert config["export_type"] == [f"ExportType.{e.capitalize()}" for e in export]
        assert config.get("host_sys") == ([HOST_SYS[h] for h in host_sys] if host_sys else None)
        assert config.get("gc_detect_threshold") == gc
        wanted = activities or ("cpu", "npu")
        assert spec["activities"] == [f"ProfilerActivity.{a.upper()}" for a in ("cpu", "npu") if a in wanted]
        assert spec["schedule"] == {"wait": 2, "warmup": 1, "active": 3, "repeat": 2, "skip_first": 4}
        assert spec["on_trace_ready"] == {"dir_name": str(tmp_path / "run"), "worker_name": "node7"}
        assert [spec[k] for k in ("record_shapes", "profile_memory", "with_stack", "with_modules")] == [recording] * 4
        assert all(isinstance(v, Enum) for v in [*spec["activities"], config["profiler_level"], config["aic_metrics"]])
    assert built > 3000 and refused > 1000


@pytest.mark.parametrize("kwargs, message", [
    ({"level": 0, "aic_metrics": "PipeUtilization"}, "--aic-metrics PipeUtilization needs --level 1 or 2"),
    ({"gc_threshold_ms": -1.0}, "--gc-threshold must be >= 0"),
    ({"gc_threshold_ms": 1.0, "activities": ("npu",)}, "needs the cpu activity"),
    ({"host_sys": ("cpu", "gpu")}, "--host-sys must be a comma list of cpu, mem, disk, network, osrt"),
    ({"export": ("json",)}, "--export must be a comma list of text, db"),
    ({"export": ()}, "--export must be"),
])
def test_refusals_name_what_is_allowed(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        CaptureOptions(**kwargs)


def test_the_worker_name_is_the_host_alone_as_torch_npu_appends_the_pid(tmp_path):
    # torch_npu's _profiler_path_creator.py: "{worker_name or hostname}_{pid}_{time}_ascend_pt"
    spec = npu_profile_spec(CaptureOptions(), tmp_path, "myhost")
    assert spec["on_trace_ready"]["worker_name"] == "myhost"


# -- against the real wheel ------------------------------------------------------------------
@pytest.fixture(scope="module")
def wheel_src(tmp_path_factory) -> Path:
    target = tmp_path_factory.mktemp("torch_npu_src")
    with zipfile.ZipFile(torch_npu_wheel()) as wheel:
        for name in wheel.namelist():
            if name.endswith(".py") and (name.startswith("torch_npu/profiler/") or name in (
                    "torch_npu/__init__.py", "torch_npu/version.py", "torch_npu/utils/collect_env.py",
                    "torch_npu/_init/patches/api_patches.py")):
                wheel.extract(name, target)
    return target / "torch_npu"


def _parameters(path: Path, qualname: str) -> set[str]:
    """Keyword parameter names of a function or a class's __init__ in a source file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    owner, _, name = qualname.rpartition(".")
    for node in ast.walk(tree):
        if owner and isinstance(node, ast.ClassDef) and node.name == owner:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == name:
                    return {a.arg for a in item.args.args + item.args.kwonlyargs}
        if not owner and isinstance(node, ast.FunctionDef) and node.name == name:
            return {a.arg for a in node.args.args + node.args.kwonlyargs}
    raise AssertionError(f"{qualname} not found in {path}")


def _class_members(path: Path, cls: str) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls)
    return {t.id for item in node.body if isinstance(item, ast.Assign) for t in item.targets if isinstance(t, ast.Name)}


def test_every_argument_and_enum_member_npumagic_passes_exists_in_torch_npu_2_14(wheel_src, tmp_path):
    profiler = wheel_src / "profiler"
    every = [npu_profile_spec(_build(*c), tmp_path, "h") for c in _combinations() if not _refusal(*c[:4])]
    assert set(every[0]) - {"schedule", "on_trace_ready", "experimental_config"} <= \
        _parameters(profiler / "profiler.py", "profile.__init__")
    assert {"schedule", "on_trace_ready", "experimental_config"} <= _parameters(profiler / "profiler.py",
                                                                                "profile.__init__")
    assert set(every[0]["schedule"]) <= _parameters(profiler / "scheduler.py", "Schedule.__init__")
    assert set(every[0]["on_trace_ready"]) <= _parameters(profiler / "profiler.py", "tensorboard_trace_handler")
    config_keys = set().union(*(spec["experimental_config"] for spec in every))
    assert config_keys <= _parameters(profiler / "experimental_config.py", "_ExperimentalConfig.__init__")
    # enum members: the Python enums by their class bodies; ProfilerActivity (a C enum) by its use
    enums = {v for spec in every for v in [*spec["activities"], *spec["experimental_config"].values()]
             + [x for x in spec["experimental_config"].get("host_sys", []) + spec["experimental_config"]["export_type"]]
             if isinstance(v, Enum)}
    assert {e.split(".")[0] for e in enums} == {"ProfilerActivity", "ProfilerLevel", "AiCMetrics", "ExportType",
                                               "HostSystem"}
    exported = (profiler / "__init__.py").read_text()
    for enum in enums:
        owner, member = enum.split(".")
        assert owner in exported, f"torch_npu.profiler does not export {owner}"
        if owner == "ProfilerActivity":
            assert f"ProfilerActivity.{member}" in (profiler / "profiler_interface.py").read_text()
        else:
            assert member in _class_members(profiler / "experimental_config.py", owner), enum
    for name in ("profile", "schedule", "tensorboard_trace_handler", "_ExperimentalConfig"):
        assert name in exported
    assert set(AIC_METRICS) == _class_members(profiler / "experimental_config.py", "AiCMetrics")
    assert {v.split(".")[1] for v in EXPORT.values()} == _class_members(profiler / "experimental_config.py",
                                                                        "ExportType")
    # the CANN version npumagic records: torch.version.cann, set when torch_npu is imported
    assert "torch.version.cann = get_cann_version()" in (wheel_src / "utils" / "collect_env.py").read_text()
    assert "_add_collect_env_methods()" in (wheel_src / "_init" / "patches" / "api_patches.py").read_text()


@pytest.fixture
def real_config(wheel_src, monkeypatch):
    """torch_npu 2.14.0's own experimental_config module, imported from the wheel's source with
    only its native and CANN imports stubbed; its warnings are collected."""
    profiler = wheel_src / "profiler"

    def package(name: str, path: Path | None = None) -> types.ModuleType:
        module = types.ModuleType(name)
        module.__path__ = [str(path)] if path else []
        monkeypatch.setitem(sys.modules, name, module)
        return module

    for name in [m for m in list(sys.modules) if m == "torch_npu" or m.startswith("torch_npu.")]:
        monkeypatch.delitem(sys.modules, name)
    npu = package("torch_npu", wheel_src)
    c_ext = package("torch_npu._C")
    c_ext._profiler = types.SimpleNamespace(_ExperimentalConfig=lambda **kw: kw)
    npu._C = c_ext
    package("torch_npu.profiler", profiler)
    package("torch_npu.profiler.analysis", profiler / "analysis")
    package("torch_npu.profiler.analysis.prof_common_func", profiler / "analysis" / "prof_common_func")
    package("torch_npu._init")
    package("torch_npu._init.common")
    warning_utils = package("torch_npu._init.common.warning_utils")
    warning_utils._should_print_warning = lambda: True
    package("torch_npu.utils")
    error_code = package("torch_npu.utils._error_code")
    error_code.ErrCode = types.SimpleNamespace(VALUE=0, PARAM=0, SYSCALL=0)
    error_code.prof_error = lambda code: ""
    import importlib

    module = importlib.import_module("torch_npu.profiler.experimental_config")
    warnings: list[str] = []
    monkeypatch.setattr(module, "print_warn_msg", warnings.append)
    monkeypatch.setattr(module.CannPackageManager, "SUPPORT_DEFAULT_EXPORT_DB", False)
    return module, warnings


def test_torch_npu_keeps_every_configuration_npumagic_builds(real_config, tmp_path):
    module, warnings = real_config
    checked = 0
    for combo in _combinations():
        if _refusal(*combo[:4]):
            continue
        spec = npu_profile_spec(_build(*combo), tmp_path, "h")
        args = materialize(spec, _Recorder(module))
        config = args["experimental_config"]
        assert warnings == [], (combo, warnings)
        given = spec["experimental_config"]
        assert config._profiler_level == _value(module, given["profiler_level"])
        assert config._aic_metrics == _value(module, given["aic_metrics"])
        assert config._l2_cache is given["l2_cache"] and config._data_simplification is given["data_simplification"]
        assert sorted(config.export_type) == sorted(_value(module, e) for e in given["export_type"])
        assert sorted(config._host_sys) == sorted(_value(module, h) for h in given.get("host_sys", []))
        assert config.gc_detect_threshold == given.get("gc_detect_threshold")
        checked += 1
    assert checked > 3000


def test_what_npumagic_refuses_torch_npu_would_have_changed_silently(real_config):
    module, warnings = real_config
    config = module._ExperimentalConfig(profiler_level=module.ProfilerLevel.Level0,
                                        aic_metrics=module.AiCMetrics.PipeUtilization)
    assert config._aic_metrics == module.AiCMetrics.AiCoreNone  # reset, with only a printed warning
    assert any("level1 or level2" in w for w in warnings)
    with pytest.raises(ValueError, match="needs --level 1 or 2"):
        CaptureOptions(level=0, aic_metrics="PipeUtilization")


def _value(module, name: str):
    owner, member = name.split(".")
    return getattr(getattr(module, owner), member)


class _Recorder:
    """A torch_npu.profiler stand-in: the real enums and _ExperimentalConfig, recording schedule()
    and tensorboard_trace_handler() calls (they need the NPU runtime)."""

    def __init__(self, module) -> None:
        self._module = module
        self.ProfilerActivity = types.SimpleNamespace(CPU="CPU", NPU="NPU")

    def __getattr__(self, name):
        return getattr(self._module, name)

    @staticmethod
    def schedule(**kwargs):
        return ("schedule", kwargs)

    @staticmethod
    def tensorboard_trace_handler(**kwargs):
        return ("handler", kwargs)
