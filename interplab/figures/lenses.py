"""Figure builders for the lenses (pure functions of lens results -> plotly Figure; they never run a model).

patching_figure: layer x position (or layer x head) heatmap of a PatchingResult; attribution_scatter: estimated vs
exact effects; logit_lens_figure: layer x position heatmap with each cell's top token; dla_figure: per-head and
per-MLP direct logit attribution; attention_heads_figure: every head's pattern of one layer, titled with its KV group;
answer_rank_figure, attribution_rho_figure, head_frequency_figure: the aggregates of a FactLensStudy over many pairs.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from interplab.core.errors import ShapeError
from interplab.figures.arrays import token_label
from interplab.figures.models import token_labels
from interplab.figures.style import (DEFAULT_WIDTH, DIVERGING, PROBABILITY, QUALITATIVE, SEQUENTIAL, apply_style,
                                     heatmap_axes, log_axis)

__all__ = ["patching_figure", "patching_cell", "attribution_scatter", "logit_lens_figure", "dla_figure",
           "attention_heads_figure", "answer_rank_figure", "attribution_rho_figure", "head_frequency_figure",
           "direction_histogram", "logit_effects_figure"]


def _unique(labels: list[str]) -> list[str]:
    """Category labels made unique with zero-width spaces: two vocabulary entries can decode to the same text, and
    plotly would merge their bars."""
    seen: dict[str, int] = {}
    out = []
    for s in labels:
        out.append(s + "\u200b" * seen.get(s, 0))
        seen[s] = seen.get(s, 0) + 1
    return out


def _signed_range(z: np.ndarray) -> float:
    m = float(np.nanmax(np.abs(z))) if np.isfinite(z).any() else 1.0
    return m if m > 0 else 1.0


def patching_figure(result, *, normalized: bool = True, position: int | None = None, title: str | None = None,
                    clickable: bool = False):
    """Heatmap of a PatchingResult: layer x position for residual / MLP / attention-output sites; layer x head for
    attn_z (at `position`, default the last token, or summed over positions when the grid patched all at once).
    normalized: 1 = the patch fully restores the other run's metric, 0 = no change. clickable: an invisible marker
    on every cell carries its (layer, position, head) as customdata, so a click selects the cell (plotly heatmaps
    report no selection themselves); `patching_cell(point)` reads it back."""
    import plotly.graph_objects as go

    z = result.normalized if normalized else result.effect
    cell_pos, cell_head = None, None  # per column: the position / head a column of the figure stands for
    label = "normalized effect" if normalized else "metric change"
    ylabels = [f"L{int(layer)}" for layer in result.layers]
    if result.site == "attn_z":
        if z.ndim == 3:
            pos = z.shape[1] - 1 if position is None else int(position)
            if not -z.shape[1] <= pos < z.shape[1]:
                raise ShapeError(f"position {pos} is outside the prompt's {z.shape[1]} tokens")
            z, where = z[:, pos], f" at {pos}:{result.tokens[pos]}"
            cell_pos = [pos % len(result.tokens)] * z.shape[1]
        else:
            where = " (all positions)"
        x = [f"H{h}" for h in range(z.shape[1])]
        xaxis = "query head"
        cell_head = list(range(z.shape[1]))
    elif z.ndim == 2:
        x, where, xaxis = token_labels(result.tokens), "", "position"
        cell_pos = list(range(z.shape[1]))
    else:
        z, x, where, xaxis = z[:, None], ["all positions"], "", ""
    m = _signed_range(z)
    hover = "%{y} %{x}<br>" + label + " %{z:.3f}<extra></extra>"
    fig = go.Figure(go.Heatmap(z=z, x=x, y=ylabels, colorscale=DIVERGING, zmid=0, zmin=-m, zmax=m,
                               colorbar=dict(title=label), hovertemplate=hover,
                               hoverinfo="skip" if clickable else None))
    if clickable:
        rows, cols = np.meshgrid(np.arange(z.shape[0]), np.arange(z.shape[1]), indexing="ij")
        data = [[int(result.layers[r]), -1 if cell_pos is None else int(cell_pos[c]),
                 -1 if cell_head is None else int(cell_head[c]), float(z[r, c])]
                for r, c in zip(rows.ravel(), cols.ravel())]
        fig.add_trace(go.Scatter(
            x=[x[c] for c in cols.ravel()], y=[ylabels[r] for r in rows.ravel()], mode="markers",
            marker=dict(size=18, opacity=0, symbol="square"), customdata=data, showlegend=False, name="cells",
            hovertemplate="%{y} %{x}<br>" + label + " %{customdata[3]:.3f}<br>click: patched generation"
                          "<extra></extra>"))
    name = {"exact": "Activation patching", "gradient": "Attribution patching", "ig": "Attribution patching (IG)"}
    title = title or f"{name.get(result.method, result.method)} · {result.site}{where} · {result.direction}"
    apply_style(fig, title=title, xaxis=xaxis, yaxis="layer", height=max(300, 40 * len(ylabels) + 160))
    heatmap_axes(fig, y_reversed=True)
    fig.update_xaxes(type="category", tickangle=-45)
    fig.update_yaxes(type="category")
    return fig


def patching_cell(point) -> tuple[int, int | None, int | None] | None:
    """(layer, position or None = all, head or None = all) of a clicked cell of a `clickable` patching figure,
    from one selection point (a dict with `customdata`, as st.plotly_chart reports it); None for another point."""
    data = point.get("customdata") if hasattr(point, "get") else None
    if data is None or len(data) < 3:
        return None
    layer, pos, head = (int(v) for v in data[:3])
    return layer, (None if pos < 0 else pos), (None if head < 0 else head)


def attribution_scatter(approx, exact, *, title: str | None = None):
    """Estimated (attribution) vs exact (activation patching) effects of the same grid, one point per cell, with
    the identity line."""
    import plotly.graph_objects as go

    a, e = approx.effect.ravel(), exact.effect.ravel()
    if a.shape != e.shape:
        raise ShapeError(f"the two grids differ: {approx.effect.shape} vs {exact.effect.shape}")
    lo, hi = float(min(a.min(), e.min())), float(max(a.max(), e.max()))
    fig = go.Figure([
        go.Scatter(x=e, y=a, mode="markers", marker=dict(color=QUALITATIVE[0], size=7, opacity=0.75), name="cells",
                   hovertemplate="exact %{x:.3f}<br>estimate %{y:.3f}<extra></extra>"),
        go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", line=dict(color="grey", dash="dash"), name="y = x"),
    ])
    apply_style(fig, title=title or f"{approx.method} estimate vs exact patching · {approx.site}",
                xaxis="exact effect", yaxis="estimated effect", height=420)
    return fig


_LENS_CELL_W = 50     # px a 6-character cell label needs at 10 px


def _cell(token) -> str:
    """A logit-lens cell's top token, decoded and cut to 6 characters."""
    s = token_label(token)
    return s if len(s) <= 6 else s[:5] + "…"


def logit_lens_figure(result, *, value: str = "top1_prob", title: str | None = None):
    """Layer x position heatmap of a LogitLensResult; each cell shows its top-1 token.
    value: "top1_prob", "kl" (KL(final || layer), nats) or "target_prob"."""
    import plotly.graph_objects as go

    if value == "top1_prob":
        z, scale, label = result.top_probs[:, :, 0], PROBABILITY, "top-1 prob"
    elif value == "kl":
        z, scale, label = result.kl, SEQUENTIAL, "KL to final"
    elif value == "target_prob":
        if not result.target:
            raise ShapeError("this logit-lens result has no target token; pass target=... to logit_lens")
        z, scale, label = result.target_prob, PROBABILITY, f"p({result.target})"
    else:
        raise ShapeError(f"value must be 'top1_prob', 'kl' or 'target_prob', got {value!r}")
    text = [[_cell(row[0]) for row in layer] for layer in result.top_tokens]
    ylabels = [f"L{int(layer)}" for layer in result.layers]
    n_pos = len(result.tokens)
    width = max(DEFAULT_WIDTH, min(1400, 60 * n_pos + 200))
    height = max(300, 40 * len(ylabels) + 160)
    # a cell's top token is printed only where it fits (6 characters at 10 px, 18 px tall); hover always has it
    fits = (width - 200) / max(n_pos, 1) >= _LENS_CELL_W and (height - 160) / max(len(ylabels), 1) >= 18
    fig = go.Figure(go.Heatmap(z=z, x=token_labels(result.tokens), y=ylabels, colorscale=scale, text=text,
                               texttemplate="%{text}" if fits else None, textfont=dict(size=10),
                               colorbar=dict(title=label),
                               hovertemplate="%{y} %{x}<br>top-1 %{text}<br>" + label + " %{z:.3f}<extra></extra>"))
    apply_style(fig, title=title or f"{result.lens.capitalize()} lens · {label}", xaxis="position", yaxis="layer",
                height=height, width=width)
    heatmap_axes(fig, y_reversed=False)
    fig.update_xaxes(type="category", tickangle=-45)
    fig.update_yaxes(type="category")
    return fig


def dla_figure(result, *, title: str | None = None):
    """Mean direct logit attribution: a layer x head heatmap (head labels carry the KV group) and per-layer MLP
    bars, with attention-bias bars only where that term is not zero (a model without attention biases, like
    Llama-style models and Gemma, has none to show). The colourbar sits at the right edge, off both panels'
    labels; the bar panel shares the heatmap's layer axis."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    heads = result.heads.mean(0)
    L, H = heads.shape
    group = max(1, H // max(1, result.n_kv_heads or H))
    m = _signed_range(heads)
    bias = result.attn_bias.mean(0)
    scale = max(float(np.abs(heads).max()), float(np.abs(result.mlp.mean(0)).max()), 1e-12)
    show_bias = float(np.abs(bias).max()) > 1e-4 * scale   # float error of the decomposition is ~1e-6
    fig = make_subplots(rows=1, cols=2, column_widths=[0.62, 0.38], shared_yaxes=True, horizontal_spacing=0.04,
                        subplot_titles=("heads", "MLP and attention bias" if show_bias else "MLP"))
    ys = [f"L{i}" for i in range(L)]
    fig.add_trace(go.Heatmap(z=heads, x=[f"H{h} (kv{h // group})" for h in range(H)], y=ys,
                             colorscale=DIVERGING, zmid=0, zmin=-m, zmax=m, colorbar=dict(title="logit diff"),
                             hovertemplate="%{y} %{x}<br>%{z:.3f}<extra></extra>"), 1, 1)
    fig.add_trace(go.Bar(y=ys, x=result.mlp.mean(0), orientation="h", name="MLP", marker_color=QUALITATIVE[0],
                         hovertemplate="%{y} MLP %{x:.3f}<extra></extra>"), 1, 2)
    if show_bias:
        fig.add_trace(go.Bar(y=ys, x=bias, orientation="h", name="attn bias", marker_color=QUALITATIVE[1]), 1, 2)
    wrong = f" − {token_label(result.wrongs[0])}" if result.wrongs and result.wrongs[0] else ""
    target = f"{token_label(result.answers[0])}{wrong}" if result.answers else ""
    apply_style(fig, title=title or f"Direct logit attribution · {target} · total {float(result.total.mean()):.3f}",
                height=max(320, 28 * L + 160), legend=show_bias)
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_xaxes(tickangle=-45, row=1, col=1)
    return fig


def attention_heads_figure(patterns, tokens: Sequence[str], *, n_kv_heads: int | None = None, layer: int | None = None,
                           heads: Sequence[int] | None = None, title: str | None = None):
    """One attention heatmap per query head of a layer ([n_heads, q, k] patterns), titled "H{h} · KV group g";
    hovering a cell names the query and key tokens."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    a = np.asarray(patterns, dtype=float)
    if a.ndim != 3 or a.shape[1] != a.shape[2] or a.shape[1] != len(tokens):
        raise ShapeError(f"attention_heads_figure needs [n_heads, q, k] patterns over {len(tokens)} tokens; "
                         f"got {a.shape}")
    H = a.shape[0]
    heads = list(range(H)) if heads is None else [int(h) for h in heads]
    group = max(1, H // max(1, n_kv_heads or H))
    cols = min(4, len(heads))
    rows = -(-len(heads) // cols)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[f"H{h} · KV group {h // group}" for h in heads],
                        horizontal_spacing=0.04, vertical_spacing=0.08)
    labels = token_labels(tokens)
    for i, h in enumerate(heads):
        fig.add_trace(go.Heatmap(z=a[h], x=labels, y=labels, colorscale=PROBABILITY, zmin=0, zmax=1,
                                 showscale=i == 0, colorbar=dict(title="weight"),
                                 hovertemplate=(f"H{h}<br>query %{{y}}<br>key %{{x}}<br>weight %{{z:.3f}}"
                                                "<extra></extra>")),
                      i // cols + 1, i % cols + 1)
    where = f" · layer {layer}" if layer is not None else ""
    apply_style(fig, title=title or f"Attention patterns{where} ({H} query heads, {H // group} KV groups)",
                height=max(360, 300 * rows + 80))
    fig.update_yaxes(autorange="reversed", type="category", showticklabels=len(tokens) <= 24)
    fig.update_xaxes(type="category", showticklabels=False)
    return fig


def direction_histogram(dashboard, *, bins: int = 60, title: str | None = None):
    """Histogram of a DirectionDashboard's per-token projections."""
    import plotly.graph_objects as go

    fig = go.Figure(go.Histogram(x=dashboard.activations, nbinsx=bins, marker_color=QUALITATIVE[0]))
    apply_style(fig, title=title or f"Projection onto the direction · {dashboard.site}", xaxis="x · v̂",
                yaxis="tokens", height=340)
    return fig


def logit_effects_figure(dashboard, *, title: str | None = None):
    """Bars of the tokens a DirectionDashboard's direction promotes and suppresses through the unembedding."""
    import plotly.graph_objects as go

    le = dashboard.logit_effects
    colours = [QUALITATIVE[2] if k == "promoted" else QUALITATIVE[5] for k in le["kind"]]
    labels = _unique([token_label(t) for t in le["token"]])
    fig = go.Figure(go.Bar(x=le["effect"], y=labels, orientation="h",
                           marker_color=colours, hovertemplate="%{y}: %{x:.3f}<extra></extra>"))
    apply_style(fig, title=title or "Direct logit effect (v̂ @ W_U)", xaxis="logit per unit norm", yaxis="token",
                height=max(300, 22 * len(le) + 120))
    fig.update_yaxes(type="category", autorange="reversed")
    return fig


# ------------------------------------------------------------------------------------------- over many pairs
def answer_rank_figure(rank_per_layer, *, title: str | None = None):
    """The answer's logit-lens rank per layer over pairs: the median as a line and the interquartile range as a
    band (a FactLensStudy's `rank_per_layer()` frame: layer, median, q25, q75). The y axis is log(1 + rank), so
    rank 0 (top-1) sits at the bottom."""
    import plotly.graph_objects as go

    df = rank_per_layer
    missing = [c for c in ("layer", "median", "q25", "q75") if c not in df]
    if missing:
        raise ShapeError(f"rank_per_layer needs columns layer, median, q25, q75; missing {missing}")
    x = df["layer"].to_numpy()
    med, lo, hi = (df[c].to_numpy(float) + 1 for c in ("median", "q25", "q75"))
    n = int(df["n_pairs"].iloc[0]) if "n_pairs" in df and len(df) else None
    fig = go.Figure([
        go.Scatter(x=np.r_[x, x[::-1]], y=np.r_[hi, lo[::-1]], fill="toself", fillcolor="rgba(0,114,178,0.2)",
                   line=dict(width=0), hoverinfo="skip", name="interquartile range"),
        go.Scatter(x=x, y=med, mode="lines+markers", line=dict(color=QUALITATIVE[0]), name="median",
                   customdata=np.c_[med - 1, lo - 1, hi - 1],
                   hovertemplate="layer %{x}<br>median rank %{customdata[0]:.0f} "
                                 "[%{customdata[1]:.0f}, %{customdata[2]:.0f}]<extra></extra>"),
    ])
    default = "Logit lens: rank of the answer at the last token" + (f" · {n} pairs" if n else "")
    apply_style(fig, title=title or default,
                xaxis="layer (resid_post)", yaxis="1 + rank of the answer", height=420)
    log_axis(fig, "y")
    return fig


def attribution_rho_figure(per_pair, *, title: str | None = None):
    """Per-pair Spearman ρ of attribution vs exact patching, one box (with every pair's point) per site and method
    (a FactLensStudy's `attribution` frame: site, method, spearman)."""
    import plotly.graph_objects as go

    missing = [c for c in ("site", "method", "spearman") if c not in per_pair]
    if missing:
        raise ShapeError(f"per_pair needs columns site, method, spearman; missing {missing}")
    fig = go.Figure()
    for i, (method, g) in enumerate(per_pair.groupby("method", sort=False)):
        fig.add_trace(go.Box(x=g["site"], y=g["spearman"], name=method, boxpoints="all", jitter=0.4, pointpos=0,
                             marker=dict(color=QUALITATIVE[i % len(QUALITATIVE)], size=5)))
    apply_style(fig, title=title or "Attribution vs exact patching, per pair", xaxis="site",
                yaxis="Spearman ρ (cells of one pair)", height=420, boxmode="group")
    fig.update_yaxes(range=[-1.05, 1.05])
    return fig


def head_frequency_figure(freq, *, k: int, n_kv_heads: int | None = None, title: str | None = None):
    """[L, H] fraction of bootstrap resamples of the pairs in which each head is in the top k (a FactLensStudy's
    `top_k_frequency(map)`): 1 = the head is top-k whichever pairs are drawn."""
    import plotly.graph_objects as go

    z = np.asarray(freq, dtype=float)
    if z.ndim != 2:
        raise ShapeError(f"freq must be [n_layers, n_heads], got {z.shape}")
    L, H = z.shape
    group = max(1, H // max(1, n_kv_heads or H))
    fig = go.Figure(go.Heatmap(z=z, x=[f"H{h} (kv{h // group})" for h in range(H)], y=[f"L{i}" for i in range(L)],
                               colorscale=PROBABILITY, zmin=0, zmax=1, colorbar=dict(title=f"P(top-{k})"),
                               hovertemplate="%{y} %{x}<br>in the top " + str(k) + " in %{z:.0%} of resamples"
                                             "<extra></extra>"))
    apply_style(fig, title=title or f"Top-{k} heads across bootstrap resamples of the pairs", xaxis="query head",
                yaxis="layer", height=max(320, 28 * L + 160))
    heatmap_axes(fig, y_reversed=True)
    fig.update_xaxes(type="category")
    fig.update_yaxes(type="category")
    return fig
