"""Real CPU training runs recorded with profile_memory=True, one process each (the CPU allocator's
totals count from the process's first profiled allocation, so runs to compare or fit must not
share one): the memory tests' shared fixture code."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = """
import sys, torch
from torch.profiler import ProfilerActivity, profile, schedule
batch, out = int(sys.argv[1]), sys.argv[2]
torch.manual_seed(0)
torch.set_num_threads(1)
model = {model}
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(batch, {features}), torch.randn(batch, 1)
with profile(activities=[ProfilerActivity.CPU], profile_memory=True, schedule=schedule(wait=1, warmup=1, active=4),
             on_trace_ready=lambda p: p.export_chrome_trace(out)) as prof:
    for _ in range(6):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad(); loss.backward(); opt.step(); prof.step()
"""


def record_batches(folder: Path, model: str, features: int, batches: dict[str, int]) -> dict[str, Path]:
    """Each named run of ``batches`` (name -> batch size): ``model`` (a Python expression of
    ``features`` inputs and one output) trained 6 steps, 4 of them recorded, its trace's path."""
    script = SCRIPT.format(model=model, features=features)
    made = {}
    for name, batch in batches.items():
        made[name] = folder / f"{name}.json"
        subprocess.run([sys.executable, "-c", script, str(batch), str(made[name])], check=True, capture_output=True)
    return made
