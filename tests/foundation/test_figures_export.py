"""Figure export: offline HTML, static formats through the system Chromium, clear errors."""
from __future__ import annotations

import re

import plotly.graph_objects as go
import pytest

from interplab.core.errors import InputError, MissingDependencyError
from interplab.figures.export import chromium_available, export, find_chromium, render
from interplab.figures.style import apply_style


def _fig():
    fig = go.Figure(go.Heatmap(z=[[0.1, 0.9], [0.4, 0.6]], x=["a", "b"], y=["c", "d"]))
    return apply_style(fig, title="attention", xaxis="key", yaxis="query")


def test_html_is_offline_with_plotlyjs_inlined(tmp_path):
    p = export(_fig(), tmp_path / "sub" / "f.html")
    html = p.read_text(encoding="utf-8")
    assert p.stat().st_size > 1_000_000  # the plotly.js bundle itself is inlined
    assert "plotly.js v" in html or "plotly.js (" in html or "Plotly.newPlot" in html
    assert '"attention"' in html
    srcs = re.findall(r"<script[^>]*\bsrc=[\"']([^\"']+)", html)
    assert srcs == [], f"external scripts referenced: {srcs}"
    links = re.findall(r"<link[^>]*\bhref=[\"'](https?:[^\"']+)", html)
    assert links == [], f"external resources referenced: {links}"
    assert not re.search(r"https?://cdn\.plot\.ly/plotly-[0-9.]+(\.min)?\.js", html)  # the CDN loader of "cdn" mode
    assert "MathJax.js" not in html
    assert not [q for q in p.parent.iterdir() if q.name.startswith(".")]  # no temp file left behind


def test_unknown_suffix_lists_supported(tmp_path):
    with pytest.raises(InputError, match=r"\.html, \.png, \.svg, \.pdf"):
        export(_fig(), tmp_path / "f.jpg")
    with pytest.raises(InputError, match="suffix"):
        export(_fig(), tmp_path / "noext")
    with pytest.raises(InputError, match="plotly Figure"):
        export([1, 2, 3], tmp_path / "f.html")
    assert list(tmp_path.iterdir()) == []


def test_missing_chromium_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("BROWSER_PATH", str(tmp_path / "no-such-chromium"))
    assert find_chromium() is None and not chromium_available()
    for suffix in ("png", "svg", "pdf"):
        with pytest.raises(MissingDependencyError, match="apt-get install chromium"):
            export(_fig(), tmp_path / f"f.{suffix}")
    assert not any(tmp_path.glob("f.*"))
    # html still works without a browser
    assert export(_fig(), tmp_path / "f.html").exists()


MAGIC = {"png": b"\x89PNG\r\n\x1a\n", "pdf": b"%PDF-", "svg": b"<svg"}


@pytest.mark.skipif(not chromium_available(), reason="needs the system Chromium (apt-get install chromium)")
def test_static_formats_render_with_system_chromium(tmp_path):
    fig = _fig()
    for fmt, magic in MAGIC.items():
        p = export(fig, tmp_path / f"f.{fmt}", width=400, height=300)
        data = p.read_bytes()
        assert len(data) > 500 and data.startswith(magic), (fmt, data[:16])
    # scale changes the raster size; width/height are honoured
    from PIL import Image

    im1 = Image.open(tmp_path / "f.png")
    assert im1.size == (800, 600)            # the publication default: scale 2
    im2 = Image.open(export(fig, tmp_path / "g.png", width=400, height=300, scale=1))
    assert im2.size == (400, 300)
    assert render(fig, "svg").lstrip().startswith(b"<svg")
