"""Exported figures carry their provenance and a run folder stays small (issue 15, item 8): the run, its config
and the interplab version in every format; HTML figures of one run share one plotly.min.js."""
from __future__ import annotations

from dataclasses import dataclass

import plotly.graph_objects as go
import pytest

import interplab
from interplab.figures.export import chromium_available, export, save_figure
from interplab.figures.metadata import embed_metadata, figure_metadata, read_metadata
from interplab.results import load_run, new_run

META = {"interplab_version": interplab.__version__, "figure": "bars", "run": "demo/x", "config": {"layer": 2}}


@dataclass
class Cfg:
    layer: int = 2
    model: str = "zoo:toy-chat"


def _fig(i=0):
    return go.Figure(go.Bar(y=[1, 2 + i]), layout={"title": f"figure {i}"})


def test_a_four_figure_run_is_small_and_says_what_made_it(tmp_path):
    with new_run("demo", Cfg(), root=tmp_path) as run:
        for i in range(4):
            save_figure(run, f"fig{i}", _fig(i))
    figs = run.path / "figures"
    htmls = sorted(figs.glob("*.html"))
    assert len(htmls) == 4 and (figs / "plotly.min.js").is_file()
    total = sum(p.stat().st_size for p in figs.iterdir())
    js = (figs / "plotly.min.js").stat().st_size
    assert all(p.stat().st_size < 50_000 for p in htmls), [p.stat().st_size for p in htmls]
    assert total < js + 200_000          # was 4 x 4.8 MB: one plotly.js per figure
    page = htmls[0].read_text()
    assert '<script src="plotly.min.js"' in page or "src=\"plotly.min.js\"" in page
    meta = read_metadata(htmls[0].read_bytes(), "html")
    assert meta["run"] == f"demo/{run.name}" and meta["config"]["layer"] == 2
    assert meta["interplab_version"] == interplab.__version__ and meta["figure"] == "fig0"
    assert load_run(run.path).figure("fig0") is not None            # still re-openable


def test_self_contained_html_on_request(tmp_path):
    with new_run("demo", Cfg(), root=tmp_path) as run:
        save_figure(run, "solo", _fig(), self_contained=True)
    assert not (run.path / "figures" / "plotly.min.js").exists()
    assert (run.path / "figures" / "solo.html").stat().st_size > 1_000_000


def test_metadata_round_trips_in_each_format_without_a_browser():
    png = b"\x89PNG\r\n\x1a\n" + b"\0\0\0\x0dIHDR" + b"\0" * 13 + b"\0" * 4 + b"\0\0\0\0IEND\xaeB`\x82"
    out = embed_metadata(png, "png", META)
    assert read_metadata(out, "png") == META and out.endswith(b"IEND\xaeB`\x82")
    svg = b'<svg xmlns="http://www.w3.org/2000/svg" width="10"><rect/></svg>'
    assert read_metadata(embed_metadata(svg, "svg", META), "svg") == META
    pdf = (b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog >>\nendobj\nxref\n0 2\n0000000000 65535 f \n0000000009 00000 n \n"
           b"trailer\n<< /Size 2 /Root 1 0 R >>\nstartxref\n47\n%%EOF\n")
    out = embed_metadata(pdf, "pdf", META)
    assert out.startswith(pdf) and read_metadata(out, "pdf") == META      # an incremental update
    assert b"/Info 2 0 R" in out and b"/Prev 47" in out
    assert read_metadata(svg, "svg") is None and read_metadata(pdf, "pdf") is None   # absent -> None


def test_figure_metadata_reads_the_run_config(tmp_path):
    with new_run("demo", Cfg(layer=3), root=tmp_path) as run:
        meta = figure_metadata(run, "x")
    assert meta["experiment"] == "demo" and meta["config"]["layer"] == 3 and meta["config"]["model"] == "zoo:toy-chat"


@pytest.mark.skipif(not chromium_available(), reason="needs the system Chromium (apt-get install chromium)")
def test_static_exports_carry_metadata_at_publication_size(tmp_path):
    from PIL import Image

    fig = _fig()
    for fmt in ("png", "svg", "pdf"):
        p = export(fig, tmp_path / f"f.{fmt}", metadata=META)
        assert read_metadata(p.read_bytes(), fmt) == META, fmt
    im = Image.open(tmp_path / "f.png")
    assert im.size == (1400, 1000)                         # plotly's 700 x 500 at scale 2
    assert "interplab" in im.text and im.text["Software"].startswith("interplab")   # PIL reads the tEXt chunk
    assert (tmp_path / "f.pdf").read_bytes().rstrip().endswith(b"%%EOF")
