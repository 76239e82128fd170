"""Figures of an Atlas (interplab.probes.lenses.atlas): pure functions of the result, no model runs.

atlas_head_map: one layer x head map (planted heads of a validation organism marked); atlas_layer_figure: PR (and
its change) per layer above where resid_pre patching matters; atlas_agreement_figure: Spearman ρ with its interval
per pair of maps; atlas_overlap_figure: max |cos| between direction sets next to a Haar-random baseline."""
from __future__ import annotations

import numpy as np

from interplab.core.errors import InputError
from interplab.figures.style import DIVERGING, QUALITATIVE, SEQUENTIAL, apply_style, heatmap_axes, nice_int_step

__all__ = ["atlas_head_map", "atlas_layer_figure", "atlas_agreement_figure", "atlas_overlap_figure"]

# short: the page shows the three maps side by side in a third of the width each
_HEAD_TITLES = {"truth": "Truth Scores", "patching": "Patching per head (attn_z)", "dla": "DLA per head"}
_HEAD_BARS = {"truth": "accuracy", "patching": "normalised", "dla": "logit diff"}


def atlas_head_map(atlas, name: str, *, title: str | None = None):
    """Heatmap of head map `name` on layer x head axes; a validation organism's planted heads carry an ×."""
    import plotly.graph_objects as go

    if name not in atlas.head_maps:
        raise InputError(f"the atlas has no {name!r} map ({atlas.unavailable.get(name, 'not computed')}); "
                         f"it has {list(atlas.head_maps)}")
    z = atlas.head_maps[name]
    L, H = z.shape
    xs, ys = [f"H{h}" for h in range(H)], [f"L{i}" for i in range(L)]
    if name == "truth":
        kw = dict(colorscale=SEQUENTIAL, zmin=min(0.5, float(z.min())), zmax=1.0)
    else:
        m = float(np.abs(z).max()) or 1.0
        kw = dict(colorscale=DIVERGING, zmid=0, zmin=-m, zmax=m)
    fig = go.Figure(go.Heatmap(z=z, x=xs, y=ys, colorbar=dict(title=_HEAD_BARS.get(name, name)),
                               hovertemplate="%{y} %{x}<br>%{z:.3f}<extra></extra>", **kw))
    if atlas.planted_heads:
        fig.add_trace(go.Scatter(x=[f"H{h}" for _, h in atlas.planted_heads],
                                 y=[f"L{layer}" for layer, _ in atlas.planted_heads], mode="markers",
                                 marker=dict(symbol="x-thin", size=16, line=dict(width=3, color="black")),
                                 name="planted head", showlegend=False,
                                 hovertemplate="planted %{y} %{x}<extra></extra>"))
    apply_style(fig, title=title or _HEAD_TITLES.get(name, name), xaxis="query head", yaxis="layer",
                height=max(300, 36 * L + 170))
    heatmap_axes(fig, y_reversed=True)
    fig.update_xaxes(type="category")
    fig.update_yaxes(type="category")
    return fig


def atlas_layer_figure(atlas, *, title: str | None = None):
    """Two panels over the layers: the participation ratio of resid_post.L (and its change against a reference
    model when computed) above the largest |normalised resid_pre.L patching effect| over positions."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    lm = atlas.layer_maps
    if not lm:
        raise InputError("the atlas has no layer maps")
    n = len(next(iter(lm.values())))
    layers = list(range(n))
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.14,
                        subplot_titles=("participation ratio of resid_post", "where patching matters (resid_pre)"))
    for i, key in enumerate(k for k in ("pr", "pr_change") if k in lm):
        fig.add_trace(go.Scatter(x=layers, y=lm[key], mode="lines+markers", name=key.replace("_", " "),
                                 marker_color=QUALITATIVE[i]), 1, 1)
    if "patching_resid" in lm:
        fig.add_trace(go.Bar(x=layers, y=lm["patching_resid"], name="max |effect|", marker_color=QUALITATIVE[2]),
                      2, 1)
    apply_style(fig, title=title or "Layers: geometry and patching", height=520)
    # a tick every `step` layers (1 up to 12 layers, then 2, 5, ...): 30 ticks in a third of the page overlap
    step = nice_int_step(max(layers) - min(layers))
    fig.update_xaxes(tickmode="linear", tick0=0, dtick=step, tickformat="d")
    fig.update_xaxes(title_text="layer", row=2, col=1)
    fig.update_yaxes(title_text="PR", row=1, col=1)
    fig.update_yaxes(title_text="normalised", row=2, col=1)
    return fig


def atlas_agreement_figure(atlas, *, title: str | None = None):
    """Spearman ρ of every pair of maps with its bootstrap interval (pairs with an undefined ρ, e.g. a constant
    map, are left out and named in the title)."""
    import plotly.graph_objects as go

    ag = atlas.agreement
    ok = ag[np.isfinite(ag["rho"].to_numpy(dtype=float))] if len(ag) else ag
    if not len(ok):
        raise InputError("no pair of maps has a defined rank correlation (fewer than two non-constant maps)")
    labels = [f"{r.map_a} vs {r.map_b}" for r in ok.itertuples()]
    fig = go.Figure(go.Scatter(
        x=ok["rho"], y=labels, mode="markers", marker=dict(size=11, color=QUALITATIVE[0]),
        error_x=dict(type="data", symmetric=False, array=ok["hi"] - ok["rho"], arrayminus=ok["rho"] - ok["lo"]),
        customdata=np.stack([ok["p"], ok["n"]], 1),
        hovertemplate="%{y}<br>ρ %{x:.3f}<br>p %{customdata[0]:.4f}, n %{customdata[1]}<extra></extra>"))
    fig.add_vline(x=0, line=dict(color="grey", dash="dash"))
    dropped = len(ag) - len(ok)
    note = f" ({dropped} pair(s) undefined)" if dropped else ""
    apply_style(fig, title=title or f"Agreement between maps: Spearman ρ, 95% bootstrap interval{note}",
                xaxis="Spearman ρ", yaxis="pair of maps", height=max(280, 60 * len(ok) + 160))
    fig.update_xaxes(range=[-1.05, 1.05])
    fig.update_yaxes(type="category", autorange="reversed")
    return fig


def atlas_overlap_figure(atlas, *, title: str | None = None):
    """Max |cos| between every pair of direction sets, next to the same statistic for a Haar-random span."""
    import plotly.graph_objects as go

    ov = atlas.overlaps
    if not len(ov):
        gone = ", ".join(k for k in ("sae", "decodeshare", "crh") if k in atlas.unavailable)
        raise InputError(f"the atlas has fewer than two direction sets to compare (not available: {gone})")
    labels = [f"{r.a} vs {r.b}" for r in ov.itertuples()]
    fig = go.Figure([
        go.Bar(y=labels, x=ov["max_cos"], orientation="h", name="measured", marker_color=QUALITATIVE[0],
               customdata=ov["best"], hovertemplate="%{y}<br>max cos %{x:.3f} %{customdata}<extra></extra>"),
        go.Bar(y=labels, x=ov["baseline_max_cos"], orientation="h", name="Haar-random span",
               marker_color="lightgrey", hovertemplate="%{y}<br>random %{x:.3f}<extra></extra>")])
    apply_style(fig, title=title or f"Direction overlaps at {atlas.site}", xaxis="max |cos|", yaxis="pair",
                height=max(300, 50 * len(ov) + 180), barmode="group")
    fig.update_xaxes(range=[0, 1.02])
    fig.update_yaxes(type="category", autorange="reversed")
    return fig
