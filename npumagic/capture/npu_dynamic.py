"""torch_npu's own non-intrusive capture: the ``profiler_config.json`` its dynamic profiler reads
(torch_npu 2.14.0: ``PROF_CONFIG_PATH=DIR`` before ``import torch_npu`` arms
``_NonIntrusiveProfile``, which steps ``dynamic_profile`` at every ``optimizer.step()``; a
monitor process watches ``DIR/profiler_config.json`` and each change to it starts one window).

Only the config is built here, from the same :class:`CaptureOptions` as every capture; its keys
and values are those torch_npu's ``ConfigContext`` parses (checked against the wheel's own
parser in the tests). ``npumagic run`` does not hand it to torch_npu yet: on an NPU it arms its
own step hook around ``torch_npu.profiler.profile``, the profiler ``%%npuprofile`` uses."""

from __future__ import annotations

import json
from pathlib import Path

from .options import CaptureOptions

CONFIG_FILE = "profiler_config.json"
INSTANT = -1  # ConfigContext.INSTANT_START_STEP: start at the next step


def profiler_config(options: CaptureOptions, prof_dir: str | Path, start_step: int | None = None) -> dict:
    """The dynamic profiler's config for one window of ``options`` written into ``prof_dir``.

    ``start_step``: the step (counted from 1 at the first ``optimizer.step()``, as
    dynamic_profile counts) after which warm-up begins; default the schedule's
    ``1 + skip_first + wait``, :data:`INSTANT` for on demand. ``analyse`` is on: npumagic reads
    the parsed ``ASCEND_PROFILER_OUTPUT``, not CANN's raw data. Raises ValueError for
    ``repeat > 1`` (dynamic_profile records one window per config change).
    """
    if options.repeat != 1:
        raise ValueError(f"--repeat {options.repeat}: torch_npu's dynamic profiler records one window per config "
                         "change; trigger it again instead")
    activities = options.activities or ("cpu", "npu")
    return {
        "activities": [a.upper() for a in activities if a in ("cpu", "npu")],
        "prof_dir": str(prof_dir),
        "analyse": True,
        "async_mode": False,
        "record_shapes": options.shapes,
        "profile_memory": options.memory,
        "with_stack": options.stack,
        "with_flops": False,
        "with_modules": options.modules,
        "active": options.steps,
        "warmup": options.warmup,
        "start_step": 1 + options.skip_first + options.wait if start_step is None else start_step,
        "is_rank": False,
        "rank_list": [],
        "experimental_config": {
            "profiler_level": f"Level{options.level}",
            "aic_metrics": options.aic_metrics or "AiCoreNone",
            "l2_cache": options.l2_cache,
            "op_attr": False,
            "gc_detect_threshold": options.gc_threshold_ms,
            "data_simplification": not options.keep_raw,
            "record_op_args": False,
            "export_type": list(options.export),
            "msprof_tx": False,
            "host_sys": list(options.host_sys or ()),
        },
        "metadata": {},
        "is_valid": True,
    }


def write_config(folder: str | Path, config: dict) -> Path:
    """Write ``config`` as ``folder/profiler_config.json`` (the folder ``PROF_CONFIG_PATH`` names)."""
    path = Path(folder) / CONFIG_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    from ..safeio import write_atomic

    write_atomic(path, json.dumps(config, indent=2))
    return path
