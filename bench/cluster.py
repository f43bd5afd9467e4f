"""Many-rank jobs: npumagic analyze against ``msprof-analyze cluster -m all`` on the same folder.

Builds an N-rank torch_npu job by copying the shared level1 ranks (rank i is a copy of rank
i % 2, its rank id rewritten where the files carry it: the directory name, profiler_info_N.json
and its rank_id, the source rank of trace_view.json's HCCL links and communication_matrix.json's
link keys, whose self link "r-r" stays one; the other files are hard links), then times, each
as a fresh process as a user runs it from a shell, --repeat times: ``npumagic analyze DIR`` and,
when it is installed (``pip install msprof-analyze``), ``msprof-analyze cluster -d DIR -m all``.
The two tools' runs alternate (A B A B ...), so a change of the machine's load falls on both
alike; running each tool's runs in a block let one block catch a busy minute (wall ratios of
3.6x-16.6x were seen so). Each run's CPU time is the whole process tree's (user + system, from
the children's rusage: the tool's own pools and workers, reaped by it, included); CPU time moves
far less with the load than wall time does. Peak RSS is that of the whole process tree too,
sampled every 50 ms. The load average is printed before and after.

From 8 ranks on ``npumagic analyze`` reads a torch_npu job as an outline: each rank's
step_trace_time.csv and communication files (what msprof-analyze reads), and the lowest rank in
full; ``--every-rank`` times reading and summarising every rank in full instead.

msprof-analyze's time is mostly start-up (it spawns a process per analysis, each importing its
package: ~13 s of CPU here whatever the rank count); its work proper is ~1 s at 256 ranks.

    python bench/cluster.py --ranks 256 [--repeat 3] [--every-rank] [--scheduler tcp://HOST:8786] [--keep DIR]

The last line is ``ratio: X.Xx wall, Y.Yx CPU`` (msprof-analyze's median over npumagic's).
Target: 256 ranks at least 5x faster than msprof-analyze; 256 ranks cost at most 9x 32 ranks.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
LEVEL1 = ROOT.parent / "shared" / "data" / "ascend" / "level1"
OUTPUT = "ASCEND_PROFILER_OUTPUT"


def build(job: Path, ranks: int) -> None:
    """``ranks`` rank directories under ``job``, copied from the shared level1 ranks."""
    sources = sorted(p for p in LEVEL1.iterdir() if p.is_dir() and (p / OUTPUT).is_dir())
    for rank in range(ranks):
        source = sources[rank % len(sources)]
        old = int(re.search(r"rank(\d+)", source.name).group(1))
        target = job / f"rank{rank}_ascend_pt"
        for path in source.rglob("*"):
            rel = path.relative_to(source)
            out = target / rel
            if path.is_dir():
                out.mkdir(parents=True, exist_ok=True)
                continue
            out.parent.mkdir(parents=True, exist_ok=True)
            if rel.name.startswith("profiler_info"):
                info = json.loads(path.read_text())
                info["rank_id"] = rank
                (out.parent / f"profiler_info_{rank}.json").write_text(json.dumps(info, indent=4))
            elif rel.name == "trace_view.json":
                out.write_text(path.read_text().replace(f'"src rank": {old},', f'"src rank": {rank},'))
            elif rel.name == "communication_matrix.json":
                matrix = json.loads(path.read_text())
                for step in matrix.values():
                    for group in step.values():
                        for op, links in group.items():
                            group[op] = {_relink(k, old, rank): v for k, v in links.items()}
                out.write_text(json.dumps(matrix))
            else:
                os.link(path, out)


def _relink(key: str, old: int, new: int) -> str:
    """A link key "src-dst" (ranks local to the communication group) of the copy: the copied
    rank's own end renamed, so that its self link "r-r" stays one (msprof-analyze maps group-local
    ranks to global ones through the self links; the job is then one group of all its ranks)."""
    src, _, dst = key.partition("-")
    rename = lambda r: str(new) if r == str(old) else r  # noqa: E731
    return f"{rename(src)}-{rename(dst)}"


def _cpu_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(command: list[str], cwd: Path) -> tuple[float, float, float] | str:
    """Wall seconds, CPU seconds and peak RSS (MiB) of the process and all its descendants together
    (CPU: this bench's children's rusage before and after; one tool runs at a time)."""
    log = tempfile.TemporaryFile(mode="w+")  # a file, not a pipe: a chatty tool must never block on it
    cpu0 = _cpu_of_children()
    t0 = time.perf_counter()
    proc = subprocess.Popen(command, cwd=cwd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    peak = 0
    root = psutil.Process(proc.pid)
    while proc.poll() is None:
        try:
            tree = [root, *root.children(recursive=True)]
            peak = max(peak, sum(_rss(p) for p in tree))
        except psutil.NoSuchProcess:
            pass
        time.sleep(0.05)
    seconds = time.perf_counter() - t0
    cpu = _cpu_of_children() - cpu0
    log.seek(0)
    out = log.read()
    log.close()
    if proc.returncode != 0:
        last = (out.strip() or f"exit {proc.returncode}").splitlines()[-1]
        return "failed: " + last[:100]
    return seconds, cpu, peak / 2**20


def interleaved(tools: dict, times: int) -> dict[str, list[tuple[float, float, float]] | str]:
    """Each tool's runs, ``times`` rounds of one run of every tool in turn (A B A B ...); a tool's
    first failure stands for it and ends its runs."""
    runs: dict = {label: [] for label in tools}
    for _ in range(max(1, times)):
        for label, run in tools.items():
            if isinstance(runs[label], str):
                continue
            result = run()
            runs[label] = runs[label] + [result] if isinstance(result, tuple) else result
    return runs


def medians(runs: list[tuple[float, float, float]]) -> tuple[float, float, float]:
    """The median wall and CPU seconds, and the largest peak RSS, of a tool's runs."""
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs), max(r[2] for r in runs)


def agreement(job: Path, every_rank: bool) -> str:
    """How npumagic's rank table and link bandwidths agree with msprof-analyze's output in
    ``job``: cluster_step_trace_time.csv per rank, and each rank's "Total Op Info" bandwidth per
    link type in cluster_communication.json."""
    import pandas as pd

    sys.path.insert(0, str(ROOT))
    from npumagic.analysis import job as job_reader
    from npumagic.analysis.collectives import link_bandwidth

    out = job / "cluster_analysis_output"
    summary = job_reader.analyze(job, every_rank=every_rank, scheduler="serial" if every_rank else None)
    ours = summary.ranks.set_index("rank")
    ref = pd.read_csv(out / "cluster_step_trace_time.csv")
    ref = ref[ref["Type"] == "rank"].groupby("Index")[["Computing", "Communication(Not Overlapped)", "Free"]].mean()
    worst = max(float((ours[a] - ref[b]).abs().max()) for a, b in (
        ("computing_us", "Computing"), ("comm_not_overlapped_us", "Communication(Not Overlapped)"), ("free_us", "Free")))
    bandwidth = link_bandwidth(summary.links).set_index(["rank", "link_type"])["bandwidth_gbps"]
    rel, links = 0.0, 0
    for group in json.loads((out / "cluster_communication.json").read_text()).values():
        for ops in group.values():
            for op, per_rank in ops.items():
                if not op.startswith("Total Op Info"):
                    continue
                for rank, info in per_rank.items():
                    for link, v in info.get("Communication Bandwidth Info", {}).items():
                        if v.get("Transit Size(MB)", 0) > 0:
                            mine = bandwidth.get((int(rank), link), float("nan"))
                            rel = max(rel, abs(mine - v["Bandwidth(GB/s)"]) / v["Bandwidth(GB/s)"])
                            links += 1
    return (f"agreement with msprof-analyze: rank table (computing, communication not overlapped, free) within "
            f"{worst:.3f} us on {len(ref)} ranks; link bandwidth within {rel:.1e} (relative) on {links} rank links")


def _rss(process: psutil.Process) -> int:
    try:
        return process.memory_info().rss
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=32)
    parser.add_argument("--scheduler", default="", help="npumagic analyze --scheduler (implies --every-rank)")
    parser.add_argument("--every-rank", action="store_true", help="npumagic analyze --every-rank")
    parser.add_argument("--keep", type=Path, default=None, help="build the job here and keep it")
    parser.add_argument("--skip-msprof", action="store_true")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each tool: the median wall time is reported "
                        "(msprof-analyze's time is mostly its start-up, which varies by 2x on a shared machine)")
    args = parser.parse_args()
    if not LEVEL1.is_dir():
        sys.exit(f"{LEVEL1} not found (the shared data sits beside the project)")
    with tempfile.TemporaryDirectory(prefix="npumagic-cluster-") as tmp:
        job = args.keep or Path(tmp) / "job"
        if not job.is_dir():
            t0 = time.perf_counter()
            build(job, args.ranks)
            print(f"job: {args.ranks} ranks copied from {LEVEL1} in {time.perf_counter() - t0:.1f} s", flush=True)
        ours_cmd = [sys.executable, "-m", "npumagic.cli", "analyze", str(job)]
        if args.scheduler:
            ours_cmd += ["--scheduler", args.scheduler]
        if args.every_rank:
            ours_cmd += ["--every-rank"]
        tools = {"npumagic analyze": lambda: timed(ours_cmd, Path(tmp))}
        tool = shutil.which("msprof-analyze")
        peer = "msprof-analyze cluster -m all"
        if tool and not args.skip_msprof:
            def msprof():
                shutil.rmtree(job / "cluster_analysis_output", ignore_errors=True)
                return timed([tool, "cluster", "-d", str(job), "-m", "all"], Path(tmp))

            tools[peer] = msprof
        load = os.getloadavg()[0]
        runs = interleaved(tools, args.repeat)
        if peer not in runs:
            runs[peer] = "skipped" if tool else "not installed"
        elif not isinstance(runs[peer], str):
            print(agreement(job, every_rank=args.every_rank or bool(args.scheduler)), flush=True)
            shutil.rmtree(job / "cluster_analysis_output", ignore_errors=True)
        print(f"\n{args.ranks} ranks, {os.cpu_count()} cores, {args.repeat} runs of each tool interleaved; load average "
              f"{load:.2f} before, {os.getloadavg()[0]:.2f} after")
        print(f"{'tool':<32}{'median wall s':>14}{'median CPU s':>14}{'peak RSS MiB':>14}")
        for label, result in runs.items():
            if isinstance(result, list):
                wall, cpu, rss = medians(result)
                print(f"{label:<32}{wall:>14.2f}{cpu:>14.2f}{rss:>14.0f}")
            else:
                print(f"{label:<32}  {result}")
        ours, theirs = runs["npumagic analyze"], runs[peer]
        if isinstance(ours, list) and isinstance(theirs, list):
            (ow, oc, _), (tw, tc, _) = medians(ours), medians(theirs)
            print(f"ratio: {tw / ow:.1f}x wall, {tc / oc:.1f}x CPU")
        else:
            print("ratio: -")

if __name__ == "__main__":
    main()
