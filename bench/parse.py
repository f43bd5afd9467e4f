"""Parse speed and memory on a ~1M-event trace built from a real one.

Replicates a genuine Kineto trace (default: the shared V100 trace) end to end in time until it
holds about --events events, writes it as plain JSON, then measures, each in a fresh process:
npumagic load + summarize, ``json.loads`` of the same file alone, and HolisticTraceAnalysis
(``pip install holistictraceanalysis``) load + temporal breakdown. Prints seconds, ratios and
peak RSS.

    python bench/parse.py [--source PATH] [--events 1000000]
Targets: >= 10x faster than HTA, no slower than json.loads, peak RSS < 3x the file size.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SOURCE = ROOT.parent / "shared" / "data" / "cuda" / "ns_resolution" / "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"

# (imports, timed work): imports are not timed, so each figure is the parse and analysis alone.
CONTENDERS = {
    "npumagic load+summarize": ("import npumagic", """
s = npumagic.summarize(npumagic.load(PATH))
assert len(s.steps) > 0
"""),
    "json.loads alone": ("import json", """
with open(PATH, 'rb') as f:
    d = json.loads(f.read())
assert d['traceEvents']
"""),
    "HTA load+temporal breakdown": ("""
import logging, os
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
""", """
a = TraceAnalysis(trace_dir=os.path.dirname(PATH))
a.get_temporal_breakdown(visualize=False)
"""),
}

# Peak RSS from VmHWM: ru_maxrss survives exec, so a child forked from this (large) process
# would report the parent's size.
RUNNER = """
import sys, time
PATH = sys.argv[1]
exec(compile(sys.argv[2], 'imports', 'exec'))
t0 = time.perf_counter()
exec(compile(sys.argv[3], 'contender', 'exec'))
seconds = time.perf_counter() - t0
hwm = next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM:'))
print(seconds, hwm * 1024)
"""


def build(source: Path, target_events: int, out: Path) -> tuple[int, int]:
    opener = gzip.open if source.suffix == ".gz" else open
    with opener(source, "rb") as fh:
        trace = json.load(fh)
    events = trace["traceEvents"]
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    start = min(e["ts"] for e in timed)
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - start + 1000.0
    copies = max(1, round(target_events / len(events)))
    meta = [e for e in events if e.get("ph") == "M"]
    body = [e for e in events if e.get("ph") != "M"]
    out_events = list(meta)
    for k in range(copies):
        shift = k * span
        for e in body:
            c = dict(e)
            if isinstance(c.get("ts"), (int, float)):
                c["ts"] = c["ts"] + shift
            name = c.get("name", "")
            if name.startswith("ProfilerStep#"):
                c["name"] = f"ProfilerStep#{int(name.split('#')[1]) + k * 1000}"
            out_events.append(c)
    trace["traceEvents"] = out_events
    out.write_text(json.dumps(trace))
    return len(out_events), out.stat().st_size


def measure(code: tuple[str, str], path: Path) -> tuple[float, int] | None:
    done = subprocess.run([sys.executable, "-c", RUNNER, str(path), *code], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    if done.returncode != 0:
        print(f"  failed: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode}")
        return None
    seconds, rss = done.stdout.split()[-2:]
    return float(seconds), int(rss)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--skip-hta", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="npumagic-parse-") as tmp:
        path = Path(tmp) / "rank-0.big.pt.trace.json"
        t0 = time.perf_counter()
        n_events, size = build(args.source, args.events, path)
        print(f"trace: {n_events:,} events, {size / 2**20:.0f} MiB, built from {args.source.name} "
              f"in {time.perf_counter() - t0:.1f} s\n")
        results = {}
        for label, code in CONTENDERS.items():
            if label.startswith("HTA") and args.skip_hta:
                continue
            results[label] = measure(code, path)
        ours = results["npumagic load+summarize"]
        print(f"{'contender':<30}{'seconds':>9}{'vs npumagic':>13}{'peak RSS MiB':>14}{'RSS / file':>12}")
        for label, r in results.items():
            if r is None:
                print(f"{label:<30}{'-':>9}")
                continue
            print(f"{label:<30}{r[0]:>9.2f}{r[0] / ours[0]:>12.1f}x{r[1] / 2**20:>14.0f}{r[1] / size:>12.2f}")
        if ours:
            json_s = results["json.loads alone"][0]
            verdicts = [f"vs json.loads {json_s / ours[0]:.2f}x ({'OK' if ours[0] <= json_s else 'slower'})",
                        f"RSS {ours[1] / size:.2f}x file ({'OK' if ours[1] < 3 * size else 'over 3x'})"]
            if results.get("HTA load+temporal breakdown"):
                hta = results["HTA load+temporal breakdown"][0]
                verdicts.insert(0, f"vs HTA {hta / ours[0]:.1f}x faster ({'OK' if hta >= 10 * ours[0] else 'under 10x'})")
            print("\ntargets: " + "; ".join(verdicts))


if __name__ == "__main__":
    main()
