"""Figure builders for the Models page and the `next-token` experiment (pure functions: data -> plotly Figure)."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from interplab.core.errors import ShapeError
from interplab.figures.arrays import display_tokens, token_label
from interplab.figures.style import ACCENT, PROBABILITY, apply_style, heatmap_axes

__all__ = ["top_tokens_figure", "attention_figure", "token_labels"]


def token_labels(tokens: Sequence[str]) -> list[str]:
    """Unique axis labels `i:text` (plotly merges duplicate categories, and prompts repeat tokens), each token shown
    as the text it decodes to (`interplab.figures.arrays.display_tokens`: never a raw 'Ġ'/'Ċ' piece)."""
    return display_tokens(tokens)


def top_tokens_figure(top, *, title: str | None = "Top next tokens"):
    """Horizontal bars of next-token probabilities; `top` is a DataFrame with columns token, prob (rank order)."""
    import plotly.graph_objects as go

    for col in ("token", "prob"):
        if col not in top.columns:
            raise ShapeError(f"top_tokens_figure needs a '{col}' column; got {list(top.columns)}")
    labels = [token_label(t) for t in top["token"]]
    fig = go.Figure(go.Bar(
        x=top["prob"].to_numpy(dtype=float), y=labels, orientation="h", marker_color=ACCENT,
        text=[f"{p:.3f}" for p in top["prob"]], textposition="outside", cliponaxis=False,
        hovertemplate="%{y}: p=%{x:.4f}<extra></extra>",
    ))
    apply_style(fig, title=title, xaxis="probability", yaxis="token",
                height=max(260, 28 * len(top) + 110))
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_xaxes(range=[0, min(1.0, float(top["prob"].max()) * 1.2 + 1e-6)])
    return fig


def attention_figure(pattern, tokens: Sequence[str], *, layer: int | None = None, head: int | None = None,
                     title: str | None = None):
    """Heatmap of one attention pattern [query, key] with token labels on both axes."""
    import plotly.graph_objects as go

    a = np.asarray(pattern, dtype=float)
    if a.ndim != 2 or a.shape[0] != a.shape[1] or a.shape[0] != len(tokens):
        raise ShapeError(f"attention_figure needs a square [q, k] pattern matching {len(tokens)} tokens; "
                         f"got shape {a.shape}")
    labels = token_labels(tokens)
    if title is None:
        where = " ".join(s for s in (f"layer {layer}" if layer is not None else "",
                                      f"head {head}" if head is not None else "") if s)
        title = f"Attention pattern {where}".strip()
    fig = go.Figure(go.Heatmap(
        z=a, x=labels, y=labels, colorscale=PROBABILITY, zmin=0.0, zmax=1.0,
        colorbar=dict(title="weight"),
        hovertemplate="query %{y}<br>key %{x}<br>weight %{z:.3f}<extra></extra>",
    ))
    side = max(320, min(900, 36 * len(tokens) + 160))
    apply_style(fig, title=title, xaxis="key token", yaxis="query token", height=side)
    heatmap_axes(fig, y_reversed=True)
    fig.update_xaxes(type="category", tickangle=-45)
    fig.update_yaxes(type="category")
    return fig
