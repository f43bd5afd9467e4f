"""The example notebooks, executed in a real Jupyter kernel (nbclient + ipykernel)."""

from __future__ import annotations

import pytest

from .conftest import run_notebook as _run

pytestmark = pytest.mark.slow


def _text(cell) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if "text" in out:
            parts.append(out["text"])
        data = out.get("data", {})
        parts.append(data.get("text/plain", ""))
        parts.append(data.get("text/html", ""))
    return "\n".join(parts)


def test_quickstart_profiles_and_shows_the_verdict(quickstart):
    nb, cwd = quickstart
    baseline = _text(nb.cells[5])
    assert "npumagic baseline: ok" in baseline
    assert "Classify" in baseline and "data:image/png;base64" in baseline
    assert "('dataloader'," in _text(nb.cells[6])


def test_quickstart_fix_removes_the_dataloader_wait_it_was_profiled_for(quickstart):
    # No wall-clock threshold (the machine may be busy): the analysis of each captured trace must
    # see the sleep the baseline's dataset does (8 samples x 3 ms per batch, sleeps only overshoot)
    # and its absence after the fix, and the comparison must name the DataLoader change.
    from npumagic.history import HistoryStore

    nb, cwd = quickstart
    store = HistoryStore(cwd / "npumagic_runs")
    before = store.steps("baseline")["dataloader_us"].median()
    after = store.steps("fixed")["dataloader_us"].median()
    assert before >= 24_000
    assert after < before / 4
    assert "faster" in _text(nb.cells[9])


def test_quickstart_history_lists_both_runs(quickstart):
    nb, cwd = quickstart
    runs = _text(nb.cells[11])
    assert "baseline" in runs and "fixed" in runs
    assert (cwd / "npumagic_runs" / "history.sqlite").exists()
    assert "wall (ms)" in _text(nb.cells[12])


@pytest.fixture(scope="module")
def ascend_offline(tmp_path_factory):
    import os

    from .conftest import ASCEND, need

    need(ASCEND)
    os.environ["NPUMAGIC_SHARED"] = str(ASCEND.parents[1])  # the kernel inherits it
    cwd = tmp_path_factory.mktemp("ascend")
    return _run("ascend_offline.ipynb", cwd)


def _cell(nb, startswith: str):
    return next(c for c in nb.cells if c.cell_type == "code" and c.source.startswith(startswith))


def test_ascend_offline_classifies_the_job_and_compares_ranks(ascend_offline):
    nb = ascend_offline
    assert "npu on Ascend NPU, rank 0" in _text(_cell(nb, "summary = npumagic.analyze"))
    assert "slowest" in _text(_cell(nb, "summary.ranks"))
    assert "communication-bound" in _text(_cell(nb, "npumagic.checklist"))
    assert "105.99 ms per step" in _text(_cell(nb, "npumagic.advise"))
    assert "data:image/png;base64" in _text(_cell(nb, "%npushow rank0 --timeline"))
    assert "rank0" in _text(_cell(nb, "%npucompare")) and "kernel" in _text(_cell(nb, "%npucompare"))


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("reference")
    return _run("magics_reference.ipynb", cwd), cwd


def test_reference_runs_every_magic(reference):
    nb, cwd = reference
    magics = {"%%npuprofile", "%npusteps", "%npuruns", "%npunote", "%npubaseline", "%npurm", "%npushow", "%npuadvise",
              "%npucompare", "%npuhistory", "%npuexport", "%load_ext"}
    sources = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert all(m in sources for m in magics)
    assert (cwd / "troubleshooting.md").exists() and (cwd / "elsewhere").is_dir()


def test_reference_failing_cell_fails_and_is_recorded(reference):
    nb, _ = reference
    broken = _cell(nb, "%%npuprofile --wait 0 --warmup 0 --steps 5 --name broken")
    errors = [o for o in broken.outputs if o.output_type == "error"]
    assert errors and errors[0].ename == "RuntimeError" and "diverged at step 2" in errors[0].evalue
    runs = _text(_cell(nb, '%npunote line'))
    assert "removed options" in runs
    import re

    assert re.search(r"^broken\s.*failed", runs, re.M)
    assert not re.search(r"^options\s", runs, re.M)
    assert "batch 32, CPU" in runs
