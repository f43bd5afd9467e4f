"""Predicted against achieved: five CPU programs with a known injected cause, each captured as a
user captures it, its top finding's fix applied, captured again, and verified as a user verifies
it. Prints each finding's predicted saving per step (with its interval) beside the saving the fix
achieved (median step before - after).

    python bench/predict.py            # all five
    python bench/predict.py item gloo  # some of them

The four single-process programs run in a real IPython shell with ``%load_ext npumagic``: each
``%%npuprofile`` cell is a training loop (steps end at ``optimizer.step()``), so npumagic's host
sampler runs and the DataLoader fixes name a worker count fitted to the cores; ``%npucompare
before after --fix RULE`` verifies the top finding. The gloo job runs under ``npumagic run --
torchrun --nproc_per_node 2`` (each rank sampled), verified the same way on the run history.

A benchmark, not a test: run it on a quiet machine (its timings are the point). The causes: a
DataLoader whose Dataset sleeps, a .item() each step, a Python loop of small operators, a 2-rank
gloo job with one late rank, and more DataLoader workers than the cores can run.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

STEPS = 10  # recorded steps per run (after 1 waited and 1 warm-up step)

SETUP = """
import time, torch
torch.manual_seed(0)
torch.set_num_threads(1)

class Samples(torch.utils.data.Dataset):
    '''Samples that take ``sleep`` seconds of waiting and ``work`` matmuls of CPU each.'''
    def __init__(self, sleep=0.0, work=0):
        self.sleep, self.work = sleep, work
    def __len__(self):
        return 1 << 16
    def __getitem__(self, i):
        if self.sleep:
            time.sleep(self.sleep)
        x = torch.randn(64, 64)
        for _ in range(self.work):
            x = torch.tanh(x @ x)
        return x[0]

def loading(steps, workers=0, sleep=0.0, work=0):
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = torch.utils.data.DataLoader(Samples(sleep, work), batch_size=4, num_workers=workers,
                                         persistent_workers=bool(workers))
    for i, x in enumerate(loader):
        model(x).sum().backward(); opt.step(); opt.zero_grad()
        if i + 1 == steps:
            break

def items(steps, calls=300):
    model = torch.nn.Linear(256, 256)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(64, 256)
    for _ in range(steps):
        loss = model(x).square().mean()
        loss.backward()
        for _ in range(calls):
            loss.item()
        opt.step(); opt.zero_grad()

def small_ops(steps, vectorised=False):
    w = torch.nn.Parameter(torch.randn(32))
    opt = torch.optim.SGD([w], lr=0.0)
    for _ in range(steps):
        with torch.no_grad():
            y = w.detach()
            if vectorised:  # the same arithmetic in one pass
                y = y * 1.0001 ** 400 + 0.0001 * sum(1.0001 ** k for k in range(400))
            else:
                for _ in range(400):
                    y = y * 1.0001 + 0.0001
        (w * y).sum().backward(); opt.step(); opt.zero_grad()
"""

GLOO = """
import sys, time, torch, torch.distributed as dist
late_ms = float(sys.argv[1])
torch.set_num_threads(1)
dist.init_process_group("gloo")
rank = dist.get_rank()
model = torch.nn.Linear(256, 256)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(32, 256)
for _ in range(STEPS):
    model(x).sum().backward()
    if rank == 1 and late_ms:
        time.sleep(late_ms / 1000)
    for p in model.parameters():
        dist.all_reduce(p.grad)
    opt.step(); opt.zero_grad()
dist.destroy_process_group()
"""


def workers_in(fix: str) -> int | None:
    """The worker count a fix tells the DataLoader to use ('DataLoader(num_workers=4,', 'DataLoader(num_workers=8
    -> 1,'), else None (a count it names as the present one, '(num_workers=0)', is not one)."""
    found = re.search(r"DataLoader\(num_workers=(?:\d+ -> )?(\d+)[,)]", fix)
    return int(found.group(1)) if found else None


# each case: the baseline cell's call, and the fixed call from the top finding's fix (what it applies, said)
def dataloader(fix: str | None) -> tuple[str, str]:
    if fix is None:
        return "loading({n}, sleep=0.002)", ""
    n = workers_in(fix)
    if n:
        return f"loading({{n}}, workers={n}, sleep=0.002)", f"num_workers={n}"
    return "loading({n})", "cheaper samples (no sleep): the fix names no worker count"


def too_many_workers(fix: str | None) -> tuple[str, str]:
    many = 4 * (os.cpu_count() or 2)
    if fix is None:
        return f"loading({{n}}, workers={many}, work=3)", ""
    n = workers_in(fix)
    if n is not None:
        return f"loading({{n}}, workers={n}, work=3)", f"num_workers={n}"
    if "cheaper" in fix:
        return f"loading({{n}}, workers={many})", "cheaper samples (no matmuls), the workers kept"
    return f"loading({{n}}, workers={many}, work=3)", "nothing: its fix names no change to the DataLoader"


def item(fix: str | None) -> tuple[str, str]:
    return ("items({n})", "") if fix is None else ("items({n}, calls=0)", "no .item() in the step")


def small_ops(fix: str | None) -> tuple[str, str]:
    return ("small_ops({n})", "") if fix is None else \
        ("small_ops({n}, vectorised=True)", "the loop's 400 operators as one vectorised expression")


CASES = {"dataloader": dataloader, "item": item, "small_ops": small_ops, "gloo": None,
         "too_many_workers": too_many_workers}


def _top(verdict):
    """The checklist's Next change finding (the lead's), else None."""
    return verdict.advice.lead.finding if verdict is not None and verdict.advice.lead is not None else None


def _report(name: str, top, findings: list, checked, after_steps: dict | None, applied: str) -> str:
    """The case's lines: the verification, the findings, the top one's fix and basis, what was
    applied, the fixed run's own Verify (the fix it read from what changed, else the baseline's
    Next change) and its verdict. ``top`` and ``findings``: Finding objects or their JSON."""
    def get(f, key):
        return f[key] if isinstance(f, dict) else getattr(f, key)

    said = checked.sentence() if checked is not None else \
        f"{get(top, 'rule')}: nothing verified ({applied})" if applied.startswith("nothing") else \
        f"{get(top, 'rule')}: no prediction"
    ranked = ", ".join(f"{get(f, 'rule')} {get(f, 'predicted_saving_ms'):,.2f}" for f in findings[:4]
                       if get(f, "predicted_saving_ms") is not None)
    after_steps = after_steps or {}
    verify = after_steps.get("Verify", "")
    told = next((verify[verify.index(k) + 2:] for k in ("; the fix read", "; the baseline's") if k in verify), "-")
    return (f"{name}: {said}\n    findings (ms saved): {ranked}\n    top finding: {get(top, 'title')[:150]}\n"
            f"    its fix: {get(top, 'fix')[:150]}\n    basis: {get(top, 'predicted_basis')[:150]}\n"
            f"    applied: {applied}\n    its Verify: {told[:200]}\n"
            f"    next verdict: {after_steps.get('Classify', '-')[:150]}")


def in_shell(ip, name: str) -> str:
    make = CASES[name]
    total = STEPS + 2

    before = _profiled(ip, f"{name}_before", make(None)[0].format(n=total))
    top = _top(before)
    if top is None:
        return f"{name}: no finding leads ({before.next_change[:120]})"
    call, applied = make(top.fix)
    if applied.startswith("nothing"):  # the top fix is not the injected cause's: nothing to measure
        return _report(name, top, before.advice.findings, None, None, applied)
    after = _profiled(ip, f"{name}_after", call.format(n=total))
    compared = ip.run_line_magic("npucompare", f"{name}_before {name}_after --no-plot --fix {top.rule or top.category}")
    return _report(name, top, before.advice.findings, compared.verification, dict(after.steps), applied)


def _profiled(ip, run: str, call: str):
    """The verdict of ``%%npuprofile`` over ``call`` (a training loop whose steps end at optimizer.step())."""
    report = ip.run_cell_magic("npuprofile", f"--steps {STEPS} --no-plot --quiet --name {run}", call)
    if report is None or report.verdict is None:
        raise SystemExit(f"{run}: no verdict ({getattr(report, 'notes', '')})")
    return report.verdict


def gloo(root: Path) -> str:
    """``npumagic run -- torchrun --nproc_per_node 2`` of a gloo job whose rank 1 sleeps 5 ms a step,
    then without the sleep where its checklist's Next change points at rank 1 or a late rank."""
    from npumagic.calibration import verify_runs
    from npumagic.session import Session

    script = root / "late_rank.py"
    script.write_text(textwrap.dedent(GLOO).replace("STEPS", str(STEPS + 2)))
    out = root / "gloo"

    def run(label: str, late_ms: float) -> dict:
        """The run's checklist as ``npumagic run --json`` shows it."""
        command = [sys.executable, "-m", "npumagic.cli", "run", "--json", "--out", str(out), "--name", label, "--steps",
                   str(STEPS), "--", "torchrun", "--nproc_per_node", "2", "--master_port", "29517", str(script),
                   str(late_ms)]
        done = subprocess.run(command, check=True, capture_output=True, text=True,
                              env=dict(os.environ, PYTHONWARNINGS="ignore"))
        return json.loads(done.stdout)["runs"][0]["checklist"]

    before = run("before", 5.0)
    findings = before["findings"]
    top = next((f for f in findings if before["next_change"].startswith(f["fix"])), None)
    if top is None:
        return f"gloo: no finding leads ({before['next_change'][:120]})"
    # the user removes rank 1's sleep where the Next change points at rank 1 or at a late rank
    if not ("rank 1" in top["title"] or top.get("ranks") == [1] or "late rank" in top["fix"]):
        return _report("gloo", top, findings, None, None, "nothing: the Next change points at no late rank 1")
    after = run("after", 0.0)
    checked, _ = verify_runs(Session(out), "before", "after", top["rule"] or top["category"])
    return _report("gloo", top, findings, checked, dict(after["steps"]), "rank 1 no longer sleeps 5 ms a step")


def main(argv: list[str]) -> int:
    from IPython.core.interactiveshell import InteractiveShell

    names = argv or list(CASES)
    ip = InteractiveShell.instance(colors="NoColor")
    ip.run_line_magic("load_ext", "npumagic")
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="npumagic_predict_") as tmp:
        root = Path(tmp)
        ip.run_line_magic("config", "NpuMagics.plot = False")
        ip.run_cell(SETUP, silent=True)
        for name in names:  # a history per case: its baseline is the case's own first run
            ip.run_line_magic("config", f"NpuMagics.output_dir = {str(root / name)!r}")
            line = gloo(root) if name == "gloo" else in_shell(ip, name)
            print(line, flush=True)
            outcomes.append("(within the interval" in line)
    print(f"achieved within the predicted interval: {sum(outcomes)} of {len(outcomes)}; load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
