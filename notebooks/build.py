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


ASCEND_OFFLINE = [
    new_markdown_cell("# Analysing a torch_npu job offline\n\nA training job on an Ascend cluster wrote "
                      "`*_ascend_pt` directories (torch_npu's profiler output, one per rank). Copy them here and "
                      "analyse them like a local run. This notebook uses the genuine two-rank samples in "
                      "`../shared/data/ascend` (set `NPUMAGIC_SHARED` to point elsewhere)."),
    new_code_cell('import os\nfrom pathlib import Path\nimport npumagic\n\n'
                  'shared = Path(os.environ.get("NPUMAGIC_SHARED", "../../shared"))\n'
                  'job = shared / "data" / "ascend" / "level1"      # rank0_ascend_pt/ and rank1_ascend_pt/\n'
                  'assert job.exists(), f"no sample data at {job}"\n'
                  'sorted(p.name for p in job.iterdir())'),
    new_markdown_cell("## One call: the step breakdown, computed from the raw device and HCCL events"),
    new_code_cell("summary = npumagic.analyze(job)\nsummary"),
    new_markdown_cell("Both ranks side by side, and the slowest one:"),
    new_code_cell("summary.ranks"),
    new_markdown_cell("## The checklist verdict and the ranked advice"),
    new_code_cell("npumagic.checklist(summary)"),
    new_code_cell("npumagic.advise(summary)"),
    new_markdown_cell("## Into the history, with the magics\n`%npuload` imports the directory as a run, so "
                      "`%npushow`, `%npucompare` and `%npuexport` work on it."),
    new_code_cell("%load_ext npumagic\n%config NpuMagics.output_dir = 'npumagic_runs'\n"
                  "%npuload {job}/rank0_ascend_pt --name rank0 --no-plot"),
    new_code_cell("%npuload {job}/rank1_ascend_pt --name rank1 --no-plot"),
    new_code_cell("%npushow rank0 --timeline --kernels"),
    new_markdown_cell("## Rank 0 against rank 1, kernel by kernel"),
    new_code_cell("%npucompare rank0 rank1 --no-plot"),
    new_code_cell("%npushow rank0 --comm"),
]

REFERENCE = [
    new_markdown_cell("# Magics reference\n\nEvery magic and option, each with a live example on a small CPU model. "
                      "`%%npuprofile?` and `%npusteps?` print the full option lists."),
    new_code_cell("%load_ext npumagic\n%config NpuMagics.output_dir = 'npumagic_runs'\n%config NpuMagics"),
    new_code_cell("import torch, npumagic\ntorch.manual_seed(0)\n"
                  "model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1))\n"
                  "opt = torch.optim.SGD(model.parameters(), lr=0.01)\n"
                  "def train_step():\n    x, y = torch.randn(32, 64), torch.randn(32, 1)\n"
                  "    torch.nn.functional.mse_loss(model(x), y).backward()\n    opt.step(); opt.zero_grad()"),
    new_markdown_cell("## `%%npuprofile`: the schedule\n`--wait`, `--warmup`, `--steps` (active), `--repeat`, "
                      "`--skip-first` are torch.profiler's `schedule()`; each `optimizer.step()` ends a step."),
    new_code_cell("%%npuprofile --skip-first 1 --wait 1 --warmup 1 --steps 3 --name schedule --no-plot\n"
                  "for _ in range(10):\n    train_step()"),
    new_markdown_cell("`--repeat 2` records two cycles; `--memory --shapes --stack` add allocations, input shapes "
                      "and Python stacks (for the source line of syncs)."),
    new_code_cell("%%npuprofile --wait 0 --warmup 1 --steps 2 --repeat 2 --memory --shapes --stack --name detailed --quiet\n"
                  "for _ in range(8):\n    train_step()\n    loss_value = float(model(torch.randn(1, 64)))"),
    new_markdown_cell("Explicit step boundaries with `npumagic.step()` (gradient accumulation: two micro-batches "
                      "per step), and `--repeat-cell` for a cell without a loop:"),
    new_code_cell("%%npuprofile --wait 0 --warmup 1 --steps 2 --name explicit --no-plot\n"
                  "for _ in range(4):\n    model(torch.randn(32, 64)).sum().backward()\n"
                  "    model(torch.randn(32, 64)).sum().backward()\n    opt.step(); opt.zero_grad()\n    npumagic.step()"),
    new_code_cell("%%npuprofile --repeat-cell --wait 0 --warmup 1 --steps 3 --name repeated --no-plot\ntrain_step()"),
    new_markdown_cell("`--activities`, `--level`, `--aic-metrics` select what is recorded; the NPU settings are "
                      "noted and ignored on CPU and CUDA. `--out DIR` puts the profiler output elsewhere."),
    new_code_cell("%%npuprofile --repeat-cell --steps 1 --activities cpu --level 1 --aic-metrics PipeUtilization "
                  "--out elsewhere --name options --no-plot\ntrain_step()"),
    new_markdown_cell("A failing cell stops the profiler, is recorded as failed with what was captured, and still "
                      "fails (this cell is expected to raise):"),
    new_code_cell("%%npuprofile --wait 0 --warmup 0 --steps 5 --name broken --no-plot\nfor i in range(10):\n"
                  "    train_step()\n    if i == 2:\n        raise RuntimeError('diverged at step 2')",
                  metadata={"tags": ["raises-exception"]}),
    new_markdown_cell("## `%npusteps`: the line form"),
    new_code_cell("%npusteps --wait 0 --warmup 1 --steps 4 --name line --no-plot train_step()"),
    new_code_cell("%npusteps --run schedule"),
    new_markdown_cell("## History: `%npuruns`, `%npunote`, `%npubaseline`, `%npurm`"),
    new_code_cell('%npunote line "batch 32, CPU"\n%npubaseline schedule\n%npurm options\n%npuruns'),
    new_markdown_cell("## `%npushow`: any view of any run"),
    new_code_cell("%npushow detailed --steps --kernels --memory"),
    new_code_cell("%npushow detailed --timeline --step-range 1:1 --lanes Thread"),
    new_markdown_cell("## `%npuadvise`, `%npucompare`, `%npuhistory`, `%npuexport`"),
    new_code_cell("%npuadvise line --all"),
    new_code_cell("%npucompare schedule line"),
    new_code_cell("%npuhistory aten::addmm"),
    new_code_cell("%npuexport --md troubleshooting.md --csv troubleshooting.csv\n"
                  "print(open('troubleshooting.md').read()[:600])"),
]


def write(name: str, cells: list) -> Path:
    nb = new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                            "language": "python"}})
    path = HERE / name
    nbformat.write(nb, path)
    return path


if __name__ == "__main__":
    for name, cells in (("quickstart.ipynb", QUICKSTART), ("ascend_offline.ipynb", ASCEND_OFFLINE),
                        ("magics_reference.ipynb", REFERENCE)):
        print(write(name, cells))
