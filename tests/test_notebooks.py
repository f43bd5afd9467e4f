"""The example notebooks, executed in a real Jupyter kernel (nbclient + ipykernel)."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def _run(name: str, cwd: Path) -> nbformat.NotebookNode:
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}).execute()
    return nb


def _text(cell) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if "text" in out:
            parts.append(out["text"])
        data = out.get("data", {})
        parts.append(data.get("text/plain", ""))
        parts.append(data.get("text/html", ""))
    return "\n".join(parts)


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("quickstart")
    return _run("quickstart.ipynb", cwd), cwd


def test_quickstart_profiles_and_shows_the_verdict(quickstart):
    nb, cwd = quickstart
    baseline = _text(nb.cells[5])
    assert "npumagic baseline: ok" in baseline
    assert "Classify" in baseline and "data:image/png;base64" in baseline
    assert "('dataloader'," in _text(nb.cells[6])


def test_quickstart_fix_makes_the_step_faster(quickstart):
    nb, _ = quickstart
    text = _text(nb.cells[9])
    speedup = float(text.split("median step ")[1].split("x")[0])
    assert speedup > 2


def test_quickstart_history_lists_both_runs(quickstart):
    nb, cwd = quickstart
    runs = _text(nb.cells[11])
    assert "baseline" in runs and "fixed" in runs
    assert (cwd / "npumagic_runs" / "history.sqlite").exists()
    assert "wall_us" in _text(nb.cells[12])
