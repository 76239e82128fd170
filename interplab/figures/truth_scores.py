"""Figures for Truth Scores, lineage inheritance and TruthProbe gating (spec truth_scores.md §9).

Pure builders: results in, `plotly.graph_objects.Figure` out; nothing here runs a model. Export any of them with
`interplab.figures.export(fig, "name.pdf")`.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from interplab.core.nan import finite_max, finite_min
from interplab.figures.style import (DIVERGING, QUALITATIVE, SEQUENTIAL, apply_style, explain_nan_cells,
                                     label_empty_bars)
from interplab.probes.truth.lineage import topk_jaccard
from interplab.probes.truth.scores import TruthScores
from interplab.probes.truth.weights import WP_COLUMNS


def _scores(x) -> np.ndarray:
    return np.asarray(getattr(x, "scores", x), dtype=np.float64)


def score_heatmap(ts, *, view: str = "raw", mode: str = "normalize", alpha: float = 1.0, rebase: str = "none",
                  title: str | None = None) -> go.Figure:
    """Layer x head heatmap of a Truth-Score map. view: "raw" (accuracy), "normalized" (per-layer min-max) or
    "gates" (truth_gates(mode, alpha, rebase=rebase), diverging at 1, negative gates outlined). Hover: S, fold std,
    rank, gate."""
    from interplab.interventions.head_gate import truth_gates

    s = _scores(ts)
    L, H = s.shape
    std = ts.fold_std if hasattr(ts, "fold_std") else np.zeros_like(s)
    rank = TruthScores.from_array(s).rank()
    gates = truth_gates(s, mode, alpha, rebase=rebase)
    custom = np.stack([s, std, rank, gates], -1)
    if view == "raw":
        z, cs, zmid, cbar = s, SEQUENTIAL, None, "S"
    elif view == "normalized":
        lo, hi = s.min(1, keepdims=True), s.max(1, keepdims=True)
        z, cs, zmid, cbar = (s - lo) / (hi - lo + 1e-6), SEQUENTIAL, None, "S (layer min-max)"
    elif view == "gates":
        z, cs, zmid, cbar = gates, DIVERGING, 1.0, f"gate ({mode}, α={alpha:g})"
    else:
        raise ValueError(f"view must be 'raw', 'normalized' or 'gates', got {view!r}")
    fig = go.Figure(go.Heatmap(
        z=z, x=list(range(H)), y=list(range(L)), colorscale=cs, zmid=zmid, customdata=custom,
        colorbar=dict(title=cbar),
        hovertemplate="layer %{y}, head %{x}<br>S = %{customdata[0]:.3f} ± %{customdata[1]:.3f} (fold std)"
                      "<br>rank %{customdata[2]}<br>gate %{customdata[3]:.3f}<extra></extra>"))
    if view == "gates" and (gates < 0).any():
        ly, hx = np.nonzero(gates < 0)
        fig.add_trace(go.Scatter(x=hx, y=ly, mode="markers", name="negative gate", hoverinfo="skip",
                                 marker=dict(symbol="square-open", size=14, color="black", line=dict(width=2))))
    step = getattr(ts, "accuracy_step", float("nan"))
    name = getattr(ts, "model", "") or ""
    cap = f"accuracy step 1/N_val = {step:.3f}" if np.isfinite(step) else "released map (no fold details)"
    fig.add_annotation(text=cap, xref="paper", yref="paper", x=0, y=-0.12, showarrow=False, font=dict(size=11))
    apply_style(fig, title=title or f"Truth Scores {name}".strip(), xaxis="head", yaxis="layer")
    fig.update_yaxes(autorange="reversed")
    return fig


def lineage_matrix(matrix, *, statistic: str = "pearson", title: str | None = None) -> go.Figure:
    """K x K heatmap of a lineage statistic (a DataFrame from `correlation_matrix`). NaN cells (maps of different
    shapes, which `correlation_matrix` does not compare) read 'n/a' with the reason on hover and under the plot."""
    z = matrix.to_numpy(dtype=float)
    fig = go.Figure(go.Heatmap(z=z, x=list(matrix.columns), y=list(matrix.index), colorscale=DIVERGING, zmid=0,
                               zmin=-1, zmax=1,
                               hovertemplate="%{y} vs %{x}: %{z:.3f} %{hovertext}<extra></extra>"))
    explain_nan_cells(fig, NOT_COMPARABLE)
    apply_style(fig, title=title or f"Truth-Score lineage matrix ({statistic})")
    fig.update_yaxes(autorange="reversed")
    return fig


NOT_COMPARABLE = "maps of different shapes are not compared"


def lineage_bars(matrix, reference: str, *, clip_negative: bool = False, title: str | None = None) -> go.Figure:
    """Bars of each map's statistic against `reference` (repo style; clip_negative is the repo's display option)."""
    row = matrix.loc[reference].drop(reference)
    vals = row.clip(lower=0) if clip_negative else row
    fig = go.Figure(go.Bar(x=list(row.index), y=vals.to_numpy(dtype=float), marker_color=QUALITATIVE[0],
                           hovertemplate="%{x}: %{y:.3f} %{hovertext}<extra></extra>"))
    label_empty_bars(fig, f"layers × heads differ from {reference}'s")
    apply_style(fig, title=title or f"vs {reference}" + (" (negatives clipped to 0)" if clip_negative else ""),
                yaxis="r")
    return fig


def pair_scatter(a, b, *, name_a: str = "a", name_b: str = "b", stats: Mapping | None = None) -> go.Figure:
    """S per head, model a vs model b, coloured by layer, annotated with r (and the centred r / perm p if given)."""
    A, B = _scores(a), _scores(b)
    L, H = A.shape
    layer, head = np.meshgrid(np.arange(L), np.arange(H), indexing="ij")
    fig = go.Figure(go.Scatter(
        x=A.ravel(), y=B.ravel(), mode="markers",
        marker=dict(color=layer.ravel(), colorscale=SEQUENTIAL, showscale=True, colorbar=dict(title="layer"), size=7),
        customdata=np.stack([layer.ravel(), head.ravel()], -1),
        hovertemplate="L%{customdata[0]} H%{customdata[1]}<br>" + f"{name_a}" + " %{x:.3f}<br>" + f"{name_b}"
                      + " %{y:.3f}<extra></extra>"))
    lo, hi = finite_min(np.r_[A.ravel(), B.ravel()], 0.0), finite_max(np.r_[A.ravel(), B.ravel()], 1.0)
    fig.add_trace(go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", line=dict(dash="dot", color="grey"),
                             showlegend=False, hoverinfo="skip"))
    if stats:
        txt = f"r = {stats['pearson']:.2f}, centred r = {stats['pearson_centered']:.2f}, ρ = {stats['spearman']:.2f}"
        if np.isfinite(stats.get("perm_p", np.nan)):
            txt += f", p = {stats['perm_p']:.3g}"
        fig.add_annotation(text=txt, xref="paper", yref="paper", x=0.02, y=0.98, showarrow=False, align="left")
    apply_style(fig, title=f"{name_b} vs {name_a}", xaxis=f"S ({name_a})", yaxis=f"S ({name_b})", legend=False)
    return fig


def null_histogram(null: np.ndarray, observed: float, p: float, *, title: str | None = None,
                   statistic: str = "Pearson r") -> go.Figure:
    """Within-layer head-shuffle null of a statistic (default Pearson r) with the observed value and p marked."""
    fig = go.Figure(go.Histogram(x=np.asarray(null), nbinsx=40, marker_color=QUALITATIVE[5], name="null"))
    null = np.asarray(null, dtype=float)
    # the label goes on the side of the line that faces the histogram, so an observed value far in the tail (the
    # usual case) does not push it off the figure
    finite = null[np.isfinite(null)]     # a null of constant maps can be all NaN (no correlation defined)
    right = bool(finite.size) and observed < float(np.median(finite))
    fig.add_vline(x=observed, line=dict(color=QUALITATIVE[3], width=3),
                  annotation_text=f"observed {statistic} = {observed:.2f}, p = {p:.3g}",
                  annotation_position="top right" if right else "top left")
    apply_style(fig, title=title or "Within-layer permutation null", xaxis=statistic, yaxis="count", legend=False)
    return fig


def per_layer_curves(curves: Mapping[str, np.ndarray], *, title: str | None = None,
                     yaxis: str = "within-layer r") -> go.Figure:
    """One line per named pair: a per-layer statistic (e.g. `per_layer_correlation`)."""
    fig = go.Figure()
    for i, (name, y) in enumerate(curves.items()):
        y = np.asarray(y, dtype=float)
        fig.add_trace(go.Scatter(x=np.arange(len(y)), y=y, mode="lines+markers", name=name,
                                 line=dict(color=QUALITATIVE[i % len(QUALITATIVE)])))
    apply_style(fig, title=title or "Per-layer correlation", xaxis="layer", yaxis=yaxis)
    return fig


def topk_jaccard_curve(pairs: Mapping[str, tuple], fracs: Sequence[float] = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3),
                       *, title: str | None = None) -> go.Figure:
    """Top-k Jaccard vs k (fraction of heads) for named (map_a, map_b) pairs."""
    fig = go.Figure()
    for i, (name, (a, b)) in enumerate(pairs.items()):
        fig.add_trace(go.Scatter(x=list(fracs), y=[topk_jaccard(a, b, f) for f in fracs], mode="lines+markers",
                                 name=name, line=dict(color=QUALITATIVE[i % len(QUALITATIVE)])))
    apply_style(fig, title=title or "Top-k overlap", xaxis="top-k fraction of heads", yaxis="Jaccard")
    return fig


def weight_preservation_lines(tables: Mapping[str, object], columns: Sequence[str] = WP_COLUMNS,
                              *, title: str | None = None) -> go.Figure:
    """Per-layer mean cosine of each weight measure; one subplot per measure, one line per named comparison."""
    fig = make_subplots(rows=1, cols=len(columns), subplot_titles=list(columns), shared_yaxes=True)
    for i, (name, df) in enumerate(tables.items()):
        per = df.groupby("layer")[list(columns)].mean()
        for j, c in enumerate(columns):
            fig.add_trace(go.Scatter(x=per.index, y=per[c], mode="lines+markers", name=name, legendgroup=name,
                                     showlegend=(j == 0), line=dict(color=QUALITATIVE[i % len(QUALITATIVE)])),
                          row=1, col=j + 1)
    apply_style(fig, title=title or "Weight preservation per layer (mean over heads)", height=360,
                width=max(720, 200 * len(columns)))
    fig.update_xaxes(title_text="layer")
    return fig


def weight_vs_score_change(wp, scores_a, scores_b, column: str = "cos_OV", *, rho: float | None = None,
                           title: str | None = None) -> go.Figure:
    """Scatter of a per-head weight similarity vs -|S_a - S_b|."""
    d = -np.abs(_scores(scores_a) - _scores(scores_b)).ravel()
    fig = go.Figure(go.Scatter(x=wp[column].to_numpy(), y=d, mode="markers",
                               marker=dict(color=wp["layer"].to_numpy(), colorscale=SEQUENTIAL, showscale=True,
                                           colorbar=dict(title="layer")),
                               customdata=wp[["layer", "head"]].to_numpy(),
                               hovertemplate="L%{customdata[0]} H%{customdata[1]}<br>%{x:.3f}, %{y:.3f}<extra></extra>"))
    t = title or f"{column} vs −|ΔS|" + (f" (Spearman ρ = {rho:.2f})" if rho is not None else "")
    apply_style(fig, title=t, xaxis=column, yaxis="−|S_base − S_desc|", legend=False)
    return fig


def gate_preview(gates, *, title: str | None = None) -> go.Figure:
    """Heatmap of gates (diverging at 1, negatives outlined) next to their histogram."""
    g = np.asarray(gates, dtype=float)
    L, H = g.shape
    fig = make_subplots(rows=1, cols=2, column_widths=[0.65, 0.35], subplot_titles=("gates", "histogram"))
    fig.add_trace(go.Heatmap(z=g, colorscale=DIVERGING, zmid=1.0, colorbar=dict(title="g", x=0.6),
                             hovertemplate="layer %{y}, head %{x}: g = %{z:.3f}<extra></extra>"), row=1, col=1)
    if (g < 0).any():
        ly, hx = np.nonzero(g < 0)
        fig.add_trace(go.Scatter(x=hx, y=ly, mode="markers", name="negative", hoverinfo="skip",
                                 marker=dict(symbol="square-open", size=12, color="black")), row=1, col=1)
    fig.add_trace(go.Histogram(x=g.ravel(), nbinsx=30, marker_color=QUALITATIVE[0], showlegend=False), row=1, col=2)
    fig.update_yaxes(autorange="reversed", title_text="layer", row=1, col=1)
    fig.update_xaxes(title_text="head", row=1, col=1)
    apply_style(fig, title=title or f"Gates: min {g.min():.3f}, max {g.max():.3f}, {(g < 0).sum()} negative",
                width=900)
    return fig


def evidence_scatter(scores, em, *, rho: float | None = None, title: str | None = None) -> go.Figure:
    """Truth Score vs evidence attention mass per head."""
    s, e = _scores(scores), np.asarray(em, dtype=float)
    L, H = s.shape
    layer, head = np.meshgrid(np.arange(L), np.arange(H), indexing="ij")
    fig = go.Figure(go.Scatter(x=s.ravel(), y=e.ravel(), mode="markers",
                               marker=dict(color=layer.ravel(), colorscale=SEQUENTIAL, showscale=True, size=8,
                                           colorbar=dict(title="layer")),
                               customdata=np.stack([layer.ravel(), head.ravel()], -1),
                               hovertemplate="L%{customdata[0]} H%{customdata[1]}<br>S %{x:.3f}<br>EM %{y:.3f}"
                                             "<extra></extra>"))
    t = title or "Truth Score vs evidence attention" + (f" (Spearman ρ = {rho:.2f})" if rho is not None else "")
    apply_style(fig, title=t, xaxis="Truth Score S", yaxis="evidence attention mass", legend=False)
    return fig


def evidence_group_bars(summary, *, title: str | None = None) -> go.Figure:
    """EM of top-k / bottom-k / random-k heads by S with bootstrap CIs (DataFrame: group, mean, lo, hi)."""
    fig = go.Figure(go.Bar(x=summary["group"], y=summary["mean"], marker_color=QUALITATIVE[:len(summary)],
                           error_y=dict(type="data", symmetric=False, array=summary["hi"] - summary["mean"],
                                        arrayminus=summary["mean"] - summary["lo"])))
    apply_style(fig, title=title or "Evidence attention of heads grouped by Truth Score (95% bootstrap CI)",
                yaxis="evidence attention mass", legend=False)
    return fig


def gating_sweep(df, *, metric: str = "context_acc", title: str | None = None) -> go.Figure:
    """Metric vs alpha, one line per (mode, site[, score source]); df has columns alpha, mode, site, metric."""
    fig = go.Figure()
    keys = [c for c in ("score_source", "mode", "site") if c in df]
    for i, (key, grp) in enumerate(df.groupby(keys, sort=True)):
        key = key if isinstance(key, tuple) else (key,)
        grp = grp.sort_values("alpha")
        err = None
        if f"{metric}_lo" in grp:
            err = dict(type="data", symmetric=False, array=grp[f"{metric}_hi"] - grp[metric],
                       arrayminus=grp[metric] - grp[f"{metric}_lo"])
        fig.add_trace(go.Scatter(x=grp["alpha"], y=grp[metric], mode="lines+markers", name=" / ".join(map(str, key)),
                                 error_y=err, line=dict(color=QUALITATIVE[i % len(QUALITATIVE)],
                                                        dash="solid" if "z" in key else "dash")))
    apply_style(fig, title=title or f"TruthProbe gating sweep: {metric}", xaxis="α", yaxis=metric)
    return fig


def probe_diagnostics(ts, *, title: str | None = None) -> go.Figure:
    """Per-layer box plots of fold accuracy (all heads and folds) and the training-loss curve."""
    fa = np.asarray(ts.fold_accuracy)
    F, L, H = fa.shape
    fig = make_subplots(rows=1, cols=2, subplot_titles=("fold accuracy per layer", "training loss"))
    for layer in range(L):
        fig.add_trace(go.Box(y=fa[:, layer].ravel(), name=str(layer), marker_color=QUALITATIVE[0],
                             showlegend=False), row=1, col=1)
    lc = np.asarray(getattr(ts, "loss_curve", []))
    if lc.size:
        fig.add_trace(go.Scatter(y=lc, mode="lines", showlegend=False, line=dict(color=QUALITATIVE[1])), row=1, col=2)
    fig.update_xaxes(title_text="layer", row=1, col=1)
    fig.update_xaxes(title_text="step", row=1, col=2)
    apply_style(fig, title=title or "Probe diagnostics", width=900)
    return fig


def planted_recovery_bars(ts, planted_heads: Sequence[Sequence[int]], *, title: str | None = None) -> go.Figure:
    """Every head's Truth Score, sorted, with the planted (designated) heads highlighted: the validation view."""
    S = _scores(ts)
    L, H = S.shape
    planted = {(int(a), int(b)) for a, b in planted_heads}
    order = np.argsort(-S.ravel(), kind="stable")
    labels = [f"L{i // H}H{i % H}" for i in order]
    colors = [QUALITATIVE[3] if (i // H, i % H) in planted else QUALITATIVE[5] for i in order]
    fig = go.Figure(go.Bar(x=labels, y=S.ravel()[order], marker_color=colors,
                           hovertemplate="%{x}: S = %{y:.3f}<extra></extra>"))
    fig.add_hline(y=0.5, line=dict(dash="dot", color="grey"))
    apply_style(fig, title=title or "Truth Scores, planted heads highlighted", xaxis="head (by rank)",
                yaxis="Truth Score S", legend=False)
    return fig


def significant_heads_per_layer(per_layer, *, title: str | None = None) -> go.Figure:
    """Significant heads per layer under the family-wise (maxT) and FDR (BH) rules (`FactsTruthMap.per_layer()`),
    with each layer's best S on a second axis."""
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(go.Bar(x=per_layer["layer"], y=per_layer["n_sig_bh"], name="BH q ≤ α",
                         marker_color=QUALITATIVE[5]))
    fig.add_trace(go.Bar(x=per_layer["layer"], y=per_layer["n_sig_maxt"], name="maxT p ≤ α",
                         marker_color=QUALITATIVE[3]))
    fig.add_trace(go.Scatter(x=per_layer["layer"], y=per_layer["max_S"], name="layer's max S", mode="lines+markers",
                             line=dict(color=QUALITATIVE[0])), secondary_y=True)
    apply_style(fig, title=title or "Where the significant heads sit", xaxis="layer", yaxis="significant heads")
    fig.update_layout(barmode="overlay")
    fig.update_yaxes(title_text="max S", secondary_y=True)
    return fig
