"""In a real browser, a click on a cell of the Patching page's heatmap picks that cell for the patched generation
(Streamlit reports no selection for plotly heatmaps; the page's clickable figure carries each cell on an invisible
marker). The clicked marker's (layer, position) must appear in the 'Layer' and 'Position' boxes."""
from __future__ import annotations

import time

from tests.app.test_screenshots import _idle


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


def check_heatmap_click(page) -> None:
    """On the Patching page after its default action ('Run patching', figures drawn): click cell (2, 3) of the first
    heatmap and check that the 'Layer' and 'Position' boxes show that cell. The screenshot walk
    (tests/app/test_screenshots.py) calls this right after it screenshots the page, so the patching run and the
    browser are not paid twice."""
    target = page.evaluate(MARKER_JS, [2, 3])
    layer, position = int(target["data"][0]), int(target["data"][1])
    assert (layer, position) != (0, 0)  # not the boxes' defaults, so a change is visible
    page.mouse.click(target["x"], target["y"])
    time.sleep(1.0)
    _idle(page, 120)
    assert _box_text(page, "Layer") == str(layer)
    assert _box_text(page, "Position").startswith(f"{position}:")


def test_the_screenshot_walk_clicks_the_heatmap():
    """The click check runs inside the screenshot walk, on its Patching page: it must stay wired there."""
    from tests.app import test_screenshots

    assert test_screenshots._after().get("Patching") is check_heatmap_click
