"""Regions and modules compared across two real runs with the step-level statistics: a model
whose last layer is four times as wide shows it in that layer (significantly slower), and the layer
before it, unchanged, is not called slower by the same factor. (Twice as wide read 1.18x once with
both cores busy: the two runs record one after the other, so a neighbour's load moves them apart.)"""

from __future__ import annotations

import pytest

from npumagic.analysis import sources
from npumagic.analysis.compare_parts import compare_parts
from npumagic.analysis.modules import modules
from npumagic.analysis.regions import regions

STEPS = 10


def record_model(out, width: int) -> None:
    """Sequential(Linear(256, 256), ReLU, Linear(256, width)) on batches of 512, trained STEPS steps under
    torch.profiler with modules (and stacks), inside record_function("forward_backward")."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, record_function, schedule, tensorboard_trace_handler

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one core: the other helpers' load moves both runs alike
    try:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, width))
        x = torch.randn(512, 256)
        with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=2, active=STEPS),
                     on_trace_ready=tensorboard_trace_handler(str(out)), with_modules=True, with_stack=True) as prof:
            for _ in range(STEPS + 2):
                with record_function("forward_backward"):
                    model(x).square().mean().backward()
                prof.step()
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def narrow_wide(tmp_path_factory):
    runs = []
    for width in (1024, 4096):
        out = tmp_path_factory.mktemp(f"width{width}")
        record_model(out, width)
        runs.append(sources.load(out))
    return runs


def test_widening_one_layer_shows_in_that_layer(narrow_wide):
    a, b = (modules(t.events, t.steps, t.meta.files) for t in narrow_wide)
    cmp = compare_parts(a, b, "narrow", "wide")
    assert cmp.what == "modules"
    rows = cmp.table.set_index(["pass", "path"])
    wide = rows.loc[("forward", "Sequential_0/Linear_1")]
    assert wide["measure"] == "host" and wide["significant"] and wide["verdict"] == "slower"
    assert wide["b_over_a"] > 1.3 and wide["ci_low"] > 1
    backward = rows.loc[("backward", "Sequential_0/Linear_1")]
    assert backward["significant"] and backward["verdict"] == "slower"
    same = rows.loc[("forward", "Sequential_0/Linear_0")]
    assert same["b_over_a"] < wide["b_over_a"]  # the unchanged layer moved less than the widened one
    assert cmp.changed()["path"].str.endswith("Linear_1").any()


def test_regions_compare_alike(narrow_wide):
    a, b = (regions(t.events, t.steps) for t in narrow_wide)
    cmp = compare_parts(a, b, "narrow", "wide")
    row = cmp.table.set_index("path").loc["forward_backward"]
    assert cmp.what == "regions" and row["pass"] == "" and row["significant"] and row["b_over_a"] > 1
