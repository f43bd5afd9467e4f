"""Shared fixtures: the real data in ../shared, a real InteractiveShell with the extension loaded."""

from __future__ import annotations

import functools
import os
import signal
import warnings
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")

# A suite started with SIGINT ignored (a background job of a non-interactive shell) hands that on
# to every process its tests start, and the interrupt tests would see no Ctrl-C: the default back.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("NPUMAGIC_SHARED", ROOT.parent / "shared")) / "data"
ASCEND = SHARED / "ascend"
CUDA = SHARED / "cuda"
ASCEND_RANKS = [ASCEND / level / f"rank{r}_ascend_pt" for level in ("level0", "level1", "level2") for r in (0, 1)]


def pytest_addoption(parser):
    parser.addoption("--slow", action="store_true",
                     help="also run the tests marked slow (notebooks, a real browser, two kernels at once, the demo, "
                          "the HolisticTraceAnalysis cross-checks, Dask clusters, fresh-process imports, scale tests, every "
                          "sample of the sweeps) and fuzz with every example; CI runs this")


def pytest_configure(config):
    global FULL
    FULL = config.getoption("--slow")


def pytest_collection_modifyitems(config, items):
    # the long modules (the CLI, outline, Dask, magics: whole runs) go to the workers first, so
    # none of them is left running alone at the end while the other worker idles
    items.sort(key=lambda item: item.path.parent.name not in ("tests", "magics"))
    if FULL:
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]


FULL = False  # --slow: set before any test module is imported


@pytest.fixture(autouse=True)
def _no_store(monkeypatch):
    """The store of each analysed job's tables (:mod:`npumagic.analysis.store`) is off unless a
    test turns it on: tests read the same files many times, and tests/data stays unwritten."""
    monkeypatch.setenv("NPUMAGIC_STORE", "0")


def examples(n: int) -> int:
    """Hypothesis examples for a fuzz test: ``n`` under --slow, a quarter in the quick loop."""
    return n if FULL else max(10, n // 4)


def sampled(values, keep: int = 1) -> list:
    """Parameters for a sweep over the shared samples: the first ``keep`` run in the quick loop,
    every one under --slow (the others carry the slow mark)."""
    return [v if i < keep else pytest.param(v, marks=pytest.mark.slow) for i, v in enumerate(values)]


@functools.cache
def shared_trace(path: Path):
    """``npumagic.load`` of a shared sample, read once per test process and quietly: for tests of
    what is done with it (rules, tables, invariants), not of reading it. No test changes it (a
    test that edits events edits a copy)."""
    import npumagic

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return npumagic.load(need(path))


@functools.cache
def shared_summary(path: Path):
    """The Summary of :func:`shared_trace`, made once per test process."""
    import npumagic

    return npumagic.summarize(shared_trace(path))


# A skip reason is "need WHAT — DETAIL": the summary counts the skips by WHAT (:func:`skip_lines`),
# so each thing the suite can miss is one line however many tests or files it skips.
NEED_SHARED = "need ../shared/data (or NPUMAGIC_SHARED)"
NEED_CHROMIUM = "need Debian's chromium"


def need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"{NEED_SHARED} — {path} is absent (the real profiler outputs are not copied into the project)")
    return path


def nccl_job(target: Path) -> Path:
    """A 2-rank NCCL job: the shared genuine A100 rank (cuda/nccl, 3 steps) and a copy of it
    labelled rank 1, two ranks that reach every collective at once."""
    import gzip
    import json
    import shutil

    shutil.copytree(need(CUDA / "nccl"), target)
    for folder, _, _ in os.walk(target):
        os.chmod(folder, os.stat(folder).st_mode | 0o200)
    doc = json.loads(gzip.decompress((target / "nccl_data.json.gz").read_bytes()))
    doc["distributedInfo"]["rank"] = 1
    (target / "nccl_data_rank1.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode()))
    return target


def skip_lines(reasons: list[str]) -> list[str]:
    """One line per skip reason with its count, most skipped first: ``412 tests need
    ../shared/data (or NPUMAGIC_SHARED)``. A reason groups by its text before " — " (the
    detail: which file, which path); a reason that is not a "need" reads ``N skipped: REASON``."""
    import collections

    counts = collections.Counter(reason.split(" — ")[0].strip() for reason in reasons)
    lines = []
    for what, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        tests = "test" if n == 1 else "tests"
        if what.startswith("need "):
            lines.append(f"{n} {tests} {'needs' if n == 1 else 'need'} {what[5:]}")
        else:
            lines.append(f"{n} skipped: {what}")
    return lines


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # (path, line, "Skipped: reason")
        reason = str(longrepr[2])
    else:
        reason = str(getattr(longrepr, "reprcrash", None) and longrepr.reprcrash.message or longrepr)
    return reason.removeprefix("Skipped: ")


def pytest_terminal_summary(terminalreporter):
    """Why tests were skipped, one line per reason with its count, instead of bare ``s``."""
    skipped = terminalreporter.stats.get("skipped", [])
    if not skipped:
        return
    terminalreporter.section("skipped, by reason", sep="-")
    for line in skip_lines([_skip_reason(r) for r in skipped]):
        terminalreporter.line(line)


@pytest.fixture(autouse=True)
def _shared_machine(monkeypatch):
    """The suite's other worker keeps a core busy, which calls a real capture contended and its
    comparisons never significant: tests judge other mechanics on known effects with the check
    off. The trust tests (tests/magics/test_trust.py, tests/analysis/test_verdict.py) turn it
    back on with :func:`trust_checked`."""
    monkeypatch.setenv("NPUMAGIC_CONTENDED_WAIT_PCT", "100")


@pytest.fixture
def trust_checked(monkeypatch):
    """The contention check at its default threshold."""
    monkeypatch.delenv("NPUMAGIC_CONTENDED_WAIT_PCT")


@pytest.fixture
def shell(tmp_path, monkeypatch):
    """The IPython shell with npumagic loaded, its history in a fresh directory."""
    from IPython.core.interactiveshell import InteractiveShell

    monkeypatch.chdir(tmp_path)
    ip = InteractiveShell.instance(colors="NoColor")
    ip.run_line_magic("load_ext", "npumagic")
    ip.run_line_magic("config", f"NpuMagics.output_dir = {str(tmp_path / 'runs')!r}")
    # figures cost ~0.5 s each: a test that looks at them turns them on (the `plots` fixture)
    ip.run_line_magic("config", "NpuMagics.plot = False")
    ip.run_cell("import torch, npumagic\ntorch.manual_seed(0)")
    yield ip
    ip.run_line_magic("unload_ext", "npumagic")
    # what %reset -f does to the namespace, without its two full gc.collect() passes (~1.5 s a
    # test once the suite's objects have piled up)
    hidden = ip.user_ns_hidden
    for key in [k for k in ip.user_ns if k not in hidden]:
        del ip.user_ns[key]
    # and the output cache's _, __ and ___ as the display hook holds them: where they differ from
    # the namespace's (a result shown while something had put `_` in builtins), IPython takes them
    # for the user's own and stops updating `_` for every later test in this process
    hook = ip.displayhook
    ip.user_ns.update({"_": getattr(hook, "_"), "__": getattr(hook, "__"), "___": getattr(hook, "___")})


@pytest.fixture
def plots(shell):
    """``shell`` drawing the figures after each run, as it does by default for a user."""
    shell.run_line_magic("config", "NpuMagics.plot = True")
    return shell


TRAIN_SETUP = """
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
iterations = 0
def train_step():
    global iterations
    x, y = torch.randn(16, 32), torch.randn(16, 1)
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward(); opt.step(); opt.zero_grad()
    iterations += 1
"""


@pytest.fixture
def trainer(shell):
    """``shell`` with a tiny real model, an optimizer and ``train_step()`` defined."""
    result = shell.run_cell(TRAIN_SETUP)
    assert result.success
    return shell


NOTEBOOKS = ROOT / "notebooks"


def run_notebook(name: str, cwd: Path):
    """Execute ``notebooks/name`` in a real Jupyter kernel (nbclient) in ``cwd``; the executed notebook."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    # executed headless and exported (test_browser's HTML): the static timeline, as the README asks
    # of `jupyter nbconvert --execute` (nbclient stores widget state, which HTML would show instead)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}).execute(
        env=dict(os.environ, NPUMAGIC_STATIC="1"))
    return nb


@pytest.fixture(scope="session")
def quickstart(tmp_path_factory):
    """The quickstart notebook, executed once for the notebook and browser tests: (notebook, cwd)."""
    cwd = tmp_path_factory.mktemp("quickstart")
    # its comparison of a known 7x change is checked whatever the suite's other worker does to
    # the machine (a contended run is never significant: tests/magics/test_trust.py)
    saved = os.environ.get("NPUMAGIC_CONTENDED_WAIT_PCT")
    os.environ["NPUMAGIC_CONTENDED_WAIT_PCT"] = "100"
    try:
        return run_notebook("quickstart.ipynb", cwd), cwd
    finally:
        if saved is None:
            os.environ.pop("NPUMAGIC_CONTENDED_WAIT_PCT")
        else:
            os.environ["NPUMAGIC_CONTENDED_WAIT_PCT"] = saved


WHEEL_CACHE = Path(os.environ.get("NPUMAGIC_WHEEL_CACHE", Path.home() / ".cache" / "npumagic-tests"))


def torch_npu_wheel() -> Path:
    """The real torch-npu 2.14.0 wheel (read, never installed): from the cache `.ci/run` fills,
    else downloaded there; the calling test skips, saying why, when neither works."""
    import subprocess
    import sys

    wheels = sorted(WHEEL_CACHE.glob("torch_npu-2.14.0-*.whl"))
    if not wheels:
        WHEEL_CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(WHEEL_CACHE),
                        "torch-npu==2.14.0"], capture_output=True, timeout=600)
        wheels = sorted(WHEEL_CACHE.glob("torch_npu-2.14.0-*.whl"))
    if not wheels:
        pytest.skip(f"need the torch-npu 2.14.0 wheel — not in {WHEEL_CACHE} and could not be downloaded "
                    "(.ci/run fetches it with `pip download --no-deps torch-npu==2.14.0`)")
    return wheels[0]


def profiled_loader_run(dataset, steps: int):
    """A real CPU run of ``steps`` profiled steps (after one waited and one warm-up step) of a small
    model fed by a DataLoader over ``dataset`` in the training process (num_workers=0, batches of
    two), analysed."""
    import tempfile

    import torch
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    import npumagic

    folder = tempfile.mkdtemp()
    batches = iter(torch.utils.data.DataLoader(dataset, batch_size=2))
    model = torch.nn.Linear(16, 4)
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=steps, repeat=1),
                 on_trace_ready=tensorboard_trace_handler(folder)) as prof:
        for _ in range(steps + 2):
            model(next(batches)).sum().backward()
            prof.step()
    return npumagic.analyze(folder)
