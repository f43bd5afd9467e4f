"""The live timeline in a real JupyterLab, in Debian's chromium driven by Playwright: the widget
appears under a %%npuprofile cell, a wheel zoom changes the visible window (and the kernel answers
it), hovering a lane shows an operator's name, the legend names the kinds drawn, a search and
"next" move the view to each match, W and D zoom and pan (never reaching JupyterLab's own keys), a
shift-drag shows the range's aggregate, a screenshot of the shared level1 job's view holds its
lanes, each rank's findings lane names its marks on hover, a click on a finding of %npuadvise
moves that view to the finding's mark, the Perfetto button writes a file Perfetto opens, and a critical
path walked after the first view is drawn when it arrives (the browser asks its view again), with
what its walk said shown under the view's legend, in no cell's output.
Screenshots are kept in the test's tmp dir (the CI artifact)."""

from __future__ import annotations

import json
import os
import re
import secrets
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from .conftest import ASCEND, NEED_CHROMIUM, NEED_SHARED, ROOT, TRAIN_SETUP

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
GUTTER = 190  # timeline.js: the lane labels' width; the plot starts here


def _browser() -> str:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{NEED_CHROMIUM} — no {CHROMIUM} (apt-get install -y chromium; .ci/run installs it)")
    try:
        subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--version"], capture_output=True, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"{NEED_CHROMIUM} — {CHROMIUM} cannot start: {exc}")
    return CHROMIUM


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# level1's view once more, its critical path walked only once the test writes RELEASE (a view whose
# lanes grow after its first answer)
RELEASE = "release_the_critical_path"
# what the walk says on the widget's own thread (as a walk that leaves a lane out says why)
LATE_NOTE = "timeline: said on the widget's own thread"
LATE_PATH_CELL = f"""import dataclasses, pathlib, time, npumagic
from npumagic.render.live import lod
from npumagic.render.live.said import say
_walk = lod.critical_spans
def _held(trace):
    while not pathlib.Path({RELEASE!r}).exists():
        time.sleep(0.2)
    say({LATE_NOTE!r})
    return _walk(trace)
lod.critical_spans = _held
_trace = npumagic.load({str(ASCEND / 'level1')!r})
# no path: not the run's open view, which a finding's click moves (that stays cell 2's)
_trace = dataclasses.replace(_trace, meta=dataclasses.replace(_trace.meta, path=""))
npumagic.timeline(_trace, live=True, title="late")"""


def _notebook(path: Path) -> None:
    import nbformat

    cells = ["%load_ext npumagic\n%config NpuMagics.output_dir = 'runs'\nimport torch\ntorch.manual_seed(0)" + TRAIN_SETUP,
             "%%npuprofile --repeat-cell --wait 0 --warmup 1 --steps 2 --name live\ntrain_step()"]
    if (ASCEND / "level1").exists():
        cells += [f"%npuload {ASCEND / 'level1'} --name level1", "%npuadvise level1 --all", LATE_PATH_CELL]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab on localhost with a token, serving a folder holding the test notebook."""
    pytest.importorskip("jupyterlab", reason="need the test extra (jupyterlab) — pip install -e '.[test]'")
    pytest.importorskip("anywidget", reason="need anywidget (a dependency of npumagic) — pip install -e .")
    home = tmp_path_factory.mktemp("lab")
    _notebook(home / "live.ipynb")
    port, token = _free_port(), secrets.token_hex(16)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               JUPYTER_RUNTIME_DIR=str(home / ".runtime"), MPLBACKEND="Agg")
    env.pop("NPUMAGIC_STATIC", None)
    log = open(home / "lab.log", "w")
    server = subprocess.Popen([sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
                               f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={home}", "--allow-root",
                               "--LabApp.expose_app_in_browser=True", "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
                              cwd=home, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            if server.poll() is not None:
                break
            try:
                urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2)
                break
            except OSError:
                time.sleep(1)
        else:
            pytest.fail(f"JupyterLab did not start: {(home / 'lab.log').read_text()[-2000:]}")
        yield url, token, home
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


# the notebook's kernel connected and idle: cells queued before then can be lost (CI once waited
# 300 s for a widget while no cell had run)
KERNEL_IDLE = """(() => { const w = window.jupyterapp.shell.currentWidget;
    const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
    return !!k && k.connectionStatus === 'connected' && k.status === 'idle'; })()"""
CELL_STARTED = "[...document.querySelectorAll('.jp-InputArea-prompt')].some(p => /\\[(\\*|\\d+)\\]/.test(p.textContent))"


def _run_all_cells(page, timeout_error) -> None:
    """Runs every cell, again once where none had started after two minutes."""
    for attempt in range(2):
        page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
        try:
            page.wait_for_function(CELL_STARTED, timeout=120_000)
            return
        except timeout_error:
            if attempt:
                raise


@pytest.fixture(scope="module")
def page(lab):
    """The notebook open in chromium, every cell run; the page, and where screenshots go."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="need the test extra (playwright) — pip install -e '.[test]'")
    browser_path = _browser()
    url, token, home = lab
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=browser_path, args=FLAGS, headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(f"{url}/lab/tree/live.ipynb?token={token}", wait_until="domcontentloaded", timeout=120_000)
        page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
        page.wait_for_function("window.jupyterapp && window.jupyterapp.commands.hasCommand('notebook:run-all-cells')",
                               timeout=120_000)
        page.wait_for_function(KERNEL_IDLE, timeout=120_000)
        news = page.get_by_role("button", name="No", exact=True)  # JupyterLab's news prompt would cover the view
        if news.count():
            news.first.click()
        _run_all_cells(page, sync_api.TimeoutError)
        page.wait_for_selector(".npumagic-live", timeout=300_000)
        # every cell run: a later cell's output arriving would move the widgets under the mouse
        widgets = 3 if (ASCEND / "level1").exists() else 1
        page.wait_for_function(f"document.querySelectorAll('.npumagic-live').length >= {widgets}", timeout=300_000)
        page.wait_for_function("!document.querySelector('.jp-Notebook-ExecutionIndicator[data-status=\"busy\"]')",
                               timeout=300_000)
        yield page, home
        browser.close()


def _state(root) -> dict:
    return root.evaluate("el => ({t0: +el.dataset.t0, t1: +el.dataset.t1, answered: +el.dataset.answered, "
                         "items: +el.dataset.items, lanes: +el.dataset.lanes})")


def _answered_since(page, root, seq: int) -> dict:
    deadline = time.time() + 60
    while time.time() < deadline:
        state = _state(root)
        if state["answered"] > seq:
            return state
        page.wait_for_timeout(200)
    pytest.fail(f"the kernel did not answer the view (last answer {seq})")


def _settled(page, root) -> dict:
    """The view once the kernel has answered the latest window the browser asked for (a late
    answer to an earlier test's zoom or pan can no longer pass for it)."""
    deadline = time.time() + 60
    while time.time() < deadline:
        state = root.evaluate("el => ({t0: +el.dataset.t0, t1: +el.dataset.t1, answered: +el.dataset.answered, "
                              "asked: +el.dataset.asked})")
        if state["answered"] >= state["asked"] > 0:
            return state
        page.wait_for_timeout(200)
    pytest.fail(f"the kernel did not answer the latest view: {root.evaluate('el => ({...el.dataset})')}")


def _whole_run(page, root) -> dict:
    """Double-click (the whole run again) and wait for that window's own answer."""
    root.locator("canvas").dblclick()
    state = _settled(page, root)
    extent = root.evaluate("el => el.dataset.extent.split(',').map(Number)")
    assert (state["t0"], state["t1"]) == tuple(extent)
    return state


def _level1_whole_run(page):
    """The level1 job's view (cell 2), scrolled to and showing the whole run."""
    root = page.locator(".jp-Cell").nth(2).locator(".npumagic-live")
    root.scroll_into_view_if_needed()
    _whole_run(page, root)
    return root


def test_the_widget_appears_under_the_cell_and_is_answered_by_the_kernel(page):
    page, _ = page
    root = page.locator(".jp-Cell").nth(1).locator(".npumagic-live")
    root.wait_for(timeout=60_000)
    state = _answered_since(page, root, 0)
    assert state["lanes"] >= 1 and state["t1"] > state["t0"] and state["items"] > 0
    assert root.locator("canvas").bounding_box()["width"] > 600


def test_a_wheel_zoom_changes_the_visible_window(page):
    page, home = page
    root = page.locator(".jp-Cell").nth(1).locator(".npumagic-live")
    before = _answered_since(page, root, 0)
    canvas = root.locator("canvas")
    after = None
    for _ in range(3):  # a wheel that lands while JupyterLab still lays the output out is lost: scroll again
        canvas.scroll_into_view_if_needed()
        box = canvas.bounding_box()
        page.mouse.move(box["x"] + GUTTER + (box["width"] - GUTTER) / 2, box["y"] + 40)
        page.mouse.wheel(0, -400)
        deadline = time.time() + 20
        while time.time() < deadline and _state(root)["answered"] <= before["answered"]:
            page.wait_for_timeout(200)
        if _state(root)["answered"] > before["answered"]:
            after = _state(root)
            break
    assert after is not None, "no wheel zoom was answered by the kernel"
    assert after["t1"] - after["t0"] < 0.8 * (before["t1"] - before["t0"])
    assert before["t0"] <= after["t0"] and after["t1"] <= before["t1"]
    root.screenshot(path=str(home / "zoomed.png"))


# Turns of the wheel timed from the event to the repaint that draws the kernel's answer to it
# (the target, issue 44: p95 under 150 ms); printed and kept beside the screenshots, never asserted
WHEEL_TURNS = 40
WHEEL_TO_ANSWER = """async (el, n) => {
  const canvas = el.querySelector("canvas"), box = canvas.getBoundingClientRect();
  const at = {clientX: box.left + 190 + (box.width - 190) / 2, clientY: box.top + 40, bubbles: true, cancelable: true};
  const answered = want => new Promise(done => {
    if (+el.dataset.answered >= want) return done(true);
    const seen = new MutationObserver(() => { if (+el.dataset.answered >= want) { seen.disconnect(); done(true); } });
    seen.observe(el, {attributes: true, attributeFilter: ["data-answered"]});
    setTimeout(() => { seen.disconnect(); done(false); }, 30000);
  });
  const out = [];
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    canvas.dispatchEvent(new WheelEvent("wheel", {...at, deltaY: i % 2 ? 300 : -300}));
    const ok = await answered(+el.dataset.asked);
    await new Promise(r => requestAnimationFrame(() => r()));  // the answered frame on screen
    out.push(ok ? performance.now() - t : null);
  }
  return out;
}"""


def _wheel_to_answer_ms(root) -> list[float | None]:
    return root.evaluate(WHEEL_TO_ANSWER, WHEEL_TURNS)


def test_each_turn_of_the_wheel_is_answered_and_its_latency_is_kept(page):
    page, home = page
    figures = {}
    for name, cell in (("cpu run", 1), ("level1 job", 2)):
        root = page.locator(".jp-Cell").nth(cell).locator(".npumagic-live")
        if not root.count():
            continue
        root.scroll_into_view_if_needed()
        _whole_run(page, root)
        ms = _wheel_to_answer_ms(root)
        assert None not in ms, f"{name}: {ms.count(None)} of {len(ms)} turns of the wheel never answered"
        assert _settled(page, root)["answered"] >= 1
        figures[name] = {"turns": len(ms), "p50_ms": round(float(np.percentile(ms, 50)), 1),
                         "p95_ms": round(float(np.percentile(ms, 95)), 1), "max_ms": round(max(ms), 1),
                         "load_average": round(os.getloadavg()[0], 2)}
        _whole_run(page, root)
    assert figures
    (home / "wheel_to_answer.json").write_text(json.dumps(figures, indent=1))
    print(f"\nwheel to answered repaint (target p95 < 150 ms): {json.dumps(figures)}")


def test_hovering_a_lane_shows_an_operators_name(page):
    page, _ = page
    root = page.locator(".jp-Cell").nth(1).locator(".npumagic-live")
    _whole_run(page, root)
    box = root.locator("canvas").bounding_box()
    tip = root.locator(".npumagic-tip")
    seen = []
    for y in range(30, min(int(box["height"]) - 30, 200), 6):
        for k in range(40):
            page.mouse.move(box["x"] + GUTTER + 2 + k * (box["width"] - GUTTER - 4) / 40, box["y"] + y)
            if tip.is_visible():
                seen.append(tip.inner_text().splitlines()[0])
                if re.search(r"\w::\w|\w\.\w", seen[-1]):
                    return
    pytest.fail(f"no operator name on hover; the tooltips read {seen[:10]}")


def test_the_legend_names_the_kinds_drawn(page):
    page, _ = page
    root = page.locator(".jp-Cell").nth(1).locator(".npumagic-live")
    items = root.locator(".npumagic-legend-item")
    kinds = [items.nth(k).get_attribute("data-kind") for k in range(items.count())]
    # the CPU run's lanes are host threads: host operators at least, each entry with its label
    assert "host_op" in kinds and items.nth(kinds.index("host_op")).inner_text().strip() == "host operator"
    assert root.locator(".npumagic-legend").is_visible()


def _wait_dataset(page, root, key: str, value: int) -> None:
    deadline = time.time() + 60
    while time.time() < deadline:
        if root.evaluate(f"el => +(el.dataset.{key} || 0)") == value:
            return
        page.wait_for_timeout(200)
    pytest.fail(f"{key} never became {value}: {root.evaluate('el => ({...el.dataset})')}")


def _match(root) -> tuple[float, float]:
    return tuple(root.evaluate("el => [+el.dataset.matchStart, +el.dataset.matchEnd]"))


def test_a_search_and_next_move_the_view_to_each_match(page):
    page, home = page
    root = page.locator(".jp-Cell").nth(1).locator(".npumagic-live")
    whole = _whole_run(page, root)
    # WHEN the model's first Linear layer (aten::addmm, once a step forward) is searched for
    box = root.locator(".npumagic-search")
    box.fill("aten::addmm")
    box.press("Enter")
    _wait_dataset(page, root, "at", 1)  # the kernel sends the view before the count
    first, match = _state(root), _match(root)
    count = root.evaluate("el => +el.dataset.found")
    # THEN the count is shown and the view closes in on the first match: it, and as much again either side
    assert count >= 2 and root.locator(".npumagic-found").inner_text().startswith(f"1 of {count}: aten::addmm")
    assert first["t0"] < match[0] < match[1] < first["t1"], (first, match)
    assert whole["t0"] <= match[0] < match[1] <= whole["t1"], (whole, match)
    assert first["t1"] - first["t0"] == pytest.approx(3 * max(match[1] - match[0], 0.001), rel=1e-3)
    # WHEN "next" is pressed THEN the view moves on, to the next match
    root.locator(".npumagic-next").click()
    _wait_dataset(page, root, "at", 2)
    second, later = _state(root), _match(root)
    assert later[0] > match[1] and second["t0"] < later[0] < later[1] < second["t1"]
    root.screenshot(path=str(home / "search.png"))


def test_a_click_on_an_operator_is_answered_with_its_flows(page):
    page, _ = page
    root = page.locator(".jp-Cell").nth(1).locator(".npumagic-live")
    # GIVEN the view on the search's match (an aten::addmm, one row below its aten::linear)
    view, match = _state(root), _match(root)
    box = root.locator("canvas").bounding_box()
    x = GUTTER + (box["width"] - GUTTER) * ((match[0] + match[1]) / 2 - view["t0"]) / (view["t1"] - view["t0"])
    # WHEN it is clicked
    root.locator("canvas").click(position={"x": x, "y": 22 + 16 + 8})
    # THEN the kernel's answer names it (a CPU run: no launch to draw)
    deadline = time.time() + 60
    panel = root.locator(".npumagic-selection")
    while time.time() < deadline and not panel.inner_text().startswith("aten::addmm: "):
        page.wait_for_timeout(200)
    assert panel.inner_text().startswith("aten::addmm: "), panel.inner_text()


def test_w_and_d_zoom_and_pan_without_reaching_jupyterlab(page):
    page, _ = page
    cells = page.locator(".jp-Cell").count()
    root = page.locator(".jp-Cell").nth(1).locator(".npumagic-live")
    root.locator("canvas").dblclick()
    before = _answered_since(page, root, 0)
    root.locator("canvas").click(position={"x": GUTTER + 100, "y": 30})  # focus the view
    page.keyboard.press("w")
    zoomed = _answered_since(page, root, before["answered"])
    assert zoomed["t1"] - zoomed["t0"] < 0.9 * (before["t1"] - before["t0"])
    page.keyboard.press("d")
    page.keyboard.press("d")  # D, D deletes a cell in JupyterLab's command mode
    panned = _answered_since(page, root, zoomed["answered"] + 1)
    assert panned["t0"] > zoomed["t0"]
    assert page.locator(".jp-Cell").count() == cells


def test_a_shift_drag_shows_the_ranges_aggregate_from_the_kernel(page):
    page, home = page
    root = page.locator(".jp-Cell").nth(1).locator(".npumagic-live")
    _whole_run(page, root)  # the earlier tests' zoom and pan undone, and answered
    box = root.locator("canvas").bounding_box()
    y = box["y"] + 30
    page.keyboard.down("Shift")
    # (nearly) the whole run: a narrow range of a loaded machine's run may hold no operator at all
    page.mouse.move(box["x"] + GUTTER + 5, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] - 5, y, steps=5)
    page.mouse.up()
    page.keyboard.up("Shift")
    _wait_dataset(page, root, "selected", 1)
    text = root.locator(".npumagic-selection").inner_text()
    assert text.startswith("selected ") and re.search(r"rank 0: host busy \d+%", text), text
    assert "top operators: " in text
    # and it is that range's, computed from the run's saved events: the busy share of the host
    # operators' union, and every line as the kernel's aggregate of the same range writes it
    import numpy as np

    import npumagic
    from npumagic.analysis.intervals import Spans
    from npumagic.render.live.lod import TimelineIndex
    from npumagic.render.live.selection import aggregate

    t0, t1 = root.evaluate("el => [+el.dataset.selT0, +el.dataset.selT1]")
    trace = npumagic.load(home / "runs" / "live")
    ev = trace.events[(trace.events["kind"] == "host_op").to_numpy()]
    origin, lo, hi = int(trace.steps["start_ns"].min()), int(round(t0 * 1e6)), int(round(t1 * 1e6))
    s = np.clip(ev["ts_ns"].to_numpy() - origin, lo, hi)
    e = np.clip(ev["ts_ns"].to_numpy() + ev["dur_ns"].to_numpy() - origin, lo, hi)
    busy = Spans.union_of(s, e).total / (hi - lo)
    assert f"rank 0: host busy {busy:.0%}," in text
    assert text.splitlines() == aggregate(TimelineIndex.build(trace), t0, t1)["lines"]


def _groups(root) -> dict:
    """Each regions or modules header: {"rank:group": (y, lanes drawn under it)}."""
    text = root.evaluate("el => el.dataset.groups || ''")
    return {f"{r}:{g}": (float(y), int(n)) for r, g, y, n in (item.split(":") for item in text.split(",") if item)}


def test_the_regions_group_shows_and_folds_into_one_row(page):
    page, home = page
    root = page.locator(".jp-Cell").nth(1).locator(".npumagic-live")
    _whole_run(page, root)
    canvas = root.locator("canvas")
    canvas.scroll_into_view_if_needed()
    # GIVEN the CPU run's regions group (the optimizer's step and zero_grad annotations, torch's
    # own: dimmed), under the host thread's lanes, its lane unfolded
    groups = _groups(root)
    assert "0:regions" in groups and groups["0:regions"][1] >= 1, groups
    y, _ = groups["0:regions"]
    tall = canvas.bounding_box()["height"]
    root.screenshot(path=str(home / "regions.png"))
    # WHEN its header is clicked THEN it folds into that one row and the view gets shorter
    canvas.click(position={"x": 20, "y": y + 6})
    page.wait_for_function("el => el.dataset.folded === '0:regions'", arg=root.element_handle(), timeout=10_000)
    assert _groups(root)["0:regions"] == (y, 0) and canvas.bounding_box()["height"] < tall
    root.screenshot(path=str(home / "regions_folded.png"))
    # and the row still holds the outermost regions: hovering it names one (ProfilerStep#N), with
    # its tree path and duration from the kernel
    box, tip, seen = canvas.bounding_box(), root.locator(".npumagic-tip"), []
    for k in range(40):
        page.mouse.move(box["x"] + GUTTER + 2 + k * (box["width"] - GUTTER - 4) / 40, box["y"] + y + 8)
        if tip.is_visible():
            seen.append(tip.inner_text())
            if seen[-1].startswith("ProfilerStep#"):
                break
    assert seen and seen[-1].startswith("ProfilerStep#"), seen[:5]
    page.wait_for_function("el => el.querySelector('.npumagic-tip').innerText.includes('path ProfilerStep#')",
                           arg=root.element_handle(), timeout=10_000)
    assert re.search(r"annotation: [\d.,]+ (ms|µs) from", tip.inner_text()), tip.inner_text()
    # WHEN clicked again THEN its lane comes back at its place
    page.mouse.move(box["x"] + 5, box["y"] + 5)
    canvas.click(position={"x": 20, "y": y + 6})
    page.wait_for_function("el => el.dataset.folded === ''", arg=root.element_handle(), timeout=10_000)
    assert _groups(root) == groups and canvas.bounding_box()["height"] == tall


@pytest.mark.skipif(not (ASCEND / "level1").exists(), reason=f"{NEED_SHARED} — {ASCEND / 'level1'} is absent")
def test_each_ranks_critical_path_shows_under_its_lanes_and_says_what_bounds_it(page):
    page, home = page
    root = _level1_whole_run(page)
    # GIVEN the two-rank job's view: a critical path group per rank, the last of its rank's groups
    groups = _groups(root)
    heads = [float(y) for y in root.evaluate("el => el.dataset.heads").split(",")]
    assert groups["0:critical"][1] == 1 and groups["1:critical"][1] == 1, groups
    assert all(y < groups["0:critical"][0] for key, (y, _) in groups.items() if key.startswith("0:") and key != "0:critical")
    assert heads[0] < groups["0:critical"][0] < heads[1] < groups["1:critical"][0]
    # WHEN its lane is hovered across THEN each tooltip names an operator, kernel or wait of rank 0's path
    _hover_rank0_critical_path(page, root, groups, home / "critical_path.png")


def _hover_rank0_critical_path(page, root, groups: dict, shot: Path) -> None:
    """Hover across rank 0's critical-path lane of level1's view: each tooltip names an operator,
    kernel or wait of that rank's path (and a screenshot is kept at ``shot``)."""
    import npumagic
    from npumagic.render.live.critical import critical_spans

    spans = critical_spans(npumagic.load(ASCEND / "level1"))
    names = set(spans.loc[spans["rank"] == 0, "name"])
    canvas, tip, seen = root.locator("canvas"), root.locator(".npumagic-tip"), []
    y = groups["0:critical"][0] + 16 + 6  # the lane's first row, under the group's header
    box = _at_row(page, canvas, y)
    for k in range(60):
        page.mouse.move(box["x"] + GUTTER + 2 + k * (box["width"] - GUTTER - 4) / 60, box["y"] + y)
        if tip.is_visible():
            seen.append(tip.inner_text())
    root.screenshot(path=str(shot))
    said = [re.sub(r" \([^()]*\)$", "", t.splitlines()[0]) for t in seen]  # "NAME (its kind)"
    assert said and set(said) <= names, (said[:5], sorted(names)[:5])


def _colored_bands(png: Path) -> int:
    """Horizontal bands of the plot area holding coloured (not grey) pixels: the drawn lanes."""
    import numpy as np
    from PIL import Image

    rgb = np.asarray(Image.open(png).convert("RGB"), dtype=np.int16)[:, GUTTER + 2:]
    colored = (rgb.max(axis=2) - rgb.min(axis=2) > 60).sum(axis=1) > 3
    return int((colored[1:] & ~colored[:-1]).sum() + colored[0])


@pytest.mark.skipif(not (ASCEND / "level1").exists(), reason=f"{NEED_SHARED} — {ASCEND / 'level1'} is absent")
def test_a_screenshot_of_the_level1_job_shows_its_lanes(page):
    page, home = page
    root = page.locator(".jp-Cell").nth(2).locator(".npumagic-live")
    root.wait_for(timeout=120_000)
    state = _answered_since(page, root, 0)
    root.scroll_into_view_if_needed()
    shot = home / "level1_live.png"
    root.screenshot(path=str(shot))
    assert state["lanes"] >= 6  # two ranks: host threads, streams, collectives
    assert _colored_bands(shot) >= state["lanes"] // 2
    (home / "level1_state.json").write_text(json.dumps(state))


@pytest.mark.skipif(not (ASCEND / "level1").exists(), reason=f"{NEED_SHARED} — {ASCEND / 'level1'} is absent")
def test_a_click_on_a_ranks_header_collapses_its_group(page):
    page, _ = page
    root = page.locator(".jp-Cell").nth(2).locator(".npumagic-live")
    root.scroll_into_view_if_needed()
    canvas = root.locator("canvas")
    tall = canvas.bounding_box()["height"]
    heads = [float(y) for y in root.evaluate("el => el.dataset.heads").split(",")]
    assert len(heads) == 2  # rank 0 and rank 1
    # WHEN rank 0's header is clicked THEN its lanes go, rank 1's header moves up to below it
    canvas.click(position={"x": 20, "y": heads[0] + 8})
    page.wait_for_function("el => el.dataset.collapsed === '0'", arg=root.element_handle(), timeout=10_000)
    after = [float(y) for y in root.evaluate("el => el.dataset.heads").split(",")]
    assert after[0] == heads[0] and after[1] < heads[1] and canvas.bounding_box()["height"] < tall
    # and a second click brings them back
    canvas.click(position={"x": 20, "y": heads[0] + 8})
    page.wait_for_function("el => el.dataset.collapsed === ''", arg=root.element_handle(), timeout=10_000)
    assert [float(y) for y in root.evaluate("el => el.dataset.heads").split(",")] == heads


def _at_row(page, canvas, y: float) -> dict:
    """The canvas scrolled so that its row at ``y`` (px from its top) is in the window; its box."""
    canvas.evaluate("(c, y) => { let p = c.parentElement; while (p && p.scrollHeight <= p.clientHeight) p = p.parentElement;"
                    " if (p) p.scrollTop += c.getBoundingClientRect().top + y - 400; }", y)
    page.wait_for_timeout(300)
    return canvas.bounding_box()


@pytest.mark.skipif(not (ASCEND / "level1").exists(), reason=f"{NEED_SHARED} — {ASCEND / 'level1'} is absent")
def test_a_zoomed_memory_lane_shows_each_allocation_and_free(page):
    page, home = page
    root = _level1_whole_run(page)
    canvas, tip = root.locator("canvas"), root.locator(".npumagic-tip")
    heads = [float(y) for y in root.evaluate("el => el.dataset.heads").split(",")]
    # rank 0's memory lane: where hovering reads its samples ("NPU:0 allocated: 1,234 MiB")
    row, start = None, int(heads[0]) + 10
    for y in range(start, int(heads[1]), 3):
        if (y - start) % 60 == 0:  # the rows below in the window
            box = _at_row(page, canvas, y)
        page.mouse.move(box["x"] + GUTTER + (box["width"] - GUTTER) / 2, box["y"] + y)
        if tip.is_visible() and tip.inner_text().startswith("NPU:0 allocated: "):
            row = y
            break
    assert row is not None, "no memory lane under rank 0"
    pta = pd.read_csv(ASCEND / "level1" / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "memory_record.csv")
    pta = pta[pta["Component"] == "PTA"]
    totals = pta.iloc[np.argsort(pta["Timestamp(us)"].astype(str).str.strip().astype(float), kind="stable")][
        "Total Allocated(MB)"].to_numpy(float)
    moves = re.compile(r"NPU:0 allocated ([\d,.]+) MiB after (an allocation|a free) of ([\d,.]+) (MiB|KiB)")
    for _ in range(4):  # zoomed in until the view holds few enough samples to draw them one by one
        box = _at_row(page, canvas, row)
        x = box["x"] + GUTTER + (box["width"] - GUTTER) / 2
        page.mouse.move(x, box["y"] + row)
        asked = _state(root)["answered"]
        page.mouse.wheel(0, -400)
        _answered_since(page, root, asked)
        _settled(page, root)
        for k in range(240):
            page.mouse.move(box["x"] + GUTTER + 2 + k * (box["width"] - GUTTER - 4) / 240, box["y"] + row)
            found = moves.fullmatch(tip.inner_text()) if tip.is_visible() else None
            if found:
                root.screenshot(path=str(home / "memory_moves.png"))
                after, size = float(found[1].replace(",", "")), float(found[3].replace(",", ""))
                assert np.abs(totals - after).min() <= (0.5 if after >= 100 else 0.005)  # a sample of the CSV
                steps = np.abs(np.diff(totals)) * (1024 if found[4] == "KiB" else 1)
                assert np.abs(steps - size).min() <= (0.5 if size >= 100 else 0.005)  # one of its changes
                return
    pytest.fail("no allocation or free under the cursor on the zoomed memory lane")


def _findings_lanes(root) -> dict[int, float]:
    """Each rank's findings lane: its y from the canvas's top."""
    return {int(r): float(y) for r, y in (item.split(":") for item in root.evaluate("el => el.dataset.marks").split(","))}


def _mark_tips(page, root, y: float, columns: int) -> list[str]:
    """The tooltips read hovering ``columns`` points across the row at ``y``."""
    box, tip, seen = _at_row(page, root.locator("canvas"), y), root.locator(".npumagic-tip"), []
    for k in range(columns):
        page.mouse.move(box["x"] + GUTTER + 2 + k * (box["width"] - GUTTER - 4) / columns, box["y"] + y + 8)
        if tip.is_visible():
            seen.append(tip.inner_text())
    return seen


@pytest.mark.skipif(not (ASCEND / "level1").exists(), reason=f"{NEED_SHARED} — {ASCEND / 'level1'} is absent")
def test_each_ranks_findings_lane_names_its_marks_on_hover(page):
    page, home = page
    root = _level1_whole_run(page)
    # GIVEN the two-rank job's view: a findings lane per rank, under its other lanes
    lanes = _findings_lanes(root)
    heads = [float(y) for y in root.evaluate("el => el.dataset.heads").split(",")]
    assert sorted(lanes) == [0, 1] and heads[0] < lanes[0] < heads[1] < lanes[1]
    # WHEN hovered across THEN each tooltip is a mark of that rank, as computed from the trace
    import npumagic
    from npumagic.analysis.marks import marks

    table = marks(npumagic.load(ASCEND / "level1"))
    for rank, y in lanes.items():
        seen = _mark_tips(page, root, y, 120)
        own = set(table.loc[table["rank"] == rank, "label"])
        assert seen and set(seen) <= own, (rank, seen[:5])
        assert any(t.startswith("device idle ") for t in seen), seen[:5]
    root.screenshot(path=str(home / "findings_lanes.png"))


@pytest.mark.skipif(not (ASCEND / "level1").exists(), reason=f"{NEED_SHARED} — {ASCEND / 'level1'} is absent")
def test_a_click_on_a_finding_of_npuadvise_moves_the_live_view_there(page):
    page, home = page
    root = page.locator(".jp-Cell").nth(2).locator(".npumagic-live")
    advice = page.locator(".jp-Cell").nth(3).locator(".npumagic-advice")
    advice.wait_for(timeout=60_000)
    whole = _whole_run(page, root)
    # GIVEN the advice's host-bound finding (a button on its row, as on every finding's)
    assert advice.locator(".npumagic-show-finding").count() == advice.locator("table tbody tr").count() >= 2
    button = advice.locator(".npumagic-show-finding[data-rule='host_bound']")
    rank = int(button.get_attribute("data-ranks").split(",")[0])
    # WHEN it is clicked
    button.click()
    page.wait_for_function("el => el.dataset.shown", arg=root.element_handle(), timeout=60_000)
    view = _settled(page, root)
    # THEN the run's view above shows its device's longest idle gap inside a step (found here by
    # a plain walk of the events), with as much again either side, and the advice says which
    import npumagic

    from .render.test_live_findings import largest_idle

    trace = npumagic.load(ASCEND / "level1")
    a, b = largest_idle(trace, rank)
    origin = int(trace.steps["start_ns"].min())
    label = root.evaluate("el => el.dataset.shown")
    assert label.startswith(f"device idle {(b - a) / 1e6:,.3f} ms: "), label
    assert (view["t0"], view["t1"]) == pytest.approx(((2 * a - b - origin) / 1e6, (2 * b - a - origin) / 1e6), abs=1e-6)
    assert view["t1"] - view["t0"] < 0.5 * (whole["t1"] - whole["t0"])
    page.wait_for_function("el => el.dataset.shown", arg=advice.element_handle(), timeout=10_000)
    assert advice.evaluate("el => el.dataset.shown") == label
    assert advice.locator(".npumagic-advice-status").inner_text() == f"timeline: {label}"
    assert page.locator(".jp-Cell").nth(3).locator(".npumagic-live").count() == 0  # moved, none opened
    # scrolled into sight inside the notebook, JupyterLab's own panels where they were
    lanes = _findings_lanes(root)
    y = root.locator("canvas").bounding_box()["y"] + lanes[rank]
    assert 0 < y < page.viewport_size["height"] and page.locator("#jp-top-panel").bounding_box()["y"] == 0
    # and hovering the outlined mark's middle in its rank's findings lane names it
    tip = root.locator(".npumagic-tip")
    box = _at_row(page, root.locator("canvas"), lanes[rank])
    page.mouse.move(box["x"] + GUTTER + (box["width"] - GUTTER) / 2, box["y"] + lanes[rank] + 8)
    page.wait_for_function("el => el.querySelector('.npumagic-tip').style.display === 'block'",
                           arg=root.element_handle(), timeout=10_000)
    assert tip.inner_text() == label
    page.screenshot(path=str(home / "finding_shown.png"))


def _trace_processor_slices(path: Path) -> tuple[int, list[str]] | None:
    """(slices, step slices' names) as Perfetto's trace_processor reads the file; None where it
    cannot run (the ``perfetto`` package missing, or its binary, which it downloads, absent)."""
    try:
        from perfetto.trace_processor import TraceProcessor
    except ImportError:
        return None
    try:
        tp = TraceProcessor(trace=str(path))
    except Exception:  # noqa: BLE001 - no binary here: fall back on the format's own check
        return None
    try:
        count = next(iter(tp.query("select count(*) as n from slice"))).n
        steps = [r.name for r in tp.query("select slice.name from slice join thread_track on slice.track_id = "
                                          "thread_track.id join thread using (utid) where thread.name = 'steps' "
                                          "order by slice.ts")]
        return count, steps
    finally:
        tp.close()


def test_the_perfetto_button_writes_a_file_perfetto_opens(page):
    page, home = page
    root = page.locator(".jp-Cell").nth(1).locator(".npumagic-live")
    root.scroll_into_view_if_needed()
    # WHEN the view's Perfetto button is clicked
    root.locator(".npumagic-export").click()
    page.wait_for_function("el => el.dataset.exported", arg=root.element_handle(), timeout=120_000)
    # THEN the kernel wrote the run as a file, in its working folder, and said so under the view
    path = Path(root.evaluate("el => el.dataset.exported"))
    written = path if path.is_absolute() else home / path
    assert written == home / "live.perfetto.json" and written.is_file()  # named after the run
    said = root.locator(".npumagic-selection").inner_text()
    assert said.startswith(f"wrote {path}: ") and "open it in https://ui.perfetto.dev" in said
    import npumagic

    trace = npumagic.load(home / "runs" / "live")
    steps = [f"step {s}" for s in trace.steps["step"]]
    opened = _trace_processor_slices(written)
    doc = json.loads(written.read_bytes())
    events = doc["traceEvents"]
    processes = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    slices = [e for e in events if e["ph"] == "X"]
    ours = [e for e in slices if processes[e["pid"]].endswith(": npumagic")]  # steps, gaps: npumagic's tracks
    # its slices: every event of the run, and its steps on a track of their own (as trace_processor
    # counts them where it runs; here from the Trace Event Format's own fields)
    assert re.search(rf"wrote .*: {len(trace.events):,} slices, {len(steps)} steps", said), said
    assert len(slices) - len(ours) == len(trace.events)
    assert [e["name"] for e in ours if threads[(e["pid"], e["tid"])] == "steps"] == steps
    if opened is not None:
        assert opened[0] == len(slices) and opened[1] == steps


@pytest.mark.parametrize("static", [False, True], ids=["saved-without-widget-state", "NPUMAGIC_STATIC=1"])
def test_a_notebook_exported_to_html_shows_the_png_timeline(tmp_path, monkeypatch, static):
    """Saved as JupyterLab saves it by default (no widget state), or executed with NPUMAGIC_STATIC=1
    (what `jupyter nbconvert --execute` needs: it stores widget state), the HTML has the PNG."""
    import nbformat
    from nbclient import NotebookClient
    from nbconvert import HTMLExporter

    _notebook(tmp_path / "live.ipynb")
    nb = nbformat.read(tmp_path / "live.ipynb", as_version=4)
    nb.cells = nb.cells[:2]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    if static:
        monkeypatch.setenv("NPUMAGIC_STATIC", "1")
    else:
        monkeypatch.delenv("NPUMAGIC_STATIC", raising=False)
    # GIVEN the notebook executed in a real kernel (where widget_frontend() holds unless NPUMAGIC_STATIC)
    NotebookClient(nb, timeout=600, kernel_name="python3", store_widget_state=static,
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    data = nb.cells[1].outputs[-1]["data"]
    assert ("application/vnd.jupyter.widget-view+json" in data) is not static
    # WHEN it is exported to HTML
    body, _ = HTMLExporter(template_name="lab").from_notebook_node(nb)
    # THEN the timeline is there as the PNG
    assert re.search(r"<img alt=[\"']timeline[\"']", body)
    assert '<script type="application/vnd.jupyter.widget-view+json">' not in body


@pytest.mark.skipif(not (ASCEND / "level1").exists(), reason=f"{NEED_SHARED} — {ASCEND / 'level1'} is absent")
def test_a_critical_path_walked_after_the_first_view_is_drawn_when_it_arrives(page):
    page, home = page
    root = page.locator(".jp-Cell").nth(4).locator(".npumagic-live")
    root.scroll_into_view_if_needed()
    # GIVEN level1's view answered while its critical path is still being walked: no path lanes
    first = _answered_since(page, root, 0)
    assert not [key for key in _groups(root) if key.endswith(":critical")], _groups(root)
    # WHEN the path is walked
    (home / RELEASE).write_text("")
    deadline = time.time() + 120
    while time.time() < deadline and "1:critical" not in _groups(root):
        page.wait_for_timeout(200)
    # THEN its lanes are drawn under each rank's, and the browser asked its view again on its own:
    # hovering rank 0's path names the operators, kernels and waits of that path
    groups = _groups(root)
    assert groups["0:critical"][1] == 1 and groups["1:critical"][1] == 1, groups
    _answered_since(page, root, first["answered"])
    _hover_rank0_critical_path(page, root, groups, home / "critical_path_late.png")
    # and what the walk said on the widget's thread shows under the view's legend, in no cell's output
    elsewhere = page.evaluate("t => [...document.querySelectorAll('.jp-OutputArea-output')].filter(o => "
                              "!o.querySelector('.npumagic-live') && o.textContent.includes(t)).length", LATE_NOTE)
    assert elsewhere == 0
    notes = root.locator(".npumagic-notes")
    assert notes.is_visible() and notes.inner_text() == LATE_NOTE
