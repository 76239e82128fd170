"""Issue 48, "readable at real size": token labels are the text they decode to (never a raw byte-level BPE piece),
the DLA figure's colourbar stays off the MLP panel and it draws no attention-bias bars for a model without them,
logit-lens cell text only where it fits, the atlas's layer ticks do not crowd. Pure figure builders, no model."""
from __future__ import annotations

import json
import re

import numpy as np

from interplab.figures.arrays import display_tokens, token_label, token_text
from interplab.figures.atlas import atlas_layer_figure
from interplab.figures.lenses import dla_figure, logit_effects_figure, logit_lens_figure, patching_figure
from interplab.figures.models import attention_figure, top_tokens_figure
from interplab.figures.sae import context_html
from interplab.figures.style import layout_problems
from interplab.probes.lenses import DLAResult, LogitLensResult, PatchingResult

PIECES = ["<|im_start|>", "ĠThe", "Ġcapital", "Ċ", "ĠParis", "Ã©t", "ĊĊ"]   # raw vocabulary entries (BPE)
TEXT = ["<|im_start|>", " The", " capital", "\n", " Paris", "ét", "\n\n"]  # what they decode to
RAW = ("Ġ", "Ċ", "Ã")


def _no_pieces(fig) -> None:
    blob = json.dumps(fig.to_plotly_json(), default=str, ensure_ascii=False)
    assert not any(p in blob for p in RAW), [p for p in RAW if p in blob]


def test_tokens_read_as_their_text_whether_given_as_pieces_or_decoded():
    assert [token_text(p) for p in PIECES] == TEXT
    assert [token_text(t) for t in TEXT] == TEXT                     # decoded text passes through
    assert token_text("▁cat") == " cat" and token_text("é") == "é"   # SentencePiece space; a real "é" stays
    assert display_tokens(PIECES) == display_tokens(TEXT)
    assert display_tokens(PIECES)[1:4] == ["1:␣The", "2:␣capital", "3:⏎"]
    assert token_label("") == "''"


def test_no_page_figure_shows_bpe_pieces():
    import pandas as pd

    n = len(PIECES)
    _no_pieces(attention_figure(np.full((n, n), 1 / n), PIECES))
    _no_pieces(top_tokens_figure(pd.DataFrame({"token": ["ĠParis", "ĠRome", "Ċ"], "prob": [0.5, 0.3, 0.1]})))
    pr = PatchingResult("resid_pre", np.zeros((3, n)), np.arange(3), PIECES, 2.0, -1.0, method="exact")
    _no_pieces(patching_figure(pr))
    tops = [[["ĠParis", "ĠRome"]] * n] * 3
    ll = LogitLensResult(np.arange(3), PIECES, np.zeros((3, n, 2), int), np.full((3, n, 2), 0.5), tops,
                         np.ones((3, n)))
    _no_pieces(logit_lens_figure(ll))

    class Dash:
        logit_effects = pd.DataFrame({"token": ["ĠParis", "Ċ", "ĠParis"], "effect": [1.0, 0.5, -1.0],
                                      "kind": ["promoted", "promoted", "suppressed"]})
    fig = logit_effects_figure(Dash())
    _no_pieces(fig)
    assert len(set(fig.data[0].y)) == 3                              # equal texts stay separate bars


def test_feature_contexts_do_not_split_words():
    html = context_html(["Sm", "ol", "LM", "Ġis", "Ċ", "Ġsmall"], [0.1, 0.9, 0.2, 0.0, 0.0, 0.3])
    text = re.sub(r"<[^>]+>", "", html)
    assert text == "SmolLM is⏎ small" and "Ġ" not in html and "margin" not in html


def test_dla_at_real_size_without_attention_bias():
    rng = np.random.default_rng(0)
    L, H = 18, 4
    d = DLAResult(rng.normal(size=(1, L, H)), rng.normal(size=(1, L)), np.full((1, L), 1e-9), np.zeros(1),
                  np.zeros(1), np.array([1.0]), [" Paris"], [" Rome"], n_kv_heads=1)
    fig = dla_figure(d)
    assert [t.name for t in fig.data if t.type == "bar"] == ["MLP"]  # no "attn bias" bars: the term is ~0
    cb = fig.data[0].colorbar
    assert cb.x is None or cb.x >= 1.0                               # at the right edge, off the MLP panel
    assert fig.layout.xaxis2.domain[0] > fig.layout.xaxis.domain[1]  # panels do not overlap
    assert "␣Paris − ␣Rome" in fig.layout.title.text and layout_problems(fig) == []
    d2 = DLAResult(rng.normal(size=(1, L, H)), rng.normal(size=(1, L)), rng.normal(size=(1, L)), np.zeros(1),
                   np.zeros(1), np.array([1.0]), ["a"], ["b"], n_kv_heads=1)
    assert [t.name for t in dla_figure(d2).data if t.type == "bar"] == ["MLP", "attn bias"]


def test_logit_lens_cell_text_only_where_it_fits():
    def lens(n_pos):
        tops = [[["ĠParis", "x"]] * n_pos] * 30
        return LogitLensResult(np.arange(30), ["a"] * n_pos, np.zeros((30, n_pos, 2), int),
                               np.full((30, n_pos, 2), 0.5), tops, np.ones((30, n_pos)))
    few, many = logit_lens_figure(lens(8)), logit_lens_figure(lens(42))
    assert few.data[0].texttemplate == "%{text}" and few.data[0].text[0][0] == "␣Paris"
    assert many.data[0].texttemplate is None and many.data[0].text is not None   # hover keeps the token


def test_atlas_layer_ticks_at_30_layers_do_not_crowd():
    class Atlas:
        layer_maps = {"pr": np.linspace(1, 5, 30), "patching_resid": np.linspace(0, 1, 30)}
    fig = atlas_layer_figure(Atlas())
    for ax in (fig.layout.xaxis, fig.layout.xaxis2):
        assert ax.tickvals is None and ax.dtick is not None and 30 / float(ax.dtick) <= 12
