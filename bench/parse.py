"""Parse speed and memory on a large trace built from a real one (up to 10M events, ~1.9 GB).

Replicates a genuine Kineto trace (default: the shared V100 trace) end to end in time until it
holds about --events events, writes it as plain JSON (streamed: the builder never holds it),
then measures, each in a fresh process: npumagic load + summarize, npumagic advise of that
summary (its rules read every event), ``json.loads`` of the same file alone, and
HolisticTraceAnalysis (``pip install holistictraceanalysis``) load + temporal breakdown. Prints
seconds, ratios and peak RSS against the file size. Each contender runs under an address-space
limit (--mem-limit-gb): on a shared machine a contender that needs more fails with MemoryError
instead of taking the machine's memory from others.

    python bench/parse.py [--source PATH] [--events 10000000] [--dir /tmp/big] [--root CHECKOUT]
                          [--skip HTA json 'npumagic advise']
Targets (issue 45): at 10M events >= 3x faster than ``orjson.loads`` of the file, CPU/wall above
1.6 on two cores, peak RSS (main + decode workers at one time) <= 0.5x the file; <= 0.6x at 2M; >= 10x
faster than HTA.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SOURCE = ROOT.parent / "shared" / "data" / "cuda" / "ns_resolution" / "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"

# (imports, timed work): imports are not timed, so each figure is the parse and analysis alone.
CONTENDERS = {
    # npumagic's API loads its modules at first use: asked for here, so its imports (pandas among
    # them) are not timed either (they were, before 2026-12-07: about 0.5 s)
    "npumagic load+summarize": ("import npumagic\nnpumagic.load, npumagic.summarize", """
s = npumagic.summarize(npumagic.load(PATH))
assert len(s.steps) > 0
"""),
    # the rules over every event (one process: the trace loaded and summarised untimed, then advised)
    "npumagic advise (loaded)": ("import npumagic\ns = npumagic.summarize(npumagic.load(PATH))", """
assert npumagic.advise(s) is not None
"""),
    "orjson.loads alone": ("import orjson", """
with open(PATH, 'rb') as f:
    d = orjson.loads(f.read())
assert d['traceEvents']
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
# would report the parent's size. Worker processes (npumagic's decode pool) are found by polling
# this process's descendants; their peaks are summed (each worker's own VmHWM, counted apart from
# the main one's), as is the CPU time of the descendants. The sum of peaks reached at different
# times (the workers' while reading, the main process's often while summarising, after the
# workers ended) overstates the memory the machine needed: the peak of the total at one time is
# the largest sum of every process's VmRSS sampled together (every 20 ms), or the main process's
# own VmHWM where that is larger (a peak between two samples).
RUNNER = """
import os, sys, threading, time
PATH = sys.argv[1]
peaks, cpu, together = {}, {}, [0]

def hwm(pid, field='VmHWM:'):
    with open(f'/proc/{pid}/status') as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith(field))

def descendants(pid):
    found = []
    for task in os.listdir(f'/proc/{pid}/task'):
        with open(f'/proc/{pid}/task/{task}/children') as f:
            for child in f.read().split():
                found += [int(child)] + descendants(int(child))
    return found

def watch():
    while True:
        now = hwm(os.getpid(), 'VmRSS:')
        for pid in descendants(os.getpid()):
            try:
                peaks[pid] = hwm(pid)
                now += hwm(pid, 'VmRSS:')
                with open(f'/proc/{pid}/stat') as f:
                    fields = f.read().rsplit(')', 1)[1].split()
                cpu[pid] = (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')
            except (OSError, StopIteration):
                pass
        together[0] = max(together[0], now)
        time.sleep(0.02)

exec(compile(sys.argv[2], 'imports', 'exec'))
threading.Thread(target=watch, daemon=True).start()
c0, t0 = time.process_time(), time.perf_counter()
exec(compile(sys.argv[3], 'contender', 'exec'))
seconds = time.perf_counter() - t0
time.sleep(0.05)
main_cpu = time.process_time() - c0
print(seconds, hwm(os.getpid()), sum(peaks.values()), main_cpu + sum(cpu.values()), max(together[0], hwm(os.getpid())))
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


def measure(code: tuple[str, str], path: Path, mem_limit: int, root: Path) -> tuple[float, int, int, float, int] | str:
    """(seconds, main peak RSS, workers' peak RSS summed, CPU seconds of all, peak RSS of all at one
    time) or why it failed."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (mem_limit, mem_limit))

    done = subprocess.run([sys.executable, "-c", RUNNER, str(path), *code], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(root)), cwd=root, preexec_fn=limit if mem_limit else None)
    if done.returncode < 0:  # a failed allocation under the limit can end a C extension by a signal
        return (f"failed: {signal.Signals(-done.returncode).name}" +
                (f" (under --mem-limit-gb {mem_limit / 2**30:g}: raise it where the machine has the memory)"
                 if mem_limit else ""))
    if done.returncode != 0:
        return f"failed: {done.stderr.strip().splitlines()[-1][:70] if done.stderr.strip() else done.returncode}"
    seconds, rss, workers, cpu, together = done.stdout.split()[-5:]
    return float(seconds), int(rss), int(workers), float(cpu), int(together)


def rss_target(events: int) -> float | None:
    return 0.5 if events >= 10_000_000 else 0.6 if events >= 2_000_000 else None


def report(results: dict, n_events: int, size: int) -> None:
    ours = results["npumagic load+summarize"]
    print(f"\n{'contender':<30}{'seconds':>9}{'vs npumagic':>13}{'CPU/wall':>10}{'main RSS':>10}"
          f"{'workers RSS':>13}{'sum/file':>10}{'at once/file':>14}")
    for label, r in results.items():
        if not isinstance(r, tuple):
            print(f"{label:<30}  {r}")
            continue
        ratio = f"{r[0] / ours[0]:>12.2f}x" if isinstance(ours, tuple) else f"{'-':>13}"
        print(f"{label:<30}{r[0]:>9.2f}{ratio}{r[3] / r[0]:>10.2f}{r[1] / 2**20:>7.0f} MiB{r[2] / 2**20:>9.0f} MiB"
              f"{(r[1] + r[2]) / size:>10.2f}{r[4] / size:>14.2f}")
    if not isinstance(ours, tuple):
        return
    verdicts = []
    for label, factor in (("orjson.loads alone", 3), ("json.loads alone", 1)):
        other = results.get(label)
        if isinstance(other, tuple):
            verdicts.append(f"vs {label.split()[0]} {other[0] / ours[0]:.2f}x faster "
                            f"({'OK' if other[0] >= factor * ours[0] else f'under {factor}x'})")
    verdicts.append(f"CPU/wall {ours[3] / ours[0]:.2f}")
    target = rss_target(n_events)
    verdicts.append(f"peak RSS of all at one time {ours[4] / size:.2f}x file" + (
        f" ({'OK' if ours[4] <= target * size else 'over'} {target}x)" if target else "")
        + f", each process's peak summed {(ours[1] + ours[2]) / size:.2f}x")
    hta = results.get("HTA load+temporal breakdown")
    if isinstance(hta, tuple):
        verdicts.insert(0, f"vs HTA {hta[0] / ours[0]:.1f}x faster ({'OK' if hta[0] >= 10 * ours[0] else 'under 10x'})")
    print("\ntargets: " + "; ".join(verdicts) + f"\nload average at the end: {open('/proc/loadavg').read().strip()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--dir", type=Path, default=None, help="where to write the trace (default a temporary dir)")
    parser.add_argument("--mem-limit-gb", type=float, default=16.0, help="address-space limit of each contender (0: none)")
    parser.add_argument("--trace", type=Path, default=None,
                        help="keep the built trace here (built once: a later run with the same path reuses it)")
    parser.add_argument("--root", type=Path, default=ROOT, help="the npumagic checkout to measure (e.g. main's, for a before/after)")
    parser.add_argument("--skip", nargs="*", default=[], metavar="PREFIX",
                        help="contenders to leave out, by the start of their label (HTA, json, orjson, 'npumagic advise')")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="npumagic-parse-", dir=args.dir) as tmp:
        path = args.trace or Path(tmp) / "rank-0.big.pt.trace.json"
        t0 = time.perf_counter()
        if path.exists():
            n_events, size = args.events, path.stat().st_size
            print(f"trace: {path} ({size / 2**20:.0f} MiB), as built before for about {n_events:,} events")
        else:
            n_events, size = build(args.source, args.events, path)
            print(f"trace: {n_events:,} events, {size / 2**20:.0f} MiB, built from {args.source.name} "
                  f"in {time.perf_counter() - t0:.1f} s")
        print(f"load average {open('/proc/loadavg').read().strip()}\n", flush=True)
        results = {}
        for label, code in CONTENDERS.items():
            if any(label.startswith(prefix) for prefix in args.skip):
                continue
            results[label] = measure(code, path, int(args.mem_limit_gb * 2**30), args.root)
            print(f"  {label}: {results[label]}", flush=True)
        report(results, n_events, size)


if __name__ == "__main__":
    main()
