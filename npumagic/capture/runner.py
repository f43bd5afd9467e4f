"""Run a piece of user code under the scheduled profiler and report what was captured.

The profiler is always stopped (in ``finally``), the step hook always removed, and the user's
exception is handed back in :class:`CaptureResult` for the caller to record and re-raise."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from . import host as _host
from . import steps as _steps
from .backends import Backend
from .dataloaders import recording
from .neighbours import other_device_processes
from .options import CaptureOptions


class NestedCaptureError(RuntimeError):
    """A capture was started while another one is running in the same kernel."""


def ensure_idle() -> None:
    """Raise NestedCaptureError when a capture is already running in this kernel, or the user's
    own torch.profiler (or torch_npu profiler) session is active: starting another would
    silently end theirs and lose what it recorded."""
    if _steps.active() is not None:
        raise NestedCaptureError("npumagic is already profiling this kernel: %%npuprofile/%npusteps cannot be nested")
    torch = sys.modules.get("torch")  # not imported: no profiler can be running
    if torch is not None and _profiler_enabled(torch):
        raise NestedCaptureError("a torch.profiler session is already active in this kernel (a `with "
                                 "torch.profiler.profile(...)` block or prof.start()); leave it first: profiling "
                                 "inside it would end it and lose what it recorded")


def _profiler_enabled(torch) -> bool:
    try:
        return bool(torch._C._autograd._profiler_enabled())  # any Kineto/legacy session, torch_npu's too
    except (AttributeError, RuntimeError):
        return bool(getattr(getattr(torch.autograd, "profiler", None), "_is_profiler_enabled", False))


@dataclass
class CaptureResult:
    """What a capture did: its status, the step boundaries seen, the active steps recorded,
    the run directory, the user's exception (to re-raise) and notes for the user."""

    status: str  # "ok", "failed", "interrupted", "no-steps", "no-trace"
    steps: int  # step boundaries seen
    recorded: int  # active steps the schedule got through
    seconds: float
    run_dir: Path
    error: BaseException | None = None
    messages: list[str] = field(default_factory=list)
    dataloaders: list[dict] = field(default_factory=list)  # settings of each DataLoader iterated
    host_samples: Path | None = None  # npumagic_host.csv: the host's CPU while the profiler recorded
    step_times: dict[str, list[float]] = field(default_factory=dict)  # us of profiled and unprofiled steps
    device_neighbours: list[dict] = field(default_factory=list)  # other processes on the accelerator at the start

    @property
    def trace_files(self) -> list[Path]:
        if not self.run_dir.exists():
            return []
        return sorted(p for p in self.run_dir.rglob("*") if p.name.endswith((".pt.trace.json", ".pt.trace.json.gz"))
                      or p.name == "trace_view.json"
                      or (p.name.startswith("ascend_pytorch_profiler") and p.suffix == ".db"))


def recorded(options: CaptureOptions, steps: int) -> int:
    """Active steps completed after ``steps`` boundaries under the schedule."""
    n = steps - options.skip_first
    if n <= 0:
        return 0
    full, rest = divmod(n, options.cycle)
    if full >= options.repeat:
        return options.recorded_steps
    return full * options.steps + max(0, rest - options.wait - options.warmup)


def _no_trace_cause(backend: Backend, run_dir: Path) -> str:
    if backend.name == "npu":
        # torch_npu's profile/stop/handler are wrapped in @no_exception_func: failures are only printed
        return ("torch_npu reports profiler failures only as printed '[WARNING] ... profiler.py' or '[ERROR]' lines "
                "(see the output above and $ASCEND_PROCESS_LOG_PATH): most often CANN's environment is not set "
                f"(source set_env.sh before Python starts), the disk is full, or {run_dir} is not writable")
    return f"the profiler's trace handler failed: check the free disk space and that {run_dir} is writable"


def _write_host(sampler: "_host.HostSampler | None", run_dir: Path) -> Path | None:
    if sampler is None:
        return None
    try:
        return sampler.write(run_dir)
    except OSError:
        return None


def capture(body: Callable[[], object], options: CaptureOptions, backend: Backend, run_dir: Path,
            source: str = "") -> CaptureResult:
    """Run ``body`` under ``backend``'s profiler with ``options``' schedule, writing ``run_dir``.

    Without ``repeat_cell`` the body runs once and steps end at ``npumagic.step()`` or each
    ``optimizer.step()``; with it the body runs once per step. Raises NestedCaptureError when
    a capture is already running; never raises the body's exception (see ``.error``).
    """
    __tracebackhide__ = True  # noqa: F841 - IPython leaves this frame out of the user's traceback
    ensure_idle()
    run_dir.mkdir(parents=True, exist_ok=True)
    neighbours = other_device_processes(backend.name)
    profiler = backend.profiler(options, run_dir)
    clock = _steps.StepClock(profiler, options, explicit=bool(_steps.EXPLICIT_STEP.search(source)))
    sampler = _host.HostSampler() if options.host and _host.available() else None
    if sampler is not None:
        clock.on_action = sampler.follow
    token = _steps.activate(clock)
    remove_hook = None
    status, error = "ok", None
    started = time.perf_counter()
    loaders: list[dict] = []
    messages: list[str] = []
    try:
        with recording() as loaders:
            clock.begin()
            if options.repeat_cell:
                for _ in range(options.total_steps):
                    body()
                    clock.advance()
            else:
                remove_hook = _steps.optimizer_hook(clock)
                body()
    except KeyboardInterrupt as exc:
        status, error = "interrupted", exc
    except BaseException as exc:  # noqa: BLE001 - handed back to the caller, who re-raises it
        status, error = "failed", exc
    finally:
        if remove_hook is not None:
            remove_hook()
        _steps.deactivate(token)
        try:
            clock.stop()  # the profiler exports its trace here: a second Ctrl-C may land in it
        except BaseException as exc:  # noqa: BLE001 - a profiler that fails to stop must not hide the user's error
            if error is None:
                status, error = ("interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"), exc
            messages.append(f"the profiler did not finish writing its trace ({type(exc).__name__}: {exc}); "
                            "what it wrote is kept")
        finally:
            if sampler is not None:
                sampler.stop()
    seconds = time.perf_counter() - started
    result = CaptureResult(status, clock.steps, recorded(options, clock.steps), seconds, run_dir, error,
                           messages=messages, dataloaders=list(loaders), host_samples=_write_host(sampler, run_dir),
                           step_times=clock.step_times(), device_neighbours=neighbours)
    if status == "ok" and clock.steps == 0:
        result.status = "no-steps"
        result.messages.append("no step boundary seen: the cell called neither optimizer.step() nor npumagic.step(); "
                               "add npumagic.step() at the end of each iteration, or use --repeat-cell to run the "
                               "cell once per step")
    elif status == "ok" and result.recorded == 0:
        result.status = "no-steps"
        result.messages.append(f"the cell ended after {_plural(clock.steps, 'step')}, before the first active step "
                               f"(skip-first {options.skip_first} + wait {options.wait} + warmup {options.warmup}): "
                               "nothing was recorded; for a cell without a loop use --repeat-cell, else lower "
                               "--skip-first/--wait/--warmup or run more iterations")
    elif status == "ok" and result.recorded and not result.trace_files:
        result.status = "no-trace"
        result.messages.append(f"no trace was written to {run_dir}: {_no_trace_cause(backend, run_dir)}")
    elif result.recorded < options.recorded_steps:
        result.messages.append(f"the cell ended after {_plural(clock.steps, 'step')}; the schedule needs {options.total_steps} "
                               f"(skip-first {options.skip_first} + {options.repeat} x (wait {options.wait} + warmup "
                               f"{options.warmup} + steps {options.steps})): {result.recorded} of "
                               f"{options.recorded_steps} active steps recorded")
    return result


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"
