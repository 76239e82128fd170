"""Figure builders for hyperfitting geometry and controls (pure functions: results -> plotly Figure; spec §9).

Every builder takes result objects or DataFrames (never a model) and returns a `plotly.graph_objects.Figure` styled
with `apply_style`; export with `interplab.figures.export(fig, path)`.
"""
from __future__ import annotations

import html as _html
from typing import Sequence

import numpy as np

from interplab.core.errors import DataError, ShapeError
from interplab.figures.style import ACCENT, QUALITATIVE, apply_style, log_axis

__all__ = [
    "pr_by_layer_figure", "cos_l2_figure", "eigen_spectrum_figure", "diversity_bars_figure",
    "entropy_temperature_figure", "static_injection_figure", "rank_histogram_figure", "context_dependence_figure",
    "lens_entry_figure", "k_sweep_figure", "training_dashboard_figure", "repetition_html",
    "delta_dim_by_arm_figure", "weight_change_figure",
]


def _frame(obj):
    return obj.to_frame() if hasattr(obj, "to_frame") else obj


def _need(df, cols, who):
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise ShapeError(f"{who} needs columns {missing}; got {list(df.columns)}")


def pr_by_layer_figure(geometry, *, name_a: str = "base", name_b: str = "target", title: str | None = None):
    """PR_a and PR_b vs layer (resid_post, pre-final-norm) with DeltaDim bars on a second axis; the
    final-norm PRs are extra markers at the last layer; DeltaDim at the last block (both tensors) is
    in the title. Solid lines and the bars: the standardised PR (the headline estimator,
    `interplab.probes.hyperfit.HEADLINE_ESTIMATOR`); dotted: the raw PR beside it (a frame without
    standardised columns shows the raw PR alone)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    df = _frame(geometry)
    _need(df, ["layer", "site", "pr_a", "pr_b", "delta_pr"], "pr_by_layer_figure")
    std = {"pr_std_a", "pr_std_b"} <= set(df.columns)
    if std and "delta_pr_std" not in df.columns:
        df = df.assign(delta_pr_std=df["pr_std_b"] - df["pr_std_a"])
    head, label = ("pr_std", "standardised PR") if std else ("pr", "PR")
    dcol = "delta_pr_std" if std else "delta_pr"
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    rp = df[df["site"] == "resid_post"].sort_values("layer")
    if rp.empty:
        rp = df[df["site"] == df["site"].iloc[0]].sort_values("layer")
    fig.add_trace(go.Bar(x=rp["layer"], y=rp[dcol], name=f"ΔDim ({label})", marker_color="#BBBBBB",
                         opacity=0.6, hovertemplate="layer %{x}<br>ΔDim %{y:.2f}<extra></extra>"), secondary_y=True)
    for side, name, color in (("a", name_a, QUALITATIVE[0]), ("b", name_b, QUALITATIVE[1])):
        fig.add_trace(go.Scatter(x=rp["layer"], y=rp[f"{head}_{side}"], mode="lines+markers",
                                 name=f"{label} {name}", line=dict(color=color)), secondary_y=False)
        if std:
            fig.add_trace(go.Scatter(x=rp["layer"], y=rp[f"pr_{side}"], mode="lines",
                                     name=f"raw PR {name}", line=dict(color=color, dash="dot")),
                          secondary_y=False)
    notes = []
    if not rp.empty:
        last = rp.iloc[-1]
        notes.append(f"ΔDim last block {last[dcol]:+.2f}"
                     + (f" (raw {last['delta_pr']:+.2f})" if std else ""))
    fn = df[df["site"] == "final_norm"]
    if not fn.empty:
        r = fn.iloc[0]
        for side, name, color in (("a", name_a, QUALITATIVE[0]), ("b", name_b, QUALITATIVE[1])):
            fig.add_trace(go.Scatter(x=[r["layer"]], y=[r[f"{head}_{side}"]], mode="markers",
                                     name=f"{label} {name} (final norm)",
                                     marker=dict(symbol="diamond-open", size=12, color=color)))
        raw = f" (raw {r['delta_pr']:+.2f})" if std else ""
        notes.append(f"after final norm {r[dcol]:+.2f}" + raw)
    # the ΔDim summary is the title's second line: a right-anchored annotation ran off the left edge
    # when narrow
    t = title or "Participation ratio by layer"
    if notes:
        t += "".join(f"<br>{n}" for n in notes)    # one short line each: a narrow column cuts long ones
    apply_style(fig, title=t, xaxis="layer")
    fig.update_yaxes(title_text="participation ratio", secondary_y=False)
    fig.update_yaxes(title_text="ΔDim", secondary_y=True, showgrid=False)
    fig.update_xaxes(dtick=1)
    return fig


def cos_l2_figure(geometry, *, site: str = "resid_post", title: str | None = None):
    """Mean cosine (left) and mean L2 distance (right) between the two models' states, by layer."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    df = _frame(geometry)
    _need(df, ["layer", "site", "cos", "l2"], "cos_l2_figure")
    d = df[df["site"] == site].sort_values("layer")
    if d.empty:
        raise DataError(f"no rows for site {site!r}; sites: {sorted(set(df['site']))}")
    fig = make_subplots(rows=1, cols=2, subplot_titles=("mean cos(h_a, h_b)", "mean ‖h_a − h_b‖₂"))
    fig.add_trace(go.Scatter(x=d["layer"], y=d["cos"], mode="lines+markers", name="cos", marker_color=ACCENT), 1, 1)
    fig.add_trace(go.Scatter(x=d["layer"], y=d["l2"], mode="lines+markers", name="L2",
                             marker_color=QUALITATIVE[3]), 1, 2)
    apply_style(fig, title=title or f"Paired-state similarity by layer ({site})", legend=False)
    fig.update_xaxes(title_text="layer", dtick=1)
    return fig


def eigen_spectrum_figure(geometry, key: str | None = None, *, name_a: str = "base", name_b: str = "target",
                          title: str | None = None):
    """log lambda_i vs i of the covariance spectra of one site (default: the last resid_post layer)."""
    import plotly.graph_objects as go

    if not getattr(geometry, "spectra_a", None):
        raise DataError("this geometry result carries no spectra")
    if key is None:
        keys = sorted((k for k in geometry.spectra_a if k.startswith("resid_post.")), key=lambda k: int(k.split(".")[1]))
        key = keys[-1] if keys else sorted(geometry.spectra_a)[-1]
    fig = go.Figure()
    for spec, nm, col in ((geometry.spectra_a[key], name_a, QUALITATIVE[0]),
                          (geometry.spectra_b[key], name_b, QUALITATIVE[1])):
        s = np.asarray(spec, dtype=float)
        fig.add_trace(go.Scatter(x=np.arange(1, s.size + 1), y=np.maximum(s, 1e-30), mode="lines", name=nm,
                                 line=dict(color=col)))
    apply_style(fig, title=title or f"Covariance spectrum at {key}", xaxis="index i", yaxis="eigenvalue λ_i")
    log_axis(fig, "y")
    return fig


def diversity_bars_figure(table, metrics: Sequence[str] = ("ttr", "rep2", "rep3", "diversity", "distinct2",
                                                            "self_bleu4"), *, title: str | None = None):
    """Grouped bars: one group per metric, one bar per setting; `<metric>_sd` columns give error bars."""
    import plotly.graph_objects as go

    df = _frame(table)
    _need(df, ["setting"], "diversity_bars_figure")
    metrics = [m for m in metrics if m in df.columns]
    if not metrics:
        raise ShapeError("none of the requested metrics is in the table")
    fig = go.Figure()
    for i, (_, row) in enumerate(df.iterrows()):
        err = [row.get(f"{m}_sd", np.nan) for m in metrics]
        fig.add_trace(go.Bar(x=list(metrics), y=[row[m] for m in metrics], name=str(row["setting"]),
                             marker_color=QUALITATIVE[i % len(QUALITATIVE)],
                             error_y=dict(type="data", array=[0 if np.isnan(e) else e for e in err],
                                          visible=not all(np.isnan(e) for e in err))))
    apply_style(fig, title=title or "Diversity and repetition by setting", yaxis="value", barmode="group")
    return fig


def entropy_temperature_figure(match, *, title: str | None = None):
    """The base model's mean entropy H(T) (log T axis), the target's entropy as a horizontal line, T* marked."""
    import plotly.graph_objects as go

    if not match.temperatures:
        raise DataError("this TemperatureMatch has no H(T) curve (compute it with curve_points > 0)")
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=match.temperatures, y=match.curve, mode="lines", name="base H(T)",
                             line=dict(color=ACCENT)))
    fig.add_hline(y=match.target_entropy, line_dash="dash", line_color=QUALITATIVE[1],
                  annotation_text=f"H target = {match.target_entropy:.3f}")
    fig.add_trace(go.Scatter(x=[match.T], y=[match.matched_entropy], mode="markers", name=f"T* = {match.T:.3f}",
                             marker=dict(size=12, color=QUALITATIVE[3], symbol="x")))
    apply_style(fig, title=title or "Entropy-matched temperature", xaxis="temperature T", yaxis="mean entropy (nats)")
    fig.update_xaxes(type="log")  # < 2 decades: keep the 2, 5 labels
    return fig


def static_injection_figure(sweep, metric: str = "ttr", *, references: dict | None = None,
                            spearman: float | None = None, title: str | None = None):
    """A metric vs alpha (log x) for the static-injection sweep; reference settings as horizontal lines."""
    import plotly.graph_objects as go

    df = _frame(sweep)
    _need(df, ["alpha", metric], "static_injection_figure")
    d = df[df["alpha"] > 0].sort_values("alpha")
    fig = go.Figure(go.Scatter(x=d["alpha"], y=d[metric], mode="lines+markers", name="static injection",
                               marker_color=ACCENT))
    for i, (name, val) in enumerate((references or {}).items()):
        fig.add_hline(y=val, line_dash="dot", line_color=QUALITATIVE[(i + 1) % len(QUALITATIVE)],
                      annotation_text=name)
    t = title or f"Static vocabulary reweighting: {metric} vs α"
    if spearman is not None:
        t += f" (Spearman ρ = {spearman:+.2f})"
    apply_style(fig, title=t, xaxis="α", yaxis=metric)
    fig.update_xaxes(type="log")
    return fig


def rank_histogram_figure(rank_result, *, title: str | None = None):
    """Base-model rank of the target's greedy tokens: the four bins and a log-binned histogram."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from interplab.probes.hyperfit import RANK_BINS

    h = rank_result.histogram
    tot = max(sum(h.values()), 1)
    fig = make_subplots(rows=1, cols=2, subplot_titles=("binned", "all ranks (log bins)"))
    fig.add_trace(go.Bar(x=list(RANK_BINS), y=[h[b] / tot for b in RANK_BINS], marker_color=ACCENT,
                         text=[f"{h[b]}" for b in RANK_BINS], textposition="outside", name="fraction"), 1, 1)
    r = np.asarray(rank_result.base_ranks, dtype=float)
    if r.size:
        edges = np.unique(np.round(np.logspace(0, np.log10(max(r.max(), 2)) + 1e-9, 30)))
        counts, _ = np.histogram(r, bins=np.append(edges, edges[-1] + 1))
        fig.add_trace(go.Bar(x=edges, y=counts, marker_color=QUALITATIVE[1], name="count"), 1, 2)
        log_axis(fig, "x", title_text="base rank", row=1, col=2)  # one tick per decade, not every log bin
    over = rank_result.summary.get("override_rate", float("nan"))
    apply_style(fig, title=title or f"Base rank of the target's greedy tokens (override rate {over:.1%})",
                legend=False)
    fig.update_yaxes(title_text="fraction", row=1, col=1)
    return fig


def context_dependence_figure(token_frame, *, title: str | None = None, max_points: int = 5000):
    """Per-token mean rank change vs its standard deviation across contexts (hover shows the token)."""
    import plotly.graph_objects as go

    df = _frame(token_frame)
    _need(df, ["dr_mean", "dr_std"], "context_dependence_figure")
    if len(df) > max_points:
        df = df.reindex(df["dr_mean"].abs().sort_values(ascending=False).index[:max_points])
    text = df["token"].astype(str) if "token" in df.columns else df.get("token_id", df.index).astype(str)
    fig = go.Figure(go.Scattergl(x=df["dr_mean"], y=df["dr_std"], mode="markers", text=text,
                                 marker=dict(size=5, color=ACCENT, opacity=0.6),
                                 hovertemplate="%{text}<br>mean Δr %{x:.1f}<br>sd Δr %{y:.1f}<extra></extra>"))
    apply_style(fig, title=title or "Context dependence of rank changes", xaxis="mean Δr (base − target rank)",
                yaxis="sd of Δr across contexts")
    return fig


def lens_entry_figure(rank_result, *, title: str | None = None):
    """For overriding steps: the first layer (of the last few) where the chosen token enters the logit-lens top-k."""
    import plotly.graph_objects as go

    e = np.asarray(rank_result.lens_entry)
    layers, counts = np.unique(e, return_counts=True)
    labels = ["never" if int(l) < 0 else str(int(l)) for l in layers]
    fig = go.Figure(go.Bar(x=labels, y=counts, marker_color=ACCENT))
    k = getattr(rank_result.config, "lens_k", "k")
    apply_style(fig, title=title or f"Logit lens: first layer where the overriding token is in the top-{k}",
                xaxis="layer", yaxis="overriding steps")
    fig.update_xaxes(type="category")
    return fig


def k_sweep_figure(sweep, metric: str = "ttr", *, title: str | None = None):
    """LoRA k sweep: metric (left axis) and trainable parameters (right axis) vs k, late- vs early-stage."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    df = _frame(sweep)
    _need(df, ["k", "placement", metric, "trainable_params"], "k_sweep_figure")
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    for i, (place, d) in enumerate(df.sort_values("k").groupby("placement", sort=True)):
        col = QUALITATIVE[i % len(QUALITATIVE)]
        err = ({} if f"{metric}_lo" not in d.columns else  # the sweep's bootstrap interval over prompts
               {"error_y": dict(type="data", symmetric=False, array=d[f"{metric}_hi"] - d[metric],
                                arrayminus=d[metric] - d[f"{metric}_lo"])})
        fig.add_trace(go.Scatter(x=d["k"], y=d[metric], mode="lines+markers", name=f"{metric} ({place})",
                                 line=dict(color=col), **err), secondary_y=False)
        fig.add_trace(go.Scatter(x=d["k"], y=d["trainable_params"], mode="lines", name=f"params ({place})",
                                 line=dict(color=col, dash="dot")), secondary_y=True)
    apply_style(fig, title=title or f"LoRA placement sweep: {metric} vs k", xaxis="k (LoRA layers)")
    fig.update_yaxes(title_text=metric, secondary_y=False)
    fig.update_yaxes(title_text="trainable parameters", secondary_y=True, showgrid=False)
    if df["k"].max() <= 12:
        fig.update_xaxes(dtick=1)
    return fig


def training_dashboard_figure(history, *, stop_loss: float | None = 0.05, title: str | None = None):
    """Train loss, validation loss, validation entropy and TTR vs epoch (shared x), with the stop-loss line."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    df = _frame(history)
    _need(df, ["epoch", "train_loss"], "training_dashboard_figure")
    panels = [c for c in ("train_loss", "val_loss", "val_entropy", "ttr") if c in df.columns and df[c].notna().any()]
    fig = make_subplots(rows=len(panels), cols=1, shared_xaxes=True, subplot_titles=panels)
    for i, c in enumerate(panels, start=1):
        fig.add_trace(go.Scatter(x=df["epoch"], y=df[c], mode="lines+markers", name=c,
                                 marker_color=QUALITATIVE[(i - 1) % len(QUALITATIVE)]), i, 1)
    if stop_loss is not None:
        fig.add_hline(y=stop_loss, line_dash="dash", line_color="#888", row=1, col=1,
                      annotation_text=f"stop {stop_loss:g} nats")
    apply_style(fig, title=title or "Hyperfitting", height=220 * len(panels) + 80, legend=False)
    fig.update_xaxes(title_text="epoch", row=len(panels), col=1)
    return fig


def _arm_rows(summary, quantity: str):
    df = _frame(summary)
    _need(df, ["arm", "quantity", "site", "layer", "group", "mean", "lo", "hi"], "hyperfit controls figure")
    d = df[df["quantity"] == quantity]
    if d.empty:
        raise DataError(f"the summary has no {quantity!r} rows; quantities: {sorted(set(df['quantity']))}")
    return d


def _error_bars(d):
    return dict(type="data", symmetric=False, array=(d["hi"] - d["mean"]).to_numpy(),
                arrayminus=(d["mean"] - d["lo"]).to_numpy(), visible=True)


def delta_dim_by_arm_figure(summary, *, title: str | None = None, quantity: str | None = None):
    """ΔDim (PR of the arm's model − PR of the base) per layer for every control arm: the mean
    across seeds with its t interval as error bars (`HyperfitControlsResult.summary`); the last x
    position is the final-norm output. quantity: "delta_pr_std" (standardised PR, the headline
    estimator; the default when the summary has it) or "delta_pr" (raw PR)."""
    import pandas as pd
    import plotly.graph_objects as go

    if quantity is None:
        has_std = (_frame(summary)["quantity"] == "delta_pr_std").any()
        quantity = "delta_pr_std" if has_std else "delta_pr"
    d = _arm_rows(summary, quantity)
    label = "standardised PR" if quantity == "delta_pr_std" else "raw PR"
    fig = go.Figure()
    for i, (arm, g) in enumerate(d.groupby("arm", sort=False)):
        rp = g[g["site"] == "resid_post"].sort_values("layer")
        fn = g[g["site"] == "final_norm"]
        both = pd.concat([rp, fn])
        x = [f"block {int(v)}" for v in rp["layer"]] + (["final norm"] if len(fn) else [])
        fig.add_trace(go.Scatter(x=x, y=both["mean"], mode="lines+markers", name=f"{arm} (n={int(g['n'].max())})",
                                 error_y=_error_bars(both), line=dict(color=QUALITATIVE[i % len(QUALITATIVE)]),
                                 hovertemplate="%{x}<br>ΔDim %{y:.2f}<extra>" + arm + "</extra>"))
    fig.add_hline(y=0, line_color="#888", line_dash="dot")
    t = title or f"ΔDim per layer by arm, {label}<br>(mean, 95% t interval over seeds)"
    apply_style(fig, title=t,
                xaxis="layer", yaxis="ΔDim = PR(arm) − PR(base)")
    fig.update_xaxes(type="category")
    return fig


def weight_change_figure(summary, *, title: str | None = None):
    """‖ΔW‖_F against the base for every arm, per block and in total (mean across seeds, t interval)."""
    import plotly.graph_objects as go

    d = _arm_rows(summary, "delta_fro")
    fig = go.Figure()
    for i, (arm, g) in enumerate(d.groupby("arm", sort=False)):
        fig.add_trace(go.Bar(x=g["group"], y=g["mean"], name=arm, error_y=_error_bars(g),
                             marker_color=QUALITATIVE[i % len(QUALITATIVE)],
                             hovertemplate="%{x}<br>‖ΔW‖ %{y:.3f}<extra>" + arm + "</extra>"))
    apply_style(fig, title=title or "Weight change ‖ΔW‖_F vs the base<br>(mean, 95% t interval over seeds)",
                xaxis="parameter group", yaxis="‖ΔW‖_F", barmode="group")
    fig.update_xaxes(type="category")
    return fig


def repetition_html(units: Sequence[str], n: int = 3, *, ranks: Sequence[int] | None = None) -> str:
    """HTML for one generation: units that complete an n-gram seen earlier in the same generation are highlighted
    (red background); with `ranks` (the base rank of each unit) the text colour encodes rank > 1 (bold blue) and
    rank > 10 (bold purple) with the rank in the tooltip."""
    units = [str(u) for u in units]
    seen: set[tuple] = set()
    rep = [False] * len(units)
    for i in range(n - 1, len(units)):
        g = tuple(units[i - n + 1:i + 1])
        if g in seen:
            for j in range(i - n + 1, i + 1):
                rep[j] = True
        seen.add(g)
    parts = []
    for i, u in enumerate(units):
        style = []
        if rep[i]:
            style.append("background:#f8c9c4")
        tip = ""
        if ranks is not None and i < len(ranks):
            r = int(ranks[i])
            tip = f' title="base rank {r}"'
            if r > 10:
                style.append("color:#7b1fa2;font-weight:bold")
            elif r > 1:
                style.append("color:#0072B2;font-weight:bold")
        parts.append(f'<span style="{";".join(style)}"{tip}>{_html.escape(u)}</span>')
    return '<div style="line-height:1.7;font-family:monospace">' + " ".join(parts) + "</div>"
