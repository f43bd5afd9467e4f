"""Parse speed and memory on a large trace built from a real one (up to 10M events, ~1.9 GB).

Replicates a genuine Kineto trace (default: the shared V100 trace) end to end in time until it
holds about --events events, writes it as plain JSON (streamed: the builder never holds it),
then measures, each in a fresh process: npumagic load + summarize, npumagic advise of that
summary (its rules read every event), ``json.loads`` of the same file alone, and
HolisticTraceAnalysis (``pip install holistictraceanalysis``) load + temporal breakdown. Prints
seconds, ratios and peak RSS against the file size. Each contender runs under an address-space
limit (--mem-limit-gb): on a shared machine a contender that needs more fails with MemoryError
instead of taking the machine's memory from others.

    python bench/parse.py [--source PATH] [--events 10000000] [--dir /tmp/big] [--skip-hta] [--skip-advise]
Targets: peak RSS <= 0.5x the file at 10M events (<= 0.8x at 2M), no slower than json.loads,
>= 10x faster than HTA.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
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
    # the rules over every event (one process: the trace loaded and summarised untimed, then advised)
    "npumagic advise (loaded)": ("import npumagic\ns = npumagic.summarize(npumagic.load(PATH))", """
assert npumagic.advise(s) is not None
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
    events = trace.pop("traceEvents")
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    start = min(e["ts"] for e in timed)
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - start + 1000.0
    meta = [e for e in events if e.get("ph") == "M"]
    body = [e for e in events if e.get("ph") != "M"]
    copies = max(1, round((target_events - len(meta)) / len(body)))
    head = json.dumps(trace)[:-1]  # the header fields, then the event array is streamed in
    written = len(meta)
    with open(out, "w") as fh:
        fh.write(head + (', "traceEvents": [' if len(head) > 1 else '"traceEvents": ['))
        fh.write(",\n".join(json.dumps(e) for e in meta))
        for k in range(copies):
            shift = k * span
            batch = []
            for e in body:
                c = dict(e)
                if isinstance(c.get("ts"), (int, float)):
                    c["ts"] = c["ts"] + shift
                name = c.get("name", "")
                if name.startswith("ProfilerStep#"):
                    c["name"] = f"ProfilerStep#{int(name.split('#')[1]) + k * 1000}"
                batch.append(c)
            fh.write(",\n" + ",\n".join(json.dumps(e) for e in batch))
            written += len(batch)
        fh.write("]}")
    return written, out.stat().st_size


def measure(code: tuple[str, str], path: Path, mem_limit: int) -> tuple[float, int] | str:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (mem_limit, mem_limit))

    done = subprocess.run([sys.executable, "-c", RUNNER, str(path), *code], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), preexec_fn=limit if mem_limit else None)
    if done.returncode != 0:
        return f"failed: {done.stderr.strip().splitlines()[-1][:70] if done.stderr.strip() else done.returncode}"
    seconds, rss = done.stdout.split()[-2:]
    return float(seconds), int(rss)


def rss_target(events: int) -> float | None:
    return 0.5 if events >= 10_000_000 else 0.8 if events >= 2_000_000 else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--dir", type=Path, default=None, help="where to write the trace (default a temporary dir)")
    parser.add_argument("--mem-limit-gb", type=float, default=16.0, help="address-space limit of each contender (0: none)")
    parser.add_argument("--skip-hta", action="store_true")
    parser.add_argument("--skip-json", action="store_true")
    parser.add_argument("--skip-advise", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="npumagic-parse-", dir=args.dir) as tmp:
        path = Path(tmp) / "rank-0.big.pt.trace.json"
        t0 = time.perf_counter()
        n_events, size = build(args.source, args.events, path)
        print(f"trace: {n_events:,} events, {size / 2**20:.0f} MiB, built from {args.source.name} "
              f"in {time.perf_counter() - t0:.1f} s\n", flush=True)
        results = {}
        for label, code in CONTENDERS.items():
            if (label.startswith("HTA") and args.skip_hta) or (label.startswith("json") and args.skip_json) or (
                    label.startswith("npumagic advise") and args.skip_advise):
                continue
            results[label] = measure(code, path, int(args.mem_limit_gb * 2**30))
            print(f"  {label}: {results[label]}", flush=True)
        ours = results["npumagic load+summarize"]
        print(f"\n{'contender':<30}{'seconds':>9}{'vs npumagic':>13}{'peak RSS MiB':>14}{'RSS / file':>12}")
        for label, r in results.items():
            if not isinstance(r, tuple):
                print(f"{label:<30}  {r}")
                continue
            ratio = f"{r[0] / ours[0]:>12.1f}x" if isinstance(ours, tuple) else f"{'-':>13}"
            print(f"{label:<30}{r[0]:>9.2f}{ratio}{r[1] / 2**20:>14.0f}{r[1] / size:>12.2f}")
        if isinstance(ours, tuple):
            verdicts = []
            json_r = results.get("json.loads alone")
            if isinstance(json_r, tuple):
                verdicts.append(f"vs json.loads {json_r[0] / ours[0]:.2f}x ({'OK' if ours[0] <= json_r[0] else 'slower'})")
            target = rss_target(n_events)
            verdicts.append(f"RSS {ours[1] / size:.2f}x file" + (f" ({'OK' if ours[1] <= target * size else 'over'} "
                                                                   f"{target}x)" if target else ""))
            hta = results.get("HTA load+temporal breakdown")
            if isinstance(hta, tuple):
                verdicts.insert(0, f"vs HTA {hta[0] / ours[0]:.1f}x faster ({'OK' if hta[0] >= 10 * ours[0] else 'under 10x'})")
            print("\ntargets: " + "; ".join(verdicts))


if __name__ == "__main__":
    main()
