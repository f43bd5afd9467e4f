"""The accelerator path end to end, on whatever device this machine has (CUDA, else the CPU).

Run on a machine with a GPU, it is the check that npumagic works there for real, since the suite's
machines have none:

1. ``%%npuprofile`` of a real training loop that calls ``.item()`` each step and copies each batch
   from pageable host memory, in a real IPython shell: the backend, the device, the step table,
   the verdict and the findings, and whether the sync and the pageable copy were seen;
2. the same loop fixed (pinned memory, ``non_blocking``, no ``.item()``), and ``%npucompare``;
3. the live timeline's level-of-detail index over the first run's trace, and one answer of it;
4. ``%npuab`` of the two steps, timed with the device synchronised, by the device's events or the
   wall clock, whichever spread less over the warm-up;
5. ``npumagic run`` of a torchrun job: two processes with NCCL where two GPUs are there, else one
   (gloo on the CPU).

It prints what it found and a last line ``device check: N passed, M failed``; the exit status is
the number of failed checks (capped at 100). On the CPU the same script runs the CPU path, which
``tests/test_device_check.py`` does. Usage::

    python bench/device_check.py [--out DIR] [--keep]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SETUP = '''
import torch
torch.manual_seed(0)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
width = 1024 if device.type == "cuda" else 128  # the CPU path checks the same code, sooner
model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.GELU())
                              for _ in range(6)], torch.nn.Linear(width, 1)).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
rows = 2048 if device.type == "cuda" else 256  # a batch whose copy from pageable memory shows
host_x = torch.randn(16, rows, width)         # pageable host memory
host_y = torch.randn(16, rows, 1)
pinned_x, pinned_y = (host_x.pin_memory(), host_y.pin_memory()) if device.type == "cuda" else (host_x, host_y)

def step_slow(i=0):
    x = host_x[i % 16].to(device)              # a pageable copy, synchronous
    y = host_y[i % 16].to(device)
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward(); opt.step(); opt.zero_grad()
    return loss.item()                        # a sync each step

def step_fast(i=0):
    x = pinned_x[i % 16].to(device, non_blocking=True)
    y = pinned_y[i % 16].to(device, non_blocking=True)
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
    return loss.detach()
'''

TRAIN_SCRIPT = '''
import os, torch, torch.distributed as dist
backend = "nccl" if torch.cuda.is_available() else "gloo"
dist.init_process_group(backend)
rank = dist.get_rank()
device = torch.device(f"cuda:{rank}") if backend == "nccl" else torch.device("cpu")
if backend == "nccl":
    torch.cuda.set_device(device)
model = torch.nn.parallel.DistributedDataParallel(
    torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 512)).to(device))
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
for i in range(12):
    x = torch.randn(128, 512, device=device)
    loss = model(x).square().mean()
    loss.backward(); opt.step(); opt.zero_grad()
dist.destroy_process_group()
'''


class Checks:
    """Named pass/fail lines, printed as they come."""

    def __init__(self) -> None:
        self.passed = self.failed = 0

    def __call__(self, ok: bool, what: str, found: object = "") -> bool:
        self.passed += bool(ok)
        self.failed += not ok
        print(f"  [{'ok' if ok else 'FAIL'}] {what}" + (f": {found}" if found != "" else ""), flush=True)
        return ok


def section(title: str) -> None:
    print(f"\n## {title}", flush=True)


def capture_in_a_shell(out: Path, check: Checks) -> tuple[object, object]:
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    config = Config()
    config.HistoryManager.enabled = False
    shell = InteractiveShell.instance(config=config, colors="NoColor")

    def cell(source: str):
        result = shell.run_cell(source)
        if not result.success:
            raise RuntimeError(f"cell failed: {result.error_in_exec or result.error_before_exec}\n{source}")
        return result.result

    cell(f"%load_ext npumagic\n%config NpuMagics.output_dir = {str(out)!r}")
    cell(SETUP)
    device = shell.user_ns["device"]
    section(f"1. %%npuprofile of a loop with .item() and a pageable copy, on {device}")
    start = time.perf_counter()
    slow = cell("%%npuprofile --wait 1 --warmup 1 --steps 4 --name slow --no-plot --replace\n"
                "for i in range(8):\n    step_slow(i)")
    print(f"  (captured and analysed in {time.perf_counter() - start:.1f} s; the report is shown above)")
    summary = slow.summary
    backend = summary.meta.get("backend")
    expected = "cuda" if device.type == "cuda" else "cpu"
    check(backend == expected, "backend", backend)
    print(f"  device in the trace: {summary.meta.get('device_name') or summary.meta.get('device')}")
    check(len(summary.steps) == 4, "steps found", len(summary.steps))
    check(len(summary.kernels) > 0, "kernels (or CPU operators) listed", len(summary.kernels))
    walls = summary.steps["wall_us"]
    check(bool((summary.steps["computing_us"] <= summary.steps["busy_us"] + 1e-6).all()
               and (summary.steps["busy_us"] <= walls + 1e-6).all()), "computing <= busy <= wall per step")
    advice = cell("%npuadvise slow")
    categories = [f.category for f in advice.findings] if hasattr(advice, "findings") else []
    if device.type == "cuda":
        syncs = summary.syncs
        check(len(syncs) > 0, "the .item() syncs seen", syncs.head(3).to_dict("records"))
        memcpy = summary.steps["memcpy_us"].sum()
        check(memcpy > 0, "host-to-device copies seen (memcpy_us)", f"{memcpy / 1000:.2f} ms over the steps")
    check(bool(categories), "findings", ", ".join(map(str, categories[:6])))

    section("2. the fixed loop (pinned, non_blocking, no .item()), and %npucompare")
    fast = cell("%%npuprofile --wait 1 --warmup 1 --steps 4 --name fast --no-plot --replace\n"
                "for i in range(8):\n    step_fast(i)")
    print(textwrap.indent(str(fast.summary.steps[["step", "wall_us", "busy_us", "sync_us", "memcpy_us"]]
                              .round(1).to_string(index=False)), "    "))
    comparison = cell("%npucompare slow fast --no-plot")
    check(comparison is not None and hasattr(comparison, "speedup"), "comparison",
          f"speedup {getattr(comparison, 'speedup', float('nan')):.2f}x, significant {getattr(comparison, 'significant', None)}")
    return shell, slow


def live_index(slow, check: Checks) -> None:
    section("3. the live timeline's index over the first run")
    import npumagic
    from npumagic.render.live.lod import TimelineIndex

    trace = npumagic.load(slow.run.run_dir)
    start = time.perf_counter()
    index = TimelineIndex.build(trace)
    built = time.perf_counter() - start
    layout = index.layout()
    lanes = layout.get("lanes", [])
    start = time.perf_counter()
    t0, t1 = layout["extent"]
    answer = index.query(t0, t1, 1200)
    answered = time.perf_counter() - start
    print(f"  {len(trace.events):,} events, {len(lanes)} lanes; index built in {built * 1000:.0f} ms, "
          f"first view answered in {answered * 1000:.1f} ms")
    check(len(lanes) > 0, "lanes", ", ".join(str(lane.get("name", lane)) for lane in lanes[:8]))
    check(bool(answer), "a view answered", f"keys {sorted(answer)[:6]}")


def ab_test(shell, check: Checks) -> None:
    section("4. %npuab step_slow step_fast (device synchronised around each call; device or wall time, the steadier)")
    result = shell.run_cell("r = %npuab step_slow step_fast --max-steps 120")
    if not result.success:
        check(False, "%npuab ran", result.error_in_exec)
        return
    r = shell.user_ns["r"]
    print(textwrap.indent(str(r), "    "))
    check(r.steps > 0, "steps spent", r.steps)
    said = f"speedup {r.speedup:.2f}x (95% CI {r.ci[0]:.2f}-{r.ci[1]:.2f})"
    spreads = "" if r.spreads is None else f" (warm-up spread: wall {r.spreads[0]:.1%}, device {r.spreads[1]:.1%})"
    if shell.user_ns["device"].type == "cuda":  # on the CPU the two steps differ by little: no call is expected
        check(r.decided, "decided", said)
        check(r.spreads is not None, "both clocks timed over the warm-up", f"{r.clock} time chosen{spreads}")
    else:
        print(f"  decided {r.decided}: {said}")
        check(r.clock == "wall" and r.spreads is None, "wall time on the CPU", r.clock)


def torchrun_job(out: Path, check: Checks) -> None:
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    procs = 2 if gpus >= 2 else 1
    section(f"5. npumagic run of a {procs}-process torchrun job ({'NCCL' if gpus else 'gloo'})")
    script = out / "train_ddp.py"
    script.write_text(TRAIN_SCRIPT)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    command = [sys.executable, "-m", "npumagic.cli", "run", "--wait", "1", "--warmup", "1", "--steps", "3",
               "--name", "ddp", "--out", str(out / "script_runs"), "--",
               sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(procs),
               str(script)]
    start = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=out, capture_output=True, text=True, timeout=480)
    print(f"  (took {time.perf_counter() - start:.1f} s, exit {done.returncode})")
    print(textwrap.indent(done.stdout[-6000:], "    "))
    if done.returncode != 0:
        print(textwrap.indent(done.stderr[-4000:], "    ! "))
    check(done.returncode == 0, "the job and its capture exit 0", done.returncode)
    runs = subprocess.run([sys.executable, "-m", "npumagic.cli", "runs", str(out / "script_runs"), "--json"],
                          env=env, capture_output=True, text=True, timeout=120)
    import json

    try:
        rows = json.loads(runs.stdout)
    except ValueError:
        rows = None
    found = rows.get("runs", rows) if isinstance(rows, dict) else rows
    check(bool(found), "the job recorded in the history", (found or [{}])[0].get("status", runs.stderr[-300:]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="where the runs go (default: a temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    parser.add_argument("--skip", action="append", default=[], choices=["ab", "torchrun"],
                        help="leave a part out (the tests do, for time)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    out = Path(args.out or tempfile.mkdtemp(prefix="npumagic_device_check_"))
    out.mkdir(parents=True, exist_ok=True)
    import torch

    import npumagic

    print(f"npumagic device check: python {sys.version.split()[0]}, torch {torch.__version__}, "
          f"npumagic from {Path(npumagic.__file__).parent}")
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        print(f"CUDA {torch.version.cuda}: {torch.cuda.device_count()} x {props.name}, "
              f"{props.total_memory / 2**30:.0f} GiB, {props.multi_processor_count} SMs")
    else:
        print("no CUDA device: the CPU path")
    check = Checks()
    try:
        shell, slow = capture_in_a_shell(out, check)
        live_index(slow, check)
        if "ab" not in args.skip:
            ab_test(shell, check)
    except Exception as exc:  # noqa: BLE001 - a check script reports and goes on to the next part
        import traceback

        traceback.print_exc()
        check(False, "the notebook path", f"{type(exc).__name__}: {exc}")
    if "torchrun" not in args.skip:
        try:
            torchrun_job(out, check)
        except Exception as exc:  # noqa: BLE001
            import traceback

            traceback.print_exc()
            check(False, "the torchrun path", f"{type(exc).__name__}: {exc}")
    print(f"\ndevice check: {check.passed} passed, {check.failed} failed (runs in {out})")
    if not args.out and not args.keep:
        shutil.rmtree(out, ignore_errors=True)
    return min(check.failed, 100)


if __name__ == "__main__":
    sys.exit(main())
