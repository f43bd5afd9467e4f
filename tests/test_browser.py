"""The executed quickstart notebook in a real browser (headless Chromium, 1400 px wide): no
stderr output, no table wider than its cell, every image loaded; a screenshot is kept in the
test's tmp dir (the CI artifact)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from .conftest import NEED_CHROMIUM

pytestmark = pytest.mark.slow

WINDOW_WIDTH = 1400
BROWSERS = ("chromium", "chromium-browser", "google-chrome")
# Runs at the page's load event (every embedded image is loaded by then, so its natural size is
# known) and writes what it measured into the DOM, where --dump-dom hands it back. Waiting on
# img.decode() instead raced Chromium's virtual time: on a busy machine the budget ran out
# before decoding finished, and the page was dumped without the probe.
PROBE = """
<script>
window.addEventListener("load", () => {
  const px = r => Math.round(r * 10) / 10;
  const cellOf = el => el.closest(".jp-Cell") || document.body;
  const tables = [...document.querySelectorAll(".jp-OutputArea-output table")].map(t => {
    const cell = cellOf(t).getBoundingClientRect(), box = t.getBoundingClientRect(),
          out = t.closest(".jp-OutputArea-output");
    return {width: px(box.width), right: px(box.right), cellRight: px(cell.right),
            scrolls: out.scrollWidth > out.clientWidth + 1, caption: (t.caption || {}).textContent || ""};
  });
  const images = [...document.querySelectorAll(".jp-OutputArea-output img")].map(i => {
    const cell = cellOf(i).getBoundingClientRect(), box = i.getBoundingClientRect();
    return {alt: i.alt, loaded: i.complete && i.naturalWidth > 0, natural: i.naturalWidth, shown: px(box.width),
            right: px(box.right), cellRight: px(cell.right)};
  });
  const stderr = [...document.querySelectorAll('[data-mime-type="application/vnd.jupyter.stderr"]')]
    .map(e => e.textContent);
  const pre = document.createElement("pre");
  pre.id = "npumagic-probe";
  pre.style.display = "none";
  pre.textContent = JSON.stringify({tables, images, stderr, height: document.documentElement.scrollHeight,
                                    pageScrolls: document.documentElement.scrollWidth > window.innerWidth});
  document.body.appendChild(pre);
});
</script>
"""


def _browser() -> str:
    for name in BROWSERS:
        path = shutil.which(name)
        if path is None:
            continue
        try:
            subprocess.run([path, "--headless", "--no-sandbox", "--version"], capture_output=True, timeout=60, check=True)
        except (OSError, subprocess.SubprocessError) as exc:
            pytest.skip(f"{NEED_CHROMIUM} — {path} cannot start: {exc}")
        return path
    pytest.skip(f"{NEED_CHROMIUM} — no headless browser ({', '.join(BROWSERS)}); .ci/run installs it")


def _chromium(browser: str, *args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    command = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
               "--force-device-scale-factor=1", "--virtual-time-budget=60000", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def page(quickstart, tmp_path_factory):
    """The executed quickstart as HTML, opened in Chromium: (what the probe measured, screenshot)."""
    from nbconvert import HTMLExporter

    browser = _browser()
    nb, _ = quickstart
    out = tmp_path_factory.mktemp("browser")
    body, _ = HTMLExporter(template_name="lab").from_notebook_node(nb)
    html = out / "quickstart.html"
    html.write_text(body.replace("</body>", PROBE + "</body>"), encoding="utf-8")
    for _ in range(3):  # a busy machine can leave the first page load unfinished
        dom = _chromium(browser, f"--window-size={WINDOW_WIDTH},1000", "--dump-dom", html.as_uri())
        found = re.search(r'<pre id="npumagic-probe"[^>]*>(.*?)</pre>', dom.stdout, re.S)
        if found:
            break
    assert found, f"the probe did not run (chromium exit {dom.returncode}): {dom.stderr[-2000:]}"
    measured = json.loads(found.group(1).replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">")
                          .replace("&amp;", "&"))
    shot = out / "quickstart.png"
    _chromium(browser, f"--window-size={WINDOW_WIDTH},{min(int(measured['height']) + 40, 16000)}",
              f"--screenshot={shot}", html.as_uri())
    return measured, shot


def test_no_output_area_holds_stderr(page):
    measured, _ = page
    assert measured["stderr"] == []


def test_no_table_is_wider_than_its_cell(page):
    measured, _ = page
    tables = measured["tables"]
    assert len(tables) >= 3  # the two step tables, the checklists, the runs table, ...
    assert [t for t in tables if t["right"] > t["cellRight"] or t["scrolls"]] == []
    assert not measured["pageScrolls"]


def test_every_image_loaded_and_fits_its_cell(page):
    measured, _ = page
    images = measured["images"]
    assert len(images) >= 4  # timeline and steps of both runs
    assert all(i["loaded"] for i in images)
    assert all(i["right"] <= i["cellRight"] for i in images)
    assert all(i["natural"] >= 2 * i["shown"] - 2 for i in images)  # 2x pixels: sharp on high-DPI screens


def test_a_screenshot_is_kept(page):
    _, shot = page
    assert shot.exists() and shot.read_bytes()[:4] == b"\x89PNG"
