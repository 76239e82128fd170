"""In a real browser, a click on a cell of the Patching page's heatmap picks that cell for the patched generation
(Streamlit reports no selection for plotly heatmaps; the page's clickable figure carries each cell on an invisible
marker). The clicked marker's (layer, position) must appear in the 'Layer' and 'Position' boxes."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.app.test_app_e2e import CHROMIUM, LAUNCH_ARGS
from tests.app.test_screenshots import _click_and_wait, _drawn, _idle

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.skipif(not Path(CHROMIUM).is_file(), reason=f"needs the system Chromium at {CHROMIUM}"),
]

# the centre of the invisible marker of cell (row r, column c) of the first patching heatmap, and its customdata
MARKER_JS = """
([r, c]) => {
  const plot = document.querySelectorAll('.js-plotly-plot')[0];
  const trace = plot.data[1], nx = new Set(trace.x).size;
  const i = r * nx + c;
  const pts = plot.querySelectorAll('.scatterlayer .trace .points path');
  const b = pts[i].getBoundingClientRect();
  return {x: b.left + b.width / 2, y: b.top + b.height / 2, data: trace.customdata[i]};
}
"""


def _box_text(page, label: str) -> str:
    """The shown value of the selectbox labelled `label` (Streamlit keeps it in the combobox input's value)."""
    return page.locator(f'[data-testid="stSelectbox"] input[aria-label="{label}"]').first.input_value()


def test_clicking_a_heatmap_cell_picks_it(app_server):
    server = app_server
    pw = pytest.importorskip("playwright.sync_api")
    with pw.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=LAUNCH_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 2400})
            page.goto(f"{server}/Patching", wait_until="domcontentloaded", timeout=120_000)
            page.locator('[data-testid="stMain"]').wait_for(timeout=120_000)
            _idle(page, 300)
            _click_and_wait(page, "Run patching", 300)
            _drawn(page)
            target = page.evaluate(MARKER_JS, [2, 3])
            layer, position = int(target["data"][0]), int(target["data"][1])
            assert (layer, position) != (0, 0)  # not the boxes' defaults, so a change is visible
            page.mouse.click(target["x"], target["y"])
            time.sleep(1.0)
            _idle(page, 120)
            assert _box_text(page, "Layer") == str(layer)
            assert _box_text(page, "Position").startswith(f"{position}:")
        finally:
            browser.close()
