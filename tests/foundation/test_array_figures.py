"""Issue 49: figures for a researcher's own arrays (layer x head, layer x position with tokens, an attention
pattern, lines over layers with bands), styled and laid out by the same rules as every interplab figure, and
exported with provenance."""
from __future__ import annotations

import numpy as np
import pytest

from interplab import figures as F
from interplab.core.errors import ShapeError


def test_layer_head_at_real_model_size_reads_well():
    rng = np.random.default_rng(0)
    fig = F.layer_head(rng.normal(size=(30, 9)), title="Induction score")
    assert F.layout_problems(fig) == []
    tr = fig.data[0]
    assert tr.colorscale is not None and tr.zmid == 0            # signed data: diverging, centred
    assert fig.layout.yaxis.autorange == "reversed" and fig.layout.xaxis.dtick is not None
    dense = F.layer_head(rng.random((30, 64)))                   # too many cells for printed values
    assert dense.data[0].texttemplate is None
    z = rng.random((6, 4))
    z[2, 1] = np.nan
    fig = F.layer_head(z, nan_reason="head pruned")
    assert F.layout_problems(fig) == [] and "n/a" in str(fig.data[0].text)


def test_token_axes_show_text_not_bpe_pieces():
    fig = F.layer_position(np.zeros((3, 4)), ["<s>", " The", " cat", "\n"])
    assert list(fig.data[0].x) == ["0:<s>", "1:␣The", "2:␣cat", "3:⏎"]
    att = F.attention(np.eye(3), ["a", " b", "a"])
    assert len(set(att.data[0].x)) == 3 and F.layout_problems(att) == []
    with pytest.raises(ShapeError):
        F.layer_position(np.zeros((3, 4)), ["a"])


def test_layer_lines_with_bands():
    v = {"probe": np.linspace(0, 1, 30), "control": np.full(30, 0.5)}
    fig = F.layer_lines(v, lo={k: x - 0.1 for k, x in v.items()}, hi={k: x + 0.1 for k, x in v.items()},
                        yaxis="accuracy", title="Probe accuracy by layer")
    assert F.layout_problems(fig) == []
    assert sum(tr.fill == "toself" for tr in fig.data) == 2
    with pytest.raises(ShapeError):
        F.layer_lines(np.zeros((2, 5)), lo=np.zeros((2, 5)))


def test_exported_figure_carries_the_version(tmp_path):
    import interplab
    from interplab.figures.metadata import read_metadata

    out = F.export(F.layer_head(np.ones((2, 2))), tmp_path / "f.html")
    assert read_metadata(out.read_bytes(), "html")["interplab_version"] == interplab.__version__
