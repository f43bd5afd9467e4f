"""What %%npuprofile costs a CPU training loop: wall time per iteration unwrapped, inside the
magic but outside the active window (the wait phase, and after the window closed), and inside
the active window; and what the psutil host sampler adds to the active window (the same long
window with and without --no-host). All in one run, in one real IPython shell, blocks
interleaved to share noise.

    python bench/overhead.py [--iterations 80] [--rounds 24]
Targets: outside the window within 3% of unwrapped; the host sampler within 2% of the active window.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile

from IPython.core.interactiveshell import InteractiveShell

from npumagic.capture import host as host_module

SETUP = """
import time, torch
torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(64, 128), torch.randn(64, 1)
def loop(n):
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step(); opt.zero_grad()
        times.append(time.perf_counter() - t0)
    return times
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=80)
    parser.add_argument("--rounds", type=int, default=24)
    parser.add_argument("--interval-ms", type=float, default=None, help="the host sampler's period (default: npumagic's)")
    args = parser.parse_args()
    if args.interval_ms:
        host_module.INTERVAL_S = args.interval_ms / 1000
    n = args.iterations
    ip = InteractiveShell.instance(colors="NoColor")
    ip.run_line_magic("load_ext", "npumagic")
    ip.run_line_magic("config", f"NpuMagics.output_dir = {tempfile.mkdtemp(prefix='npumagic-bench-')!r}")
    assert ip.run_cell(SETUP).success
    ip.run_cell("_t = loop(100)", silent=True)  # warm the allocator and the dispatcher
    unwrapped, wait_phase, after, active = [], [], [], []
    sampled, unsampled = [], []  # long active windows with and without the host sampler

    def run_unwrapped(r):
        ip.run_cell(f"_t = loop({n})", silent=True)
        unwrapped.append(ip.user_ns["_t"][5:])

    def run_wait(r):
        # --wait n-10: most iterations run under the magic with the profiler armed but not recording
        ip.run_cell(f"%%npuprofile --wait {n - 10} --warmup 1 --steps 3 --quiet --no-plot --name wait{r}\n"
                    f"_t = loop({n})", silent=True)
        t = ip.user_ns["_t"]
        wait_phase.append(t[5:n - 10])
        active.append(t[n - 9:n - 6])

    def run_after(r):
        ip.run_cell(f"%%npuprofile --wait 1 --warmup 1 --steps 3 --quiet --no-plot --name after{r}\n"
                    f"_t = loop({n})", silent=True)
        after.append(ip.user_ns["_t"][10:])

    def run_active(r, host):
        flag = "" if host else " --no-host"
        ip.run_cell(f"%%npuprofile --wait 0 --warmup 1 --steps {n - 5} --quiet --no-plot "
                    f"--name active{'H' if host else 'N'}{r}{flag}\n_t = loop({n})", silent=True)
        (sampled if host else unsampled).append(ip.user_ns["_t"][3:n - 6])

    blocks = [run_unwrapped, run_wait, run_after, lambda r: run_active(r, True), lambda r: run_active(r, False)]
    for r in range(args.rounds):  # rotate the order so drift hits every variant alike
        k = r % len(blocks)
        for block in blocks[k:] + blocks[:k]:
            block(r)
    # The machine's speed drifts by more than the effect: compare each variant with the unwrapped
    # block of the same round, and report the median of those paired ratios.
    base_by_round = [statistics.median(b) for b in unwrapped]
    rows = [("unwrapped", unwrapped), ("%%npuprofile, wait phase (not recording)", wait_phase),
            ("%%npuprofile, after the window closed", after), ("%%npuprofile, active window (recording)", active)]
    print(f"{'iteration wall time':<44}{'median us':>10}{'ratio':>8}{'samples':>9}")
    ratios = {}
    for label, blocks_ in rows:
        flat = [v for b in blocks_ for v in b]
        ratios[label] = statistics.median(statistics.median(b) / base for b, base in zip(blocks_, base_by_round))
        print(f"{label:<44}{statistics.median(flat) * 1e6:>10.1f}{ratios[label]:>8.3f}{len(flat):>9}")
    outside = max(ratios[rows[1][0]], ratios[rows[2][0]])
    print(f"\noutside the active window: {outside - 1:+.1%} vs unwrapped (median paired ratio of {args.rounds} "
          f"rounds; target within 3%): {'OK' if outside <= 1.03 else 'OVER TARGET'}")
    host = statistics.median(statistics.median(a) / statistics.median(b) for a, b in zip(sampled, unsampled))
    print(f"host sampler (every {host_module.INTERVAL_S * 1000:g} ms) in the active window: {host - 1:+.1%} per iteration vs the same window "
          f"with --no-host (median paired ratio; target within 2%): {'OK' if host <= 1.02 else 'OVER TARGET'}")


if __name__ == "__main__":
    main()
