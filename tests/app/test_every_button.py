"""Every button of every page, with the page's defaults, on the shipped organisms (Streamlit AppTest).

For each page: open it (a fresh session), then for every button the rendered element tree shows, open the page
afresh, click that button and let the script finish; buttons that appear only after a click (e.g. the Feature
Browser's *Generate* after *Compute feature statistics*) are clicked in turn on the same path. Any exception or
`st.error` fails the test, and so does any rendered plotly figure that breaks the figure rules
(`interplab.figures.style.layout_problems`: clipped titles, legends on the data or a colourbar, half-step ticks on
integer axes, SI log ticks, unexplained NaN cells or empty bars).

Download buttons are not clicked here (they only serialise a figure; the export tests cover that path)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

import interplab.app  # noqa: E402

pytestmark = pytest.mark.slow

APP_DIR = Path(interplab.app.__file__).resolve().parent
PAGES = ["Home.py"] + sorted(p.name for p in (APP_DIR / "pages").glob("*.py"))
TIMEOUT = 600
MAX_DEPTH = 2


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    # runs, SAEs and caches written by the clicks go to a temporary interplab home, never the user's
    monkeypatch.setenv("INTERPLAB_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("INTERPLAB_DEFAULT_MODEL", raising=False)
    yield
    _stop_jobs()


def _stop_jobs() -> None:
    """A clicked launch button started a job: stop it (a fresh page would find it running and disable the button;
    nor may it outlive the test)."""
    from interplab import jobs

    for job in jobs.list_jobs(active=True):
        jobs.cancel(job.id)


def _open(page: str, path: tuple[str, ...]) -> AppTest:
    at = AppTest.from_file(str(APP_DIR / page if page == "Home.py" else APP_DIR / "pages" / page),
                           default_timeout=TIMEOUT).run()
    for key in path:
        _check(at, page, path[:path.index(key)])
        at.button(key=key).click().run()
    return at


def _decode(obj):
    """Plotly's JSON writes numpy arrays as {'dtype', 'bdata'(, 'shape')} typed arrays: turn them back into lists."""
    import base64

    import numpy as np

    if isinstance(obj, dict):
        if "bdata" in obj and "dtype" in obj:
            a = np.frombuffer(base64.b64decode(obj["bdata"]), dtype=np.dtype(obj["dtype"]))
            if "shape" in obj:
                a = a.reshape([int(n) for n in str(obj["shape"]).split(",")])
            return a.tolist()
        return {k: _decode(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_decode(v) for v in obj]
    return obj


def figures(at) -> list:
    """The plotly figures the run rendered, rebuilt as `go.Figure`s."""
    import plotly.graph_objects as go

    out = []
    for el in at.get("plotly_chart"):
        spec = el.proto.spec if hasattr(el, "proto") else None
        if spec:
            d = _decode(json.loads(spec) if isinstance(spec, str) else spec)
            out.append((el.proto.id or "", go.Figure(d, skip_invalid=True)))
    return out


def _check(at, page: str, path: tuple[str, ...]) -> None:
    from interplab.figures.style import layout_problems

    where = f"{page} after clicking {list(path) or 'nothing'}"
    assert not at.exception, f"{where}: exception {[e.value for e in at.exception]}"
    assert not at.error, f"{where}: st.error {[e.value for e in at.error]}"
    bad = {fid: p for fid, fig in figures(at) if (p := layout_problems(fig))}
    assert not bad, f"{where}: figures break the layout rules: {bad}"


def _buttons(at) -> list[str]:
    """Keys of the buttons a user can press now (a disabled one, e.g. a data box's *Run* before a file is given,
    cannot be pressed in the browser either)."""
    keys = [b.key for b in at.button]
    assert all(keys), f"every button needs a key so the test can click it: {[b.label for b in at.button]}"
    return [b.key for b in at.button if not b.disabled]


@pytest.mark.parametrize("page", PAGES)
def test_every_button(page):
    at = _open(page, ())
    _check(at, page, ())
    queue = [((), k) for k in _buttons(at)]
    seen = set(_buttons(at))
    clicked = []
    while queue:
        path, key = queue.pop(0)
        at = _open(page, path)
        at.button(key=key).click().run()
        _check(at, page, path + (key,))
        _stop_jobs()
        clicked.append(path + (key,))
        if len(path) + 1 < MAX_DEPTH:
            for k in _buttons(at):
                if k not in seen:
                    seen.add(k)
                    queue.append((path + (key,), k))
    # the pages that have buttons with their defaults really offered them (a page that stopped early would not)
    from interplab.app.navigation import app_pages

    expected = {Path(p.file).name: set(p.buttons) for p in app_pages() if p.buttons}  # declared with each page
    assert expected.get(page, set()) <= seen, f"{page}: expected buttons {expected.get(page)} among {seen}"
