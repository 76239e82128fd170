"""CRH figures (spec methods/crh.md §9): pure builders result -> plotly Figure; they never run a model.

* `cylinder_scene`: 3-D view in cylinder coordinates (x = ⟨·, ê1⟩, y = ⟨·, ê2⟩, z = ⟨·, û⟩): axis, translucent
  cylinder at the fitted radius, difference-vector endpoints, a normal-plane disk with sector wedges coloured by
  sensitivity, and one sample's ô arrow + penalty-vector polyline 0 → L cosθ û → v(L, p) with a p slider.
* `sector_polar`: Barpolar maps (angle = β bin, radius = strength step, colour = label-2 / label-3 rate),
  population + per-sample dropdown.
* `penalty_heatmaps` (Implication 1), `pairwise_scatter` (Implication 3), `baseline_curves`,
  `cylinder_stats_figure` (score / plane EV per concept × layer), `helix_figure`, `synthetic_recovery_figure`,
  `steering_vectors_figure` (spiral-probe optimisation: loss, p_dst and cos to Δ̂ per norm budget w).
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from interplab.core.errors import InputError
from interplab.core.nan import finite_max, finite_min
from interplab.figures.style import PROBABILITY, QUALITATIVE, SEQUENTIAL, apply_style

__all__ = ["cylinder_scene", "sector_polar", "penalty_heatmaps", "pairwise_scatter", "baseline_curves",
           "cylinder_stats_figure", "helix_figure", "synthetic_recovery_figure", "trig_law_figure",
           "steering_vectors_figure", "validation_sector_maps"]


def _go():
    import plotly.graph_objects as go

    return go


def _colors(values, scale=SEQUENTIAL):
    from plotly.colors import sample_colorscale

    v = np.asarray(values, np.float64)
    lo, hi = finite_min(v), finite_max(v)
    t = np.zeros_like(v) if not hi > lo else (v - lo) / (hi - lo)
    return sample_colorscale(scale, np.nan_to_num(t).tolist())


def cylinder_scene(cylinder, *, points=None, point_values=None, point_label: str = "value", sector_auc=None,
                   disk_height: float | None = None, sample_diff=None, strength: float | None = None,
                   ps: Sequence[float] | None = None, max_points: int = 600, title: str | None = None):
    """3-D cylinder view. points: [m, d] vectors to show (default: the fitted diffs' own coordinates);
    point_values: [m] colour (labels or M_i); sector_auc: [n_bins] sensitivity per sector wedge (bins centred at
    2πk/n_bins); sample_diff: [d] one sample's diff vector → ô arrow + penalty polylines for each p in `ps` at
    `strength` (default 3‖a‖/2) with a slider over p."""
    go = _go()
    fig = go.Figure()
    if points is None:
        x = cylinder.xy[:, 0]
        y = cylinder.xy[:, 1]
        z = cylinder.heights
    else:
        c = cylinder.coords(points)
        x, y, z = c["x"], c["y"], c["z"]
    if x.size > max_points:
        idx = np.random.default_rng(0).choice(x.size, max_points, replace=False)
        x, y, z = x[idx], y[idx], z[idx]
        point_values = None if point_values is None else np.asarray(point_values)[idx]
    zmin, zmax = float(min(0.0, z.min())), float(max(z.max(), 1e-9))
    # axis
    fig.add_trace(go.Scatter3d(x=[0, 0], y=[0, 0], z=[zmin, zmax * 1.1], mode="lines", name="axis û",
                               line=dict(color="black", width=8)))
    # translucent cylinder at the fitted radius
    th = np.linspace(0, 2 * math.pi, 48)
    zz = np.linspace(zmin, zmax * 1.1, 2)
    TH, ZZ = np.meshgrid(th, zz)
    R = cylinder.radius
    fig.add_trace(go.Surface(x=R * np.cos(TH), y=R * np.sin(TH), z=ZZ, opacity=0.15, showscale=False,
                             colorscale=[[0, "#56B4E9"], [1, "#56B4E9"]], name=f"cylinder r={R:.3g}",
                             hoverinfo="skip", showlegend=True))
    # endpoints
    marker = dict(size=3, opacity=0.8)
    if point_values is not None:
        marker.update(color=np.asarray(point_values, np.float64), colorscale=SEQUENTIAL, showscale=True,
                      colorbar=dict(title=point_label, x=1.02, len=0.5))
    else:
        marker.update(color=QUALITATIVE[1])
    fig.add_trace(go.Scatter3d(x=x, y=y, z=z, mode="markers", marker=marker, name="diff endpoints"))
    if sector_auc is not None:
        _sector_disk(go, fig, np.asarray(sector_auc, np.float64), R,
                     float(np.median(z)) if disk_height is None else float(disk_height))
    slider = None
    if sample_diff is not None:
        slider = _penalty_polylines(go, fig, cylinder, np.asarray(sample_diff, np.float64).ravel(),
                                    float(strength) if strength is not None else 1.5 * cylinder.axis_norm,
                                    np.asarray(ps if ps is not None else np.linspace(0, 1, 11), np.float64))
    t = title or (f"CRH cylinder — 2-D view of a (d−1)-dim normal plane: top-2 EV {cylinder.plane_explained:.2f} "
                  f"(LRH null {cylinder.null_plane_explained:.2f}), score {cylinder.cylinder_score:.1f}")
    apply_style(fig, title=t, height=640)
    fig.update_layout(scene=dict(xaxis_title="ê1", yaxis_title="ê2", zaxis_title="û (axis)", aspectmode="cube"))
    if slider:
        fig.update_layout(sliders=slider)
    return fig


def _sector_disk(go, fig, auc: np.ndarray, R: float, h: float) -> None:
    """Normal-plane disk at height h: one Mesh3d wedge per sector bin, coloured by its AUC."""
    B = auc.size
    cols = _colors(auc, PROBABILITY)
    half = math.pi / B
    for k in range(B):
        a = np.linspace(2 * math.pi * k / B - half, 2 * math.pi * k / B + half, 6)
        xs = np.r_[0.0, R * 1.3 * np.cos(a)]
        ys = np.r_[0.0, R * 1.3 * np.sin(a)]
        n = xs.size
        fig.add_trace(go.Mesh3d(x=xs, y=ys, z=np.full(n, h), i=np.zeros(n - 2, int), j=np.arange(1, n - 1),
                                k=np.arange(2, n), color=cols[k], opacity=0.55,
                                name=f"β={math.degrees(2 * math.pi * k / B):.0f}°",
                                hovertext=f"β={math.degrees(2 * math.pi * k / B):.0f}°, AUC={auc[k]:.3f}",
                                hoverinfo="text", showlegend=False))


def _penalty_polylines(go, fig, cylinder, d: np.ndarray, L: float, P: np.ndarray) -> list:
    """One sample's d_i and ô arrow, and its penalty polylines 0 → axial part → v(L, p), one per p behind a
    slider (returned)."""
    from interplab.probes.crh import penalty_vector

    R = cylinder.radius
    cd = cylinder.coords(d)
    o_dir = np.array([cd["x"], cd["y"]])
    o_dir = o_dir / max(np.linalg.norm(o_dir), 1e-12)
    fig.add_trace(go.Scatter3d(x=[0, cd["x"]], y=[0, cd["y"]], z=[0, cd["z"]], mode="lines+markers",
                               line=dict(color=QUALITATIVE[3], width=5), marker=dict(size=3),
                               name="sample d_i"))
    fig.add_trace(go.Scatter3d(x=[0, o_dir[0] * R], y=[0, o_dir[1] * R], z=[0, 0], mode="lines",
                               line=dict(color=QUALITATIVE[4], width=6, dash="dash"), name="ô_i (plane view)"))
    n_fixed = len(fig.data)
    for j, p in enumerate(P):
        v = penalty_vector(d, cylinder.axis, L, p)
        cv = cylinder.coords(v)
        ax = cylinder.coords(cylinder.axis * float(cv["z"]))
        fig.add_trace(go.Scatter3d(x=[0, ax["x"], cv["x"]], y=[0, ax["y"], cv["y"]], z=[0, ax["z"], cv["z"]],
                                   mode="lines+markers", line=dict(color=QUALITATIVE[2], width=7),
                                   marker=dict(size=4), name=f"v(L={L:.3g}, p={p:.2f})", visible=(j == 0)))
    steps = []
    for j, p in enumerate(P):
        vis = [True] * n_fixed + [k == j for k in range(P.size)]
        steps.append(dict(method="update", args=[{"visible": vis}], label=f"{p:.2f}"))
    return [dict(active=0, currentvalue=dict(prefix=f"penalty p (L={L:.3g}): "), steps=steps, pad=dict(t=30))]


# the judge's labels 2 and 3 (spec crh.md §6), named for what they mean
CONCEPT = "rate: reply names the concept (judge label 2)"
GIBBERISH = "rate: reply is gibberish (judge label 3)"


def sector_polar(sector_map, *, title: str | None = None):
    """Twin Barpolar maps (label 2 | label 3): angle = β bin, radius = strength step, colour = rate; a dropdown
    switches between the population map (rate over samples) and each sample's own map."""
    go = _go()
    from plotly.subplots import make_subplots

    lab = sector_map.labels
    S, B, K = lab.shape
    theta = np.degrees(sector_map.bin_angles)
    width = 360.0 / B * 0.95
    fig = make_subplots(rows=1, cols=2, specs=[[{"type": "polar"}, {"type": "polar"}]],
                        subplot_titles=(CONCEPT, GIBBERISH))
    # the titles sit above the 90° angular tick labels, not on them
    fig.update_annotations(y=1.1, yanchor="bottom")
    views = [("population", np.arange(S))] + [(f"sample {i}", np.array([i])) for i in range(S)]
    per_view = 2
    th = np.tile(theta, K)                                                          # bar (b, k) at index k*B + b
    base = np.repeat(np.arange(K), B).astype(np.float64)
    Lk = np.repeat(sector_map.strengths, B)
    for vi, (name, rows) in enumerate(views):
        for col, label in ((1, 2), (2, 3)):
            rate = (lab[rows] == label).mean(0)                                # [B, K]
            fig.add_trace(go.Barpolar(
                r=np.ones(B * K), base=base, theta=th, width=np.full(B * K, width),
                customdata=np.stack([base + 1, Lk], 1),
                marker=dict(color=rate.T.ravel(), colorscale=PROBABILITY if label == 2 else "Reds", cmin=0, cmax=1,
                            showscale=True,
                            colorbar=dict(title="rate", orientation="h", x=0.2 if col == 1 else 0.8, xanchor="center",
                                          y=-0.2, len=0.35, thickness=12),  # below the 270° label
                            line=dict(width=0)),
                hovertemplate="β=%{theta:.0f}°<br>step %{customdata[0]:.0f} (L=%{customdata[1]:.3g})"
                              f"<br>rate=%{{marker.color:.2f}}<extra>{name}</extra>",
                showlegend=False, visible=(vi == 0)), row=1, col=col)
    buttons = []
    for vi, (name, _) in enumerate(views):
        vis = [False] * (len(views) * per_view)
        vis[vi * per_view:(vi + 1) * per_view] = [True] * per_view
        buttons.append(dict(label=name, method="update", args=[{"visible": vis}]))
    c = sector_map.centre
    t = title or (f"Sector map (γ={sector_map.gamma_deg:.0f}°, {B} bins, {K} strengths; "
                  f"population centre {'n/a' if math.isnan(c) else f'{math.degrees(c):.0f}°'})")
    apply_style(fig, title=t, height=660)
    radial = dict(range=[0, K], showticklabels=False, ticks="")
    # the view menu sits above the subplot titles (which sit above the 90° labels): nothing overlaps
    fig.update_layout(updatemenus=[dict(buttons=buttons, direction="down", x=1.0, y=1.42, xanchor="right",
                                        yanchor="top")],
                      polar=dict(radialaxis=radial, hole=0.05), polar2=dict(radialaxis=radial, hole=0.05),
                      margin=dict(t=max(180, fig.layout.margin.t or 0), b=130))
    fig.add_annotation(text="radius = strength step (inner = weakest)", showarrow=False, xref="paper",
                       yref="paper", x=0.5, y=-0.36)
    return fig


def penalty_heatmaps(penalty_map, *, exclude_step1: bool = True, title: str | None = None):
    """Implication-1 heatmaps: y = strength step, x = p (descending), colour = label-2 | label-3 rate."""
    go = _go()
    from plotly.subplots import make_subplots

    r2 = penalty_map.rates(2, exclude_step1=exclude_step1)
    r3 = penalty_map.rates(3, exclude_step1=exclude_step1)
    order = np.argsort(-penalty_map.ps)
    xs = [f"{p:.2f}" for p in penalty_map.ps[order]]
    ys = np.arange(1, penalty_map.strengths.size + 1)
    fig = make_subplots(rows=1, cols=2, subplot_titles=(CONCEPT, GIBBERISH), horizontal_spacing=0.2)
    top2 = float(np.nanmax(r2)) if np.isfinite(r2).any() else 0.0
    top3 = float(np.nanmax(r3)) if np.isfinite(r3).any() else 0.0
    fig.add_trace(go.Heatmap(z=r2[:, order], x=xs, y=ys, colorscale=PROBABILITY, zmin=0, zmax=max(0.05, top2),
                             colorbar=dict(x=0.41, title="rate"),
                             customdata=np.repeat(penalty_map.strengths[:, None], len(xs), 1),
                             hovertemplate="p=%{x}<br>step %{y} (L=%{customdata:.3g})<br>rate %{z:.3f}<extra></extra>"),
                  row=1, col=1)
    fig.add_trace(go.Heatmap(z=r3[:, order], x=xs, y=ys, colorscale="Reds", zmin=0, zmax=max(0.05, top3),
                             colorbar=dict(x=1.0, title="rate"),
                             hovertemplate="p=%{x}<br>step %{y}<br>rate %{z:.3f}<extra></extra>"), row=1, col=2)
    apply_style(fig, title=title or "Penalty steering (Implication 1): step × p", height=460)
    fig.update_xaxes(title_text="penalty p (descending)")
    fig.update_yaxes(title_text="strength step", row=1, col=1)
    return fig


def pairwise_scatter(pairwise, *, max_points: int = 3000, title: str | None = None):
    """Implication 3: cos(d_i, d_j) vs |M_i − M_j| (≤ max_points points) with the 20-bin mean ± SEM."""
    go = _go()
    x, y = pairwise.subsample(max_points)
    b = pairwise.bins
    cnt = np.asarray(b["count"])
    keep = cnt > 0
    fig = go.Figure()
    fig.add_trace(go.Scattergl(x=x, y=y, mode="markers", marker=dict(size=4, opacity=0.35, color=QUALITATIVE[0]),
                               name="pairs"))
    fig.add_trace(go.Scatter(x=np.asarray(b["centre"])[keep], y=np.asarray(b["mean"])[keep],
                             error_y=dict(type="data", array=np.nan_to_num(np.asarray(b["sem"])[keep])),
                             mode="lines+markers", line=dict(color=QUALITATIVE[3], width=3), name="bin mean ± SEM"))
    apply_style(fig, title=title or (f"Implication 3: r = {pairwise.r:.3f}, permutation p = {pairwise.p_perm:.3g} "
                                     f"({pairwise.x.size} pairs, {pairwise.n_samples} samples)"),
                xaxis="cos(d_i, d_j)", yaxis="|M_i − M_j|", height=460)
    return fig


def baseline_curves(curves, *, title: str | None = None):
    """Label-2 / label-3 rates vs strength step per method with 95% bands (mean ± 1.96·SEM across samples)."""
    go = _go()
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=(CONCEPT, GIBBERISH))
    steps = np.arange(1, curves.strengths.size + 1)
    for col, label in ((1, 2), (2, 3)):
        m, ci = curves.rates(label)
        for i, name in enumerate(curves.methods):
            c = QUALITATIVE[i % len(QUALITATIVE)]
            fig.add_trace(go.Scatter(x=np.r_[steps, steps[::-1]], y=np.r_[m[i] + ci[i], (m[i] - ci[i])[::-1]],
                                     fill="toself", line=dict(width=0), fillcolor=c, opacity=0.15, hoverinfo="skip",
                                     showlegend=False, legendgroup=name), row=1, col=col)
            fig.add_trace(go.Scatter(x=steps, y=m[i], mode="lines+markers", line=dict(color=c), name=name,
                                     legendgroup=name, showlegend=(col == 1)), row=1, col=col)
    apply_style(fig, title=title or "Baseline steering vs strength step (95% bands)", height=440)
    fig.update_xaxes(title_text="step")
    fig.update_yaxes(title_text="rate", range=[-0.02, 1.02])
    return fig


def elicitation_curves(summary, *, title: str | None = None):
    """Concept rate and fluent concept rate vs strength step per method (mean over concepts, 95 % bootstrap bands
    over concepts), the unsteered null as a dashed line (`probes.crh.elicitation.elicitation_summary`)."""
    go = _go()
    from plotly.subplots import make_subplots

    for c in ("method", "step", "concept_rate", "fluent_concept_rate"):
        if c not in summary.columns:
            raise InputError(f"elicitation summary needs a {c!r} column; has {list(summary.columns)}")
    fig = make_subplots(rows=1, cols=3, subplot_titles=("concept (judge label 2)", "concept and fluent",
                                                        "gibberish (label 3)"))
    null = summary[summary["method"] == "unsteered"]
    methods = [m for m in dict.fromkeys(summary["method"]) if m != "unsteered"]
    for col, key in ((1, "concept_rate"), (2, "fluent_concept_rate"), (3, "gibberish_rate")):
        for i, name in enumerate(methods):
            g = summary[summary["method"] == name].sort_values("step")
            c = QUALITATIVE[i % len(QUALITATIVE)]
            x = g["step"].to_numpy()
            fig.add_trace(go.Scatter(x=np.r_[x, x[::-1]], y=np.r_[g[f"{key}_hi"], g[f"{key}_lo"].to_numpy()[::-1]],
                                     fill="toself", line=dict(width=0), fillcolor=c, opacity=0.12,
                                     hoverinfo="skip", showlegend=False, legendgroup=name), row=1, col=col)
            fig.add_trace(go.Scatter(x=x, y=g[key], mode="lines+markers", line=dict(color=c), name=name,
                                     legendgroup=name, showlegend=(col == 1)), row=1, col=col)
        if len(null):
            fig.add_hline(y=float(null[key].iloc[0]), line=dict(dash="dash", color="grey"), row=1, col=col)
    apply_style(fig, title=title or "Steering vs strength step: mean over concepts (95 % bootstrap over concepts; "
                                    "dashed: unsteered)", height=440)
    fig.update_xaxes(title_text="step")
    fig.update_yaxes(title_text="rate", range=[-0.02, 1.02])
    return fig


def cylinder_stats_figure(frame, *, value: str = "cylinder_score", title: str | None = None):
    """Heatmap concept × layer of a cylinder statistic (columns: concept, layer, `value`)."""
    go = _go()
    for c in ("concept", "layer", value):
        if c not in frame.columns:
            raise InputError(f"cylinder stats frame needs a {c!r} column; has {list(frame.columns)}")
    piv = frame.pivot_table(index="concept", columns="layer", values=value)
    fig = go.Figure(go.Heatmap(z=piv.values, x=[f"L{c}" for c in piv.columns], y=list(piv.index),
                               colorscale=SEQUENTIAL, colorbar=dict(title=value),
                               text=np.round(piv.values, 2), texttemplate="%{text}"))
    apply_style(fig, title=title or f"{value} per concept and layer", xaxis="layer", yaxis="concept", height=420)
    return fig


def helix_figure(fit, *, title: str | None = None):
    """PCA-3-D of a steering trajectory coloured by index (w order), with the fitted helix mapped into PC space."""
    go = _go()
    Z = fit.Z
    k = min(3, Z.shape[1])
    Zp = np.zeros((Z.shape[0], 3))
    Zp[:, :k] = Z[:, :k]
    Zh = (fit.targets() - fit.intercept) @ np.linalg.pinv(fit.coef).T
    Zhp = np.zeros((Zh.shape[0], 3))
    Zhp[:, :k] = Zh[:, :k]
    fig = go.Figure()
    fig.add_trace(go.Scatter3d(x=Zp[:, 0], y=Zp[:, 1], z=Zp[:, 2], mode="markers+lines",
                               marker=dict(size=4, color=np.arange(Z.shape[0]), colorscale=SEQUENTIAL,
                                           colorbar=dict(title="index (w)")), name="trajectory"))
    fig.add_trace(go.Scatter3d(x=Zhp[:, 0], y=Zhp[:, 1], z=Zhp[:, 2], mode="lines",
                               line=dict(color=QUALITATIVE[3], width=5), name="fitted helix"))
    s = fit.summary()
    apply_style(fig, title=title or (f"Spiral probe ({fit.mode}): n = {fit.n_rot:.3f} turns, R²(t, cos, sin) = "
                                     f"{s['r2_t']:.2f}, {s['r2_cos']:.2f}, {s['r2_sin']:.2f}"), height=560)
    fig.update_layout(scene=dict(xaxis_title="PC1", yaxis_title="PC2", zaxis_title="PC3"))
    return fig


def synthetic_recovery_figure(frame, *, title: str | None = None):
    """Box plots of the planted-cylinder recovery errors over seeds (columns ending in _deg / radius_rel_err)
    with the spec's thresholds as dashed lines."""
    go = _go()
    thresholds = {"axis_deg": 6.0, "plane_deg": 6.0, "azimuth_deg": 8.0, "centre_deg": 15.0, "radius_rel_err": 0.10}
    cols = [c for c in thresholds if c in frame.columns]
    if not cols:
        raise InputError(f"recovery frame needs some of {list(thresholds)}; has {list(frame.columns)}")
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=len(cols), subplot_titles=cols)
    for i, c in enumerate(cols):
        fig.add_trace(go.Box(y=frame[c], name=c, boxpoints="all", marker=dict(color=QUALITATIVE[i])), row=1, col=i + 1)
        fig.add_hline(y=thresholds[c], line=dict(dash="dash", color="black"), row=1, col=i + 1)
    apply_style(fig, title=title or "Planted-cylinder recovery over seeds (dashed: spec thresholds)", legend=False,
                height=420)
    return fig


def trig_law_figure(scan, *, title: str | None = None):
    """Implication 2: max-over-p Pearson r and its (uncorrected) p-value vs the exponent a."""
    go = _go()
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=("max_p r(a)", "p-value of max_p r (uncorrected)"))
    fig.add_trace(go.Scatter(x=scan.exponents, y=scan.r_max, mode="lines", name="max r"), row=1, col=1)
    fig.add_trace(go.Scatter(x=scan.exponents, y=scan.p_value, mode="lines", name="p-value"), row=1, col=2)
    fig.update_yaxes(type="log", row=1, col=2)
    fig.update_xaxes(title_text="exponent a")
    apply_style(fig, title=title or (f"Implication 2: max r = {scan.global_r:.3f} at a = {scan.global_a:.2f}; "
                                     f"permutation p (max over grid) = {scan.perm_p:.3g}; "
                                     f"{scan.n_negative_cos} samples with cos θ < 0 "
                                     f"({scan.config.get('negative_cos')})"), legend=False, height=420)
    return fig


def steering_vectors_figure(sv, *, title: str | None = None):
    """Spiral-probe optimisation (`SteeringVectors`): loss before / after the Adam steps, final p_src / p_dst, and
    cos(v_w, Δ̂) (1 = on the LRH line) against the norm budget w."""
    go = _go()
    from plotly.subplots import make_subplots

    ws = np.asarray(sv.ws)
    fig = make_subplots(rows=1, cols=3, subplot_titles=("loss (init → final)", "final p (softmax(T·logits))",
                                                        "cos(v_w, Δ̂)"))
    fig.add_trace(go.Scatter(x=ws, y=sv.losses[:, 0], mode="lines+markers", name="loss at w·dist·Δ̂",
                             marker=dict(color=QUALITATIVE[0])), row=1, col=1)
    fig.add_trace(go.Scatter(x=ws, y=sv.losses[:, -1], mode="lines+markers", name="loss after optimisation",
                             marker=dict(color=QUALITATIVE[1])), row=1, col=1)
    fig.add_trace(go.Scatter(x=ws, y=sv.p_src, mode="lines+markers", name="p_src", marker=dict(color=QUALITATIVE[2])),
                  row=1, col=2)
    fig.add_trace(go.Scatter(x=ws, y=sv.p_dst, mode="lines+markers", name="p_dst", marker=dict(color=QUALITATIVE[3])),
                  row=1, col=2)
    fig.add_trace(go.Scatter(x=ws, y=sv.cos_to_reference(), mode="lines+markers", name="cos to Δ̂",
                             marker=dict(color=QUALITATIVE[4 % len(QUALITATIVE)])), row=1, col=3)
    fig.update_yaxes(type="log", row=1, col=2)
    fig.update_xaxes(title_text="w (budget / dist)")
    apply_style(fig, title=title or (f"Spiral-probe optimisation: dist = {sv.dist:.3g}, t* = {sv.t_star}, "
                                     f"{sv.losses.shape[1] - 1} Adam steps"), height=420)
    return fig


def validation_sector_maps(maps, *, seed: int | None = None, title: str | None = None):
    """Measured sector concept-rate map (population AUC per bin) of each `validate-crh` condition against the planted
    sector map g, both over the bins' angle in the planted (e1, e2) frame minus ψ (one seed; default the first)."""
    go = _go()
    if maps is None or len(maps) == 0:
        raise InputError("validation_sector_maps needs the `maps` table of a validate-crh run")
    seed = int(maps["seed"].iloc[0]) if seed is None else int(seed)
    m = maps[maps["seed"] == seed]
    fig = go.Figure()
    for i, (cond, sub) in enumerate(m.groupby("condition", sort=False)):
        x = np.asarray(sub["planted_beta_deg"], np.float64)
        o = np.argsort(x)
        fig.add_trace(go.Scatter(x=x[o], y=np.asarray(sub["auc"])[o], mode="lines+markers", name=f"measured: {cond}",
                                 line=dict(color=QUALITATIVE[i % len(QUALITATIVE)])))
        if cond == "planted":
            fig.add_trace(go.Scatter(x=x[o], y=np.asarray(sub["planted_g"])[o], mode="lines", name="planted g",
                                     line=dict(color="black", dash="dot")))
    apply_style(fig, title=title or f"Planted CRH organism: sector maps (seed {seed})",
                xaxis="bin angle in the planted frame (deg)", yaxis="concept rate (AUC over strength) / g")
    return fig
