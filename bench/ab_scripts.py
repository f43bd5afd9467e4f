"""How many captures ``npumagic ab`` needs on this machine, and how often it is wrong, for two
real training scripts: identical ones (both sleep 6 ms and run a tiny training step; a call
either way is false) and B sleeping 5.5 ms, about 9% faster (the issue's 10% case). Each
experiment runs the real CLI,
each capture a fresh process; it prints each experiment's decision, the captures it took and
the machine's load beside them.

    python bench/ab_scripts.py [--experiments 3] [--max-captures 24] [--steps-per-capture 20]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = """
import time, torch
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(100_000):
    x, y = torch.randn(16, 32), torch.randn(16, 1)
    torch.nn.functional.mse_loss(model(x), y).backward()
    time.sleep(SLEEP)
    opt.step()
    opt.zero_grad()
"""


def experiment(a: Path, b: Path, args) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-m", "npumagic.cli", "ab", "--json", "--max-captures", str(args.max_captures),
                           "--steps-per-capture", str(args.steps_per_capture), str(a), str(b)],
                          capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(done.stderr)
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", type=int, default=3)
    parser.add_argument("--max-captures", type=int, default=24)
    parser.add_argument("--steps-per-capture", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        scripts = {}
        for name, sleep in (("same_a", 0.006), ("same_b", 0.006), ("faster", 0.0055)):
            scripts[name] = Path(folder) / f"{name}.py"
            scripts[name].write_text(SCRIPT.replace("SLEEP", str(sleep)))
        for kind, b in (("identical", scripts["same_b"]), ("B ~9% faster", scripts["faster"])):
            for k in range(args.experiments):
                r = experiment(scripts["same_a"], b, args)
                call = ("B faster" if r["speedup"] > 1 else "B slower") if r["significant"] else \
                    "no difference" if r["decided"] else "undecided"
                print(f"{kind:>18} #{k + 1}: {call:<13} after {r['captures']:>2} captures, paired ratio "
                      f"{r['speedup']:.3f}x (95% CI {r['ci'][0]:.3f}-{r['ci'][1]:.3f}); load "
                      f"{open('/proc/loadavg').read().split()[0]}", flush=True)


if __name__ == "__main__":
    main()
