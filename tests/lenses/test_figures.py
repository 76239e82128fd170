"""Lens figure builders are pure functions of results (no model): shapes, labels and typed errors."""
from __future__ import annotations

import numpy as np
import pytest

from interplab.core.errors import ShapeError
from interplab.figures.lenses import (attention_heads_figure, attribution_scatter, dla_figure, logit_lens_figure,
                                      patching_cell, patching_figure)
from interplab.probes.lenses import AttentionResult, DLAResult, LogitLensResult, PatchingResult

TOKENS = ["<bos>", "a", "b", "c"]


def _grid(site="resid_pre", shape=(2, 4), method="exact"):
    rng = np.random.default_rng(0)
    return PatchingResult(site, rng.normal(size=shape), np.arange(shape[0]), TOKENS, 2.0, -1.0, method=method,
                          n_kv_heads=2)


def test_patching_figures():
    fig = patching_figure(_grid())
    assert np.asarray(fig.data[0].z).shape == (2, 4) and list(fig.data[0].x) == ["0:<bos>", "1:a", "2:b", "3:c"]
    z = _grid("attn_z", (2, 4, 4))
    heads = patching_figure(z, position=1)
    np.testing.assert_allclose(np.asarray(heads.data[0].z), z.normalized[:, 1])
    with pytest.raises(ShapeError):
        patching_figure(z, position=9)
    sc = attribution_scatter(_grid(method="gradient"), _grid())
    assert len(sc.data) == 2
    with pytest.raises(ShapeError):
        PatchingResult("resid_pre", np.zeros((2, 3)), np.arange(2), TOKENS, 0.0, 0.0)



def test_clickable_patching_figure_maps_every_cell_back_to_its_site():
    """Each invisible marker sits on its heatmap cell and carries (layer, position, head, value); a click on it
    gives the cell the page patches. Layers need not start at 0."""
    g = PatchingResult("resid_pre", np.arange(8.0).reshape(2, 4), np.array([3, 5]), TOKENS, 2.0, -1.0)
    fig = patching_figure(g, normalized=False, clickable=True)
    heat, cells = fig.data
    assert heat.hoverinfo == "skip" and len(cells.customdata) == 8
    for x, y, data in zip(cells.x, cells.y, cells.customdata):
        r, c = list(heat.y).index(y), list(heat.x).index(x)
        assert data[3] == heat.z[r][c]
        assert patching_cell({"customdata": data}) == ((3, 5)[r], c, None)
    z = _grid("attn_z", (2, 4, 4))
    heads = patching_figure(z, position=-1, clickable=True).data[1]
    assert {patching_cell({"customdata": d})[1:] for d in heads.customdata} == {(3, h) for h in range(4)}
    assert patching_cell({"x": 1}) is None and patching_figure(g).data[0].hoverinfo is None


def test_logit_lens_dla_attention_figures():
    ll = LogitLensResult(np.arange(2), TOKENS, np.zeros((2, 4, 2), int), np.full((2, 4, 2), 0.5),
                         [[["x", "y"]] * 4] * 2, np.ones((2, 4)))
    fig = logit_lens_figure(ll, value="kl")
    assert np.asarray(fig.data[0].z).shape == (2, 4) and fig.data[0].text[0][0] == "x"
    with pytest.raises(ShapeError):
        logit_lens_figure(ll, value="target_prob")  # no target
    d = DLAResult(np.ones((1, 2, 4)), np.ones((1, 2)), np.zeros((1, 2)), np.zeros(1), np.zeros(1), np.array([10.0]),
                  ["a"], ["b"], n_kv_heads=2)
    assert d.component_sum[0] == 10.0
    fig = dla_figure(d)
    assert list(fig.data[0].x) == ["H0 (kv0)", "H1 (kv0)", "H2 (kv1)", "H3 (kv1)"]
    att = AttentionResult(np.full((4, 4, 4), 0.25), TOKENS, 1, 2)
    fig = attention_heads_figure(att.patterns, TOKENS, n_kv_heads=2, layer=1)
    assert len(fig.data) == 4 and "KV group 1" in fig.layout.annotations[3].text
    assert list(att.kv_group) == [0, 0, 1, 1]
