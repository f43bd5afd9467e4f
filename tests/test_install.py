"""What a plain ``pip install -e .`` brings, resolved by pip itself as on a fresh machine
(``--dry-run --ignore-installed``: nothing is installed): the live timeline's anywidget, and none of
the test tools or the experiment trackers."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from .conftest import ROOT

pytestmark = pytest.mark.slow


def test_the_plain_install_brings_the_live_timeline_and_nothing_optional(tmp_path):
    # GIVEN the checkout WHEN pip resolves `pip install -e .` as if nothing were installed
    from importlib.metadata import version

    report = tmp_path / "report.json"
    torch = f"torch=={version('torch').split('+')[0]}"  # the torch here, not a newer one to fetch
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
                           "--report", str(report), torch, "-e", str(ROOT)], capture_output=True, text=True,
                          timeout=600)
    if done.returncode != 0 or not report.exists():
        pytest.skip(f"need a package index — pip could not resolve the install: {done.stderr.strip()[-300:]}")
    names = {item["metadata"]["name"].lower().replace("_", "-") for item in json.loads(report.read_text())["install"]}
    # THEN the widget and its Jupyter side come with it; JupyterLab, the browser driver and the trackers do not
    assert {"anywidget", "ipywidgets"} <= names
    assert not names & {"jupyterlab", "playwright", "mlflow", "mlflow-skinny", "wandb", "pytest"}, sorted(names)
