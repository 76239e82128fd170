"""Screenshot every page after its default action in headless Chromium and check layout facts in the DOM.

Per page: no element sticks out of the 1280 px viewport horizontally, no plot title overlaps its plot area or is cut
at the figure's edge, no legend sits on a plot area or a colourbar, and no error box or traceback is shown. The
screenshots go to a temporary folder ($INTERPLAB_SCREENSHOT_DIR keeps them) so a person can look at them."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.app.test_app_e2e import CHROMIUM, LAUNCH_ARGS

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.skipif(not Path(CHROMIUM).is_file(), reason=f"needs the system Chromium at {CHROMIUM}"),
]
WIDTH, HEIGHT = 1280, 2400
# (url path, the page's default action: the label of the button a newcomer presses first, or None), Home first,
# then every page of the app's one page list (tool pages and each method's, interplab.app.navigation)
def _pages():
    from interplab.app.navigation import app_pages

    return [("", None)] + [(p.url_path, p.first_button or None) for p in app_pages()]


PAGES = _pages()


def _after():
    """Checks of an interaction, run on a page right after its screenshot (same browser, same default action)."""
    from tests.lenses.test_patching_click_e2e import check_heatmap_click

    return {"Patching": check_heatmap_click}

# Layout facts, measured in the browser. Plot areas are plotly's drag rectangles (one per cartesian subplot).
LAYOUT_JS = """
() => {
  const W = window.innerWidth, out = [];
  const box = e => e.getBoundingClientRect();
  const hit = (a, b) => a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 && b.top < a.bottom - 1;
  const main = document.querySelector('[data-testid="stMain"]') || document.body;
  // content inside a scroll box (a data grid's canvas) that itself fits is not an overflow of the page
  const clipped = e => {
    for (let a = e.parentElement; a && a !== main; a = a.parentElement) {
      const o = getComputedStyle(a).overflowX;
      if (o !== 'visible' && box(a).right <= W + 1) return true;
    }
    return false;
  };
  for (const e of main.querySelectorAll('*')) {
    const r = box(e);
    if (r.width > 0 && r.right > W + 1 && getComputedStyle(e).position !== 'fixed' && !clipped(e)) {
      out.push(`overflow: <${e.tagName.toLowerCase()} class="${(e.className && e.className.baseVal !== undefined)
               ? e.className.baseVal : e.className}"> right edge ${Math.round(r.right)} > ${W}`);
      break;
    }
  }
  document.querySelectorAll('.js-plotly-plot').forEach((p, i) => {
    const svg = p.querySelector('svg.main-svg');
    if (!svg) return;
    const s = box(svg);
    const areas = [...p.querySelectorAll('.draglayer .nsewdrag')].map(box);
    const title = p.querySelector('.g-gtitle .gtitle');
    const name = title ? title.textContent.slice(0, 50) : `plot ${i}`;
    if (title) {
      const t = box(title);
      if (t.left < s.left - 1 || t.right > s.right + 1 || t.top < s.top - 1)
        out.push(`title cut at the figure edge: "${name}"`);
      if (areas.some(a => hit(t, a))) out.push(`title overlaps the plot area: "${name}"`);
    }
    for (const a of p.querySelectorAll('.annotation-text-g')) {
      const r = box(a);
      if (r.width > 0 && (r.left < s.left - 1 || r.right > s.right + 1))
        out.push(`annotation cut at the figure edge: "${a.textContent.slice(0, 50)}" in "${name}"`);
    }
    const legend = p.querySelector('.legend');
    if (legend) {
      const l = box(legend);
      if (areas.some(a => hit(l, a))) out.push(`legend over the plot area: "${name}"`);
      for (const c of p.querySelectorAll('.colorbar')) if (hit(l, box(c))) out.push(`legend over a colourbar: "${name}"`);
    }
  });
  for (const e of document.querySelectorAll('[data-testid="stException"], [data-testid="stAlertContentError"]'))
    out.push('error box: ' + e.innerText.slice(0, 200));
  return out;
}
"""


def _script_state(page) -> str | None:
    # stApp carries Streamlit's script state; a run that has not started yet reads 'initial'
    return page.locator('[data-testid="stApp"]').first.get_attribute("data-test-script-state")


def _idle(page, timeout: float, quiet: float = 0.75) -> None:
    """Wait until the script run is over (script state 'notRunning', no spinner) for `quiet` s in a row."""
    deadline, quiet_since = time.time() + timeout, None
    while time.time() < deadline:
        busy = _script_state(page) != "notRunning" or page.locator('.stSpinner, [data-testid="stSkeleton"]').count() > 0
        if busy:
            quiet_since = None
        elif quiet_since is None:
            quiet_since = time.time()
        elif time.time() - quiet_since > quiet:
            return
        time.sleep(0.1)
    raise AssertionError(f"the page was still running after {timeout} s")


def _click_and_wait(page, name: str, timeout: float) -> None:
    """Press the button labelled `name`, see the rerun start (a fast one may finish between two polls: then 3 s
    pass without it), and wait for it to end."""
    page.get_by_role("button", name=name).click(timeout=60_000)
    start = time.time()
    while time.time() - start < 3.0 and _script_state(page) == "notRunning":
        time.sleep(0.05)
    _idle(page, timeout)


PLOTS_DRAWN_JS = """() => [...document.querySelectorAll('.js-plotly-plot')]
    .every(p => p._fullLayout && p.querySelector('svg.main-svg'))"""


def _drawn(page) -> None:
    """Plotly draws after the script run: wait until every figure has its SVG, then one frame for the layout."""
    page.wait_for_function(PLOTS_DRAWN_JS, timeout=30_000)
    page.wait_for_timeout(300)


def test_every_page_is_screenshot():
    """A new page cannot skip the layout check: every file of interplab/app/pages is in the app's page list (and so
    in PAGES), and every listed page exists."""
    from interplab.app.navigation import app_pages, page_path

    pages = Path(__file__).resolve().parents[2] / "interplab" / "app" / "pages"
    assert {page_path(p).resolve() for p in app_pages()} >= {f.resolve() for f in pages.glob("*.py")}
    assert all(page_path(p).is_file() for p in app_pages())
    assert sorted(p for p, _ in PAGES if p) == sorted(p.url_path for p in app_pages())


def test_screenshots_of_every_page(app_server, tmp_path):
    server = app_server
    pw = pytest.importorskip("playwright.sync_api")
    shots = Path(os.environ.get("INTERPLAB_SCREENSHOT_DIR") or tmp_path / "screenshots")
    shots.mkdir(parents=True, exist_ok=True)
    problems, after = {}, _after()
    with pw.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=LAUNCH_ARGS)
        try:
            page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
            only = os.environ.get("INTERPLAB_WALK_PAGES")     # a manual walk of some pages ("" = all)
            for path, action in PAGES:
                if only and (path or "Home") not in only.split(","):
                    continue
                t_page = time.time()
                page.goto(f"{server}/{path}", wait_until="domcontentloaded", timeout=120_000)
                page.locator('[data-testid="stMain"]').wait_for(timeout=120_000)
                page.wait_for_function("() => document.querySelector('[data-testid=\"stApp\"]')"
                                       "?.getAttribute('data-test-script-state') !== 'initial'", timeout=120_000)
                _idle(page, 600)
                if action and os.environ.get("INTERPLAB_WALK_MODEL") and \
                        page.get_by_role("button", name=action).count() == 0:
                    # another model's walk (not the suite's): a page may offer other buttons on it
                    print(f"screenshot {path}: no {action!r} button on this model")
                elif action:
                    _click_and_wait(page, action, 600)
                _drawn(page)
                page.screenshot(path=str(shots / f"{path or 'Home'}.png"), full_page=True)
                found = page.evaluate(LAYOUT_JS)
                print(f"screenshot {path or 'Home'}: {time.time() - t_page:.1f} s")  # shown with -s: where time goes
                if found:
                    problems[path or "Home"] = found
                if path in after and not os.environ.get("INTERPLAB_WALK_MODEL"):   # organism-specific checks
                    after[path](page)
        finally:
            browser.close()
    assert len(list(shots.glob("*.png"))) == len(PAGES) or os.environ.get("INTERPLAB_WALK_PAGES")
    assert not problems, f"layout problems (screenshots in {shots}): {problems}"
