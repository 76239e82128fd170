"""DecodeShare figures: pure functions of results (never run a model). Each returns a plotly Figure.

* `variance_share_heatmap(ss)`: r_{t,i} (tasks x components, log colour) with cells >= tau outlined by a
  contour, shared columns marked, plus bars of #tasks >= tau per component with the m line.
* `scree_figure({label: ss})`: cumulative explained variance with the rho line and k marked (paper vs repo).
* `sensitivity_figure(df)`: |S| and k vs tau and vs rho with the Lemma A.3 bound (df from `sensitivity_sweep`).
* `null_histogram(results)`: Null-1 / Null-2 distributions of |S| with the observed value and p.
* `principal_angle_figure({label: angles})`: CDFs of principal angles with mean/p50/p95 in the legend.
* `ablation_figure(summary)`: grouped bars (task x condition) of accuracy with bootstrap CIs.
* `alpha_sweep_figure(summary)`: accuracy vs alpha per condition with CI bands.
* `h3_grid_figure(grid)`: estimator x locus heatmap of mean delta, annotated with edited positions and energy.
* `steering_figure(df)`: effect of v vs its repaired version at matched norm, per scale.
* `layer_summary_figure(df)`: |S| and k per layer with the permutation-null p-values.
* `patchback_figure(table)`: rescue-rate bars by decode-step window W and patch source (spec figure 10).
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from interplab.figures.style import QUALITATIVE, SEQUENTIAL, apply_style, legend_below

__all__ = [
    "variance_share_heatmap", "scree_figure", "sensitivity_figure", "null_histogram", "principal_angle_figure",
    "ablation_figure", "alpha_sweep_figure", "h3_grid_figure", "steering_figure", "layer_summary_figure",
    "patchback_figure", "ranking_scatter_figure", "validation_bars",
]


def _go():
    import plotly.graph_objects as go

    return go


def variance_share_heatmap(ss, *, max_components: int | None = 200, title: str | None = None):
    """Per-task variance shares r_{t,i} (log10 colour) with the tau contour, S marked, and #tasks >= tau bars."""
    go = _go()
    from plotly.subplots import make_subplots

    sh = np.asarray(ss.shares, dtype=float)
    k = sh.shape[1] if max_components is None else min(sh.shape[1], max_components)
    sh = sh[:, :k]
    tau = ss.tau
    z = np.log10(np.clip(sh, 1e-12, None))
    comps = np.arange(k)
    tasks = list(ss.tasks)
    shared = np.zeros(k, dtype=bool)
    sidx = np.asarray(ss.shared_idx, dtype=int)
    shared[sidx[sidx < k]] = True
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.7, 0.3], vertical_spacing=0.06)
    fig.add_trace(go.Heatmap(z=z, x=comps, y=tasks, colorscale=SEQUENTIAL,
                             colorbar=dict(title="log10 r", len=0.6, y=0.7, x=1.02),
                             customdata=sh, hovertemplate="task %{y}<br>component %{x}<br>r = %{customdata:.3g}"
                                                          "<extra></extra>"), row=1, col=1)
    ti, ci = np.nonzero(sh >= tau)
    fig.add_trace(go.Scatter(x=comps[ci], y=[tasks[i] for i in ti], mode="markers",
                             marker=dict(symbol="circle-open", size=7, color="white", line=dict(width=1.5)),
                             name=f"r >= tau ({tau:.3g})", hoverinfo="skip"), row=1, col=1)
    counts = np.asarray(ss.counts)[:k]
    colors = np.where(shared, QUALITATIVE[3], QUALITATIVE[0])
    fig.add_trace(go.Bar(x=comps, y=counts, marker_color=colors, name="#tasks with r >= tau",
                         hovertemplate="component %{x}: %{y} tasks<extra></extra>"), row=2, col=1)
    fig.add_hline(y=ss.m_used, line_dash="dash", line_color="black", row=2, col=1,
                  annotation_text=f"m = {ss.m_used}", annotation_position="top left")
    if shared.any():
        fig.add_trace(go.Scatter(x=comps[shared], y=[tasks[-1]] * int(shared.sum()), mode="markers",
                                 marker=dict(symbol="triangle-down", size=9, color=QUALITATIVE[3]),
                                 name=f"shared (|S| = {ss.k_s})", hoverinfo="skip"), row=1, col=1)
    apply_style(fig, title=title or f"Per-task variance shares ({ss.mode} mode, k = {ss.k}, |S| = {ss.k_s}, "
                                    f"tau = {tau:.3g})", height=540)
    legend_below(fig)
    fig.update_xaxes(title_text="pooled component", row=2, col=1)
    fig.update_yaxes(title_text="#tasks", row=2, col=1)
    return fig


def scree_figure(subspaces: Mapping[str, object], *, title: str = "Cumulative explained variance"):
    go = _go()
    fig = go.Figure()
    for i, (label, ss) in enumerate(subspaces.items()):
        c = QUALITATIVE[i % len(QUALITATIVE)]
        cum = np.cumsum(ss.explained)
        fig.add_trace(go.Scatter(x=np.arange(1, len(cum) + 1), y=cum, mode="lines", name=f"{label} (k = {ss.k})",
                                 line=dict(color=c)))
        fig.add_vline(x=ss.k, line_dash="dot", line_color=c)
        rho = ss.config.rho
    if subspaces:
        fig.add_hline(y=rho, line_dash="dash", annotation_text=f"rho = {rho:g}")
    return apply_style(fig, title=title, xaxis="number of components", yaxis="cumulative explained variance")


def sensitivity_figure(df, *, title: str = "Sensitivity of |S| and k"):
    """df columns: rho, tau, k, k_s, bound (from `sensitivity_sweep`). Left: vs tau at the default rho; right: vs rho
    at the default tau."""
    go = _go()
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=("vs tau", "vs rho"))
    rho0 = df.attrs.get("rho", float(df["rho"].iloc[0]))
    tau0 = df.attrs.get("tau", float(df["tau"].iloc[0]))
    a = df[np.isclose(df["rho"], rho0)].sort_values("tau")
    b = df[np.isclose(df["tau"], tau0)].sort_values("rho")
    fig.add_trace(go.Scatter(x=a["tau"], y=a["k_s"], mode="lines+markers", name="|S|",
                             line=dict(color=QUALITATIVE[3])), row=1, col=1)
    fig.add_trace(go.Scatter(x=a["tau"], y=a["k"], mode="lines", name="k", line=dict(color=QUALITATIVE[0])),
                  row=1, col=1)
    fig.add_trace(go.Scatter(x=a["tau"], y=a["bound"], mode="lines", name="|T|/(m tau) (Lemma A.3)",
                             line=dict(color="gray", dash="dash")), row=1, col=1)
    fig.add_trace(go.Scatter(x=b["rho"], y=b["k_s"], mode="lines+markers", name="|S| (vs rho)", showlegend=False,
                             line=dict(color=QUALITATIVE[3])), row=1, col=2)
    fig.add_trace(go.Scatter(x=b["rho"], y=b["k"], mode="lines", name="k (vs rho)", showlegend=False,
                             line=dict(color=QUALITATIVE[0])), row=1, col=2)
    fig.update_xaxes(type="log", title_text="tau", exponentformat="power", row=1, col=1)
    fig.update_xaxes(title_text="rho", row=1, col=2)
    ymax = float(max(df["k"].max(), df["k_s"].max(), 1)) * 1.2
    fig.update_yaxes(range=[0, ymax], title_text="dimensions", row=1, col=1)
    apply_style(fig, title=title)
    return legend_below(fig)


def null_histogram(results: Sequence, *, title: str = "Significance nulls for |S|"):
    go = _go()
    from plotly.subplots import make_subplots

    results = list(results)
    fig = make_subplots(rows=1, cols=max(1, len(results)),
                        subplot_titles=[f"{r.kind} (B = {r.B}, p = {r.p:.3g})" for r in results])
    for i, r in enumerate(results, start=1):
        fig.add_trace(go.Histogram(x=r.null, name=r.kind, marker_color=QUALITATIVE[i % len(QUALITATIVE)],
                                   showlegend=False), row=1, col=i)
        fig.add_vline(x=r.observed, line_color="black", line_dash="dash", row=1, col=i,
                      annotation_text=f"observed {r.observed}")
        fig.update_xaxes(title_text="null |S|", row=1, col=i)
    return apply_style(fig, title=title)


def principal_angle_figure(angles: Mapping[str, Sequence[float]], *, title: str = "Principal angles"):
    """Empirical CDFs of principal angles (degrees) for each labelled pair of bases."""
    go = _go()
    from interplab.probes.decodeshare.subspaces import angle_summary

    fig = go.Figure()
    for i, (label, a) in enumerate(angles.items()):
        a = np.sort(np.asarray(a, dtype=float))
        if a.size == 0:
            continue
        s = angle_summary(a)
        fig.add_trace(go.Scatter(x=a, y=np.arange(1, a.size + 1) / a.size, mode="lines+markers",
                                 line=dict(shape="hv", color=QUALITATIVE[i % len(QUALITATIVE)]),
                                 name=f"{label}: mean {s['mean']:.1f}°, p50 {s['p50']:.1f}°, p95 {s['p95']:.1f}°"))
    fig.update_xaxes(range=[0, 90])
    apply_style(fig, title=title, xaxis="principal angle (degrees)", yaxis="fraction of angles <= x")
    return legend_below(fig, rows=len(angles))  # long labels: a legend at the side squashes the plot


def ablation_figure(summary, *, metric: str | None = None, conditions: Sequence[str] | None = None,
                    title: str | None = None):
    """summary columns: condition, task, metric, acc, lo, hi (from `summarize`). One bar group per task."""
    go = _go()
    df = summary if metric is None else summary[summary["metric"] == metric]
    conds = list(conditions) if conditions is not None else list(dict.fromkeys(df["condition"]))
    fig = go.Figure()
    for i, c in enumerate(conds):
        d = df[df["condition"] == c]
        if d.empty:
            continue
        fig.add_trace(go.Bar(x=d["task"], y=d["acc"], name=c, marker_color=QUALITATIVE[i % len(QUALITATIVE)],
                             error_y=dict(type="data", symmetric=False, array=d["hi"] - d["acc"],
                                          arrayminus=d["acc"] - d["lo"]),
                             hovertemplate="%{x}: %{y:.3f}<extra>" + c + "</extra>"))
    fig.update_layout(barmode="group")
    fig.update_yaxes(range=[0, 1.05])
    return apply_style(fig, title=title or f"Accuracy by condition{f' ({metric})' if metric else ''}",
                       xaxis="task", yaxis="accuracy (95% bootstrap CI)")


def alpha_sweep_figure(summary, *, metric: str | None = None, title: str | None = None):
    """summary columns: condition, alpha, acc, lo, hi (task 'all'), optionally metric."""
    go = _go()
    df = summary if metric is None else summary[summary["metric"] == metric]
    fig = go.Figure()
    for i, (c, d) in enumerate(df.groupby("condition", sort=False)):
        d = d.sort_values("alpha")
        col = QUALITATIVE[i % len(QUALITATIVE)]
        fig.add_trace(go.Scatter(x=np.r_[d["alpha"], d["alpha"][::-1]], y=np.r_[d["hi"], d["lo"][::-1]],
                                 fill="toself", fillcolor=col, opacity=0.15, line=dict(width=0), hoverinfo="skip",
                                 showlegend=False))
        fig.add_trace(go.Scatter(x=d["alpha"], y=d["acc"], mode="lines+markers", name=str(c), line=dict(color=col)))
    fig.update_yaxes(range=[0, 1.05])
    return apply_style(fig, title=title or f"Accuracy vs alpha{f' ({metric})' if metric else ''}",
                       xaxis="alpha (removal strength)", yaxis="accuracy (95% bootstrap CI)")


def h3_grid_figure(grid, *, metric: str | None = None, title: str | None = None):
    """grid columns: estimator, locus, delta, delta_lo, delta_hi, n_edited, energy (optionally metric)."""
    go = _go()
    df = grid if metric is None else grid[grid["metric"] == metric]
    ests = list(dict.fromkeys(df["estimator"]))
    locs = list(dict.fromkeys(df["locus"]))
    z = np.full((len(ests), len(locs)), np.nan)
    text = [["" for _ in locs] for _ in ests]
    for _, r in df.iterrows():
        i, j = ests.index(r["estimator"]), locs.index(r["locus"])
        z[i, j] = r["delta"]
        text[i][j] = (f"Δ {r['delta']:+.3f}<br>[{r['delta_lo']:+.3f}, {r['delta_hi']:+.3f}]<br>{int(r['n_edited'])} pos"
                      f"<br>E {r['energy']:.3g}")
    lim = float(np.nanmax(np.abs(z))) if np.isfinite(z).any() else 1.0
    fig = go.Figure(go.Heatmap(z=z, x=locs, y=ests, text=text, texttemplate="%{text}", colorscale="RdBu",
                               zmid=0, zmin=-lim, zmax=lim, colorbar=dict(title="Δ acc")))
    fig.update_yaxes(autorange="reversed")
    return apply_style(fig, title=title or f"Estimator x locus{f' ({metric})' if metric else ''}",
                       xaxis="intervention locus", yaxis="basis estimated on")


def steering_figure(df, *, title: str | None = None):
    """df columns: vector (v / repaired / ...), scale, effect, lo, hi."""
    go = _go()
    fig = go.Figure()
    for i, (v, d) in enumerate(df.groupby("vector", sort=False)):
        d = d.sort_values("scale")
        fig.add_trace(go.Scatter(x=d["scale"], y=d["effect"], mode="lines+markers", name=str(v),
                                 line=dict(color=QUALITATIVE[i % len(QUALITATIVE)]),
                                 error_y=dict(type="data", symmetric=False, array=d["hi"] - d["effect"],
                                              arrayminus=d["effect"] - d["lo"])))
    ylab = df.attrs.get("effect_label", "effect")
    return apply_style(fig, title=title or "Steering: v vs repaired (I - QQ^T)v at matched norm",
                       xaxis="steering scale", yaxis=ylab)


def layer_summary_figure(df, *, title: str = "Shared subspace per layer"):
    """df columns: layer, mode, k, k_s, p_perm (optional threshold, p_rot)."""
    go = _go()
    fig = go.Figure()
    keys = ["mode", "threshold"] if "threshold" in df.columns else ["mode"]
    for i, (key, d) in enumerate(df.groupby(keys, sort=False)):
        mode = " ".join(map(str, key)) if isinstance(key, tuple) else str(key)
        d = d.sort_values("layer")
        col = QUALITATIVE[i % len(QUALITATIVE)]
        hover = [f"k = {k}, p_perm = {p:.3g}" for k, p in zip(d["k"], d.get("p_perm", np.nan * d["k"]))]
        fig.add_trace(go.Scatter(x=d["layer"], y=d["k_s"], mode="lines+markers", name=f"|S| ({mode})",
                                 line=dict(color=col), hovertext=hover))
        fig.add_trace(go.Scatter(x=d["layer"], y=d["k"], mode="lines", name=f"k ({mode})",
                                 line=dict(color=col, dash="dot")))
    return apply_style(fig, title=title, xaxis="layer", yaxis="dimensions")


def patchback_figure(table, *, task: str = "all", title: str | None = None):
    """table columns: source, window, task, rescue_rate, lo, hi, n_flip (from `patchback_rescue`). One bar group
    per window W, one bar per patch source, with 95% bootstrap CIs."""
    go = _go()
    df = table[table["task"] == task] if "task" in table.columns else table
    fig = go.Figure()
    for i, (src, d) in enumerate(df.groupby("source", sort=False)):
        hover = [f"{int(r)} of {int(n)} rescued" for r, n in zip(d["n_rescued"], d["n_flip"])] \
            if "n_rescued" in d.columns else None
        fig.add_trace(go.Bar(x=d["window"], y=d["rescue_rate"], name=str(src),
                             marker_color=QUALITATIVE[i % len(QUALITATIVE)], hovertext=hover,
                             error_y=dict(type="data", symmetric=False, array=d["hi"] - d["rescue_rate"],
                                          arrayminus=d["rescue_rate"] - d["lo"])))
    n = int(df["n_flip"].iloc[0]) if len(df) else 0
    fig.update_layout(barmode="group")
    fig.update_yaxes(range=[0, 1.05])
    return apply_style(fig, title=title or f"Patchback rescue rate (|F| = {n} flipped examples, task {task})",
                       xaxis="decode-step window W", yaxis="rescue rate (95% bootstrap CI)")


def ranking_scatter_figure(scores, metrics=None, *, title: str | None = None):
    """Figure 11: proxy (TRAD, DECODE) vs REAL scatter, one panel per proxy, coloured by vector family; each
    proxy's top pick is ringed and the title gives Spearman rho and regret@1 (over the whole pool).

    scores: `RankingResult.scores` (family, name, trad, decode, real); metrics: `RankingResult.metrics` (computed
    from scores when None)."""
    from plotly.subplots import make_subplots

    from interplab.probes.decodeshare.ranking import PROXIES, ranking_metrics

    go = _go()
    m = ranking_metrics(scores) if metrics is None else metrics
    m = m[m["group"] == "all"].set_index("proxy")
    sub = [f"{p.upper()}: ρ = {m.loc[p, 'rho']:.3f}, regret@1 = {m.loc[p, 'regret1']:.3f}, "
           f"top-{int(m.loc[p, 'top_k'])} overlap = {m.loc[p, 'overlap']:.2f}" for p in PROXIES]
    fig = make_subplots(rows=1, cols=len(PROXIES), subplot_titles=sub, shared_yaxes=True)
    fams = list(dict.fromkeys(scores["family"]))
    for c, p in enumerate(PROXIES, start=1):
        for i, f in enumerate(fams):
            d = scores[scores["family"] == f]
            fig.add_trace(go.Scatter(x=d[p], y=d["real"], mode="markers", name=str(f), legendgroup=str(f),
                                     showlegend=c == 1, text=d["name"],
                                     marker=dict(color=QUALITATIVE[i % len(QUALITATIVE)], size=8, opacity=0.8)),
                          row=1, col=c)
        top = scores.iloc[int(np.argmax(scores[p].to_numpy(float)))]
        fig.add_trace(go.Scatter(x=[top[p]], y=[top["real"]], mode="markers+text", name="top pick",
                                 legendgroup="top", showlegend=c == 1, text=[f"top pick {top['name']}"],
                                 textposition="top left",
                                 marker=dict(symbol="circle-open", size=18, color="black", line=dict(width=2))),
                      row=1, col=c)
        fig.add_hline(y=float(scores["real"].max()), line_dash="dot", line_color="grey", row=1, col=c)
        fig.update_xaxes(title_text=f"{p.upper()} proxy (Δ accuracy)", row=1, col=c)
    fig.update_yaxes(title_text="REAL (Δ accuracy, held-out sets)", row=1, col=1)
    return apply_style(fig, title=title or "Stage-aligned steering ranking: proxy vs REAL "
                       f"(regret@1 TRAD {m.loc['trad', 'regret1']:.3f}, DECODE {m.loc['decode', 'regret1']:.3f})")


def validation_bars(per_seed, *, title: str | None = None):
    """Exact match after decode-only removal of the estimated shared subspace and of each control, mean over seeds
    with the seed range as error bars (the `validate-decodeshare` view)."""
    go = _go()
    conds = [c[4:] for c in per_seed.columns if c.startswith("acc_")]
    acc = np.array([[float(v) for v in per_seed[f"acc_{c}"]] for c in conds])
    mean = acc.mean(1)
    fig = go.Figure(go.Bar(x=conds, y=mean, error_y=dict(type="data", symmetric=False, array=acc.max(1) - mean,
                                                         arrayminus=mean - acc.min(1)),
                           hovertemplate="%{x}: %{y:.3f}<extra></extra>"))
    if "base_acc" in per_seed:
        fig.add_hline(y=float(per_seed["base_acc"].iloc[0]), line=dict(dash="dot", color="grey"),
                      annotation_text="no edit")
    apply_style(fig, title=title or "Decode-only removal: planted organism", xaxis="removed subspace",
                yaxis="exact match", legend=False)
    return fig
