"""Every command's --json: one strict JSON document carrying the schema version, through the
real CLI in a subprocess; the result objects' .to_dict() give the same documents."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from npumagic.jsonout import SCHEMA

from .conftest import ASCEND, CUDA, need

LEVEL1 = ASCEND / "level1" / "rank0_ascend_pt"


def npumagic_json(*argv: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "npumagic.cli", *argv, "--json"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout, parse_constant=lambda c: pytest.fail(f"{c} is not strict JSON"))


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    from npumagic.session import Session

    out = tmp_path_factory.mktemp("history")
    Session(out).recorder.load(need(CUDA / "alexnet_sync"), name="sample")
    return out


def test_analyze_json():
    doc = npumagic_json("analyze", str(need(LEVEL1)), "--top", "3")
    assert (doc["schema"], doc["kind"]) == (SCHEMA, "analyze")
    assert doc["verdict"]["bottleneck"] == "communication" and len(doc["kernels"]) == 3
    assert doc["kernels_left_out"] > 0 and "step_median_us" in doc["headline"]


def test_advise_json():
    doc = npumagic_json("advise", str(need(LEVEL1)))
    assert (doc["schema"], doc["kind"], doc["bottleneck"]) == (SCHEMA, "advice", "communication")
    assert doc["findings"][0]["category"] == "communication"


def test_compare_json():
    a, b = need(LEVEL1), need(ASCEND / "level2" / "rank0_ascend_pt")
    doc = npumagic_json("compare", str(a), str(b))
    assert (doc["schema"], doc["kind"]) == (SCHEMA, "comparison")
    assert (doc["a"], doc["b"], doc["significant"]) == (str(a), str(b), False)
    assert doc["median_a_us"] > 0 and doc["verdict"].startswith("no difference")


def test_runs_json(history):
    doc = npumagic_json("runs", str(history))
    assert (doc["schema"], doc["kind"], doc["out"]) == (SCHEMA, "runs", str(history))
    assert [r["name"] for r in doc["runs"]] == ["sample"]


def test_runs_json_of_a_directory_without_history(tmp_path):
    doc = npumagic_json("runs", str(tmp_path))
    assert (doc["schema"], doc["runs"]) == (SCHEMA, [])


def test_export_json_names_the_files_written(history, tmp_path):
    md = tmp_path / "log.md"
    doc = npumagic_json("export", str(history), "--md", str(md))
    assert (doc["schema"], doc["kind"], doc["written"]) == (SCHEMA, "export", [str(md)])
    assert md.read_text().startswith("# npumagic troubleshooting log")
    run = doc["runs"][0]
    assert run["name"] == "sample" and run["verdict"]["bottleneck"] and run["headline"]["step_median_us"] > 0


def test_show_json_names_the_image_and_gives_the_view_data(tmp_path):
    out = tmp_path / "steps.png"
    doc = npumagic_json("show", str(need(LEVEL1)), "--steps", "-o", str(out))
    assert (doc["schema"], doc["kind"], doc["view"], doc["written"]) == (SCHEMA, "show", "steps", str(out))
    assert out.read_bytes()[:4] == b"\x89PNG"
    assert doc["table"] == "steps" and doc["data"][0]["wall_us"] > 0


def test_result_objects_give_the_same_documents():
    import npumagic
    from npumagic.analysis.advice import advise_run

    summary = npumagic.analyze(need(LEVEL1))
    verdict = npumagic.checklist(summary)
    for obj, kind in ((summary, "summary"), (verdict, "verdict"), (npumagic.advise(summary), "advice"),
                      (npumagic.compare(summary, summary, "a", "b"), "comparison")):
        doc = obj.to_dict()
        assert (doc["schema"], doc["kind"]) == (SCHEMA, kind)
        json.dumps(doc, allow_nan=False)
    cli = npumagic_json("advise", str(need(LEVEL1)))
    assert advise_run(summary, str(need(LEVEL1)), low=False).to_dict() == cli  # as the CLI advises without --all


def test_plain_floats_read_as_pandas_writes_them():
    # GIVEN floats of every size, ties at the 10th decimal among them WHEN written without pandas
    # (`npumagic runs --json`) THEN each reads back as DataFrame.to_json writes it
    import numpy as np
    import pandas as pd

    from npumagic.jsonout import fixed_float

    rng = np.random.default_rng(0)
    values = np.concatenate([rng.random(2000), rng.random(2000) * 1e6, rng.lognormal(0, 8, 2000), -rng.random(500),
                             [0.5e-10, 1.5e-10, 2.5e-10, 0.1, 1e16, 1e17, 1e-16, 0.0, 19.0191635]])
    written = [r["x"] for r in json.loads(pd.DataFrame({"x": values}).to_json(orient="records"))]
    assert [fixed_float(float(v)) for v in values] == written


def test_the_stored_headline_names_every_figure_the_summary_gives():
    # a figure renamed in Summary.headline must fail here, not blank a column of the exported log
    from npumagic.records import Headline

    from .conftest import CUDA, shared_summary

    figures = shared_summary(CUDA / "ns_resolution").headline
    kept = Headline.of(figures)
    assert kept.as_dict() == figures
    assert not set(kept.counters) & {"steps", "step_median_us", "device_util"}
    assert set(figures) - set(kept.counters) == {f for f in figures if getattr(kept, f, None) is not None}
