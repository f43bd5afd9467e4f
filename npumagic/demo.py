"""``npumagic demo``: a small real training loop on the CPU, profiled through the magics inside a
real IPython shell — a baseline with a slow DataLoader, the fix, and the re-profile."""

from __future__ import annotations

import sys
from pathlib import Path

SETUP = '''
import time, torch
torch.manual_seed(0)
torch.set_num_threads(1)  # this small model gains nothing from more; on a busy machine they wait on each other

class SlowDataset(torch.utils.data.Dataset):
    """64 samples that take `delay` seconds each to 'decode', like an image pipeline."""
    def __init__(self, delay):
        self.delay = delay
        self.x, self.y = torch.randn(64, 256), torch.randn(64, 1)
    def __len__(self):
        return len(self.x)
    def __getitem__(self, i):
        time.sleep(self.delay)
        return self.x[i], self.y[i]

model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                            torch.nn.ReLU(), torch.nn.Linear(512, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)

def train(loader):
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
'''

CELLS = [
    ("Load the extension", "%load_ext npumagic\n%config NpuMagics.output_dir = {out!r}"),
    ("Set up a model and a DataLoader whose samples take 2 ms each to load", SETUP),
    ("Profile the baseline", "%%npuprofile --wait 1 --warmup 1 --steps 4 --name baseline --replace\n"
                             "train(torch.utils.data.DataLoader(SlowDataset(0.002), batch_size=8))"),
    ("Fix the bottleneck the verdict names (the data pipeline), profile again",
     "%%npuprofile --wait 1 --warmup 1 --steps 4 --name fixed --replace\n"
     "train(torch.utils.data.DataLoader(SlowDataset(0.0), batch_size=8))"),
    ("Did it help, beyond noise? What changed?", "%npucompare baseline fixed --no-plot"),
    ("What to try next", "%npuadvise"),
    ("The history", "%npunote fixed \"removed the 2 ms/sample decode\"\n%npuruns"),
]


def run_demo(output_dir: str | Path = "npumagic_demo") -> int:
    """Run the demo cells in a real InteractiveShell; returns a process exit status."""
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    import pandas as pd

    pd.set_option("display.width", 200)
    pd.set_option("display.max_columns", 20)
    out = str(Path(output_dir).resolve())
    config = Config()
    config.HistoryManager.enabled = False  # the demo's cells stay out of the user's own IPython history
    shell = InteractiveShell.instance(config=config, colors="NoColor")
    for title, code in CELLS:
        print(f"\n# {title}", flush=True)
        source = code.format(out=out) if "{out" in code else code
        if title != CELLS[1][0]:
            print("\n".join(f">>> {line}" for line in source.splitlines()), flush=True)
        result = shell.run_cell(source, store_history=True)
        if not result.success:
            print(f"demo cell failed: {result.error_in_exec or result.error_before_exec}", file=sys.stderr)
            return 1
    print(f"\nEverything above is stored in {out} (history.sqlite and one profiler directory per run).")
    return 0
