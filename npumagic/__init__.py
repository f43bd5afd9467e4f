"""npumagic: profile PyTorch training in a notebook cell, on Ascend NPUs, CUDA GPUs and CPU.

In IPython or Jupyter::

    %load_ext npumagic
    %config NpuMagics.output_dir = "runs"
    %%npuprofile --steps 3 --name baseline
    for x, y in loader:
        loss = loss_fn(model(x), y); loss.backward(); opt.step(); opt.zero_grad()

Offline, on an output directory collected elsewhere::

    import npumagic
    summary = npumagic.analyze("rank0_ascend_pt")
    npumagic.checklist(summary).bottleneck

To an experiment tracker (``%config NpuMagics.log_to = "mlflow"`` logs every run)::

    npumagic.log(r, "mlflow")  # r = %%npuprofile ...; or "wandb"
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import NpumagicError, TraceError

if TYPE_CHECKING:
    from .analysis import Summary, Trace, load, summarize
    from .analysis.advice import Advice, Finding, advise
    from .analysis.checklist import Verdict, checklist
    from .analysis.compare import Comparison, compare
    from .capture.steps import step
    from .raw_parse import parse_raw
    from .trackers import log

# The public API loads on first use (as render/ does), so `import npumagic` and the CLI's --help
# and argument errors answer without importing pandas, numpy, torch or matplotlib.
_WHERE = {"Summary": "analysis", "Trace": "analysis", "load": "analysis", "summarize": "analysis",
          "Advice": "analysis.advice", "Finding": "analysis.advice", "advise": "analysis.advice",
          "Verdict": "analysis.checklist", "checklist": "analysis.checklist",
          "Comparison": "analysis.compare", "compare": "analysis.compare", "step": "capture.steps",
          "parse_raw": "offline", "log": "trackers"}

__version__ = "0.1.0"
__all__ = ["Advice", "Comparison", "Finding", "NpumagicError", "Summary", "Trace", "TraceError", "Verdict", "advise",
           "analyze", "checklist", "compare", "load", "log", "load_ipython_extension", "parse_raw", "step", "summarize",
           "timeline", "unload_ipython_extension"]


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))


def analyze(path: str | Path) -> Summary:
    """The Summary of any supported profiler output, every rank read in full in this process:
    ``summarize(load(path))``, by the route the CLI and the magics take
    (:func:`npumagic.analysis.job.analyze`, which also reads many ranks on Dask or as an outline)."""
    from .analysis.job import analyze as analyze_job

    return analyze_job(path, scheduler="serial", every_rank=True)


def timeline(source, **options):
    """The timeline of a run report, Trace or profiler output path: a live widget (zoom and pan
    answered by this kernel) in Jupyter, the static figure elsewhere; see
    :func:`npumagic.render.live.frontend.timeline` for the options."""
    from .render.live.frontend import timeline as live_timeline

    return live_timeline(source, **options)


def load_ipython_extension(ipython) -> None:
    """``%load_ext npumagic``: register the magics (imported lazily, like line_profiler)."""
    from .magics import NpuMagics, assigned_cell_magic
    from .query_magic import NAME, query_magic

    magics = NpuMagics(ipython, config=ipython.config)
    ipython.register_magics(magics)
    ipython.register_magic_function(query_magic(magics), "line", NAME)
    if assigned_cell_magic not in ipython.input_transformers_cleanup:  # r = %%npuprofile ...
        ipython.input_transformers_cleanup.append(assigned_cell_magic)
    if magics not in ipython.configurables:
        ipython.configurables.append(magics)


def unload_ipython_extension(ipython) -> None:
    """``%unload_ext npumagic``: remove every magic and configurable this extension added."""
    manager = ipython.magics_manager
    ipython.input_transformers_cleanup[:] = [t for t in ipython.input_transformers_cleanup
                                             if getattr(t, "__module__", "") != "npumagic.magics"]
    manager.magics["line"].pop("npuquery", None)
    magics = manager.registry.pop("NpuMagics", None)
    if magics is None:
        return
    for kind, names in magics.magics.items():
        for name in names:
            manager.magics[kind].pop(name, None)
    if magics in ipython.configurables:
        ipython.configurables.remove(magics)
