"""Write the example notebooks from their cell sources (outputs are left out of the repository:
the test suite executes every notebook in a real Jupyter kernel)."""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).parent

QUICKSTART = [
    new_markdown_cell("# npumagic quick start\n\nProfile a CPU training cell, read the verdict, fix the bottleneck "
                      "it names, profile again and compare. The same magics work on Ascend NPUs (torch_npu) and "
                      "CUDA GPUs."),
    new_code_cell("%load_ext npumagic\n%config NpuMagics.output_dir = 'npumagic_runs'"),
    new_markdown_cell("A small model and a DataLoader whose samples take 3 ms each to load (like JPEG decoding):"),
    new_code_cell('''import time, torch
torch.manual_seed(0)

class SlowDataset(torch.utils.data.Dataset):
    def __init__(self, delay):
        self.delay, self.x, self.y = delay, torch.randn(96, 256), torch.randn(96, 1)
    def __len__(self):
        return len(self.x)
    def __getitem__(self, i):
        time.sleep(self.delay)
        return self.x[i], self.y[i]

model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)

def train(loader):
    for x, y in loader:
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        opt.zero_grad()'''),
    new_markdown_cell("## 1. Baseline\nEvery `optimizer.step()` ends a step; the first run becomes the baseline."),
    new_code_cell("%%npuprofile --wait 1 --warmup 1 --steps 4 --name baseline\n"
                  "train(torch.utils.data.DataLoader(SlowDataset(0.003), batch_size=8))"),
    new_code_cell("baseline = _\nbaseline.verdict.bottleneck, round(baseline.summary.headline['dataloader_share'], 2)"),
    new_markdown_cell("## 2. Change one thing\nThe verdict points at the DataLoader. Here the fix is a faster "
                      "pipeline (in real code: `num_workers`, `pin_memory`, moving decoding into the workers)."),
    new_code_cell("%%npuprofile --wait 1 --warmup 1 --steps 4 --name fixed\n"
                  "train(torch.utils.data.DataLoader(SlowDataset(0.0), batch_size=8))"),
    new_code_cell("fixed = _\nspeedup = baseline.summary.step_stats['median_us'] / fixed.summary.step_stats['median_us']\n"
                  "print(f'median step {speedup:.1f}x faster')"),
    new_markdown_cell("## 3. The history\nEvery run is kept in `npumagic_runs/history.sqlite`, across kernel restarts."),
    new_code_cell("%npuruns"),
    new_code_cell("%npusteps --run baseline"),
]


def write(name: str, cells: list) -> Path:
    nb = new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                            "language": "python"}})
    path = HERE / name
    nbformat.write(nb, path)
    return path


if __name__ == "__main__":
    print(write("quickstart.ipynb", QUICKSTART))
