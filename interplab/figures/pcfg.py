"""Figures for PCFG parse probes (pure functions: frames / arrays in, plotly Figure out; no model is run)."""
from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from interplab.figures.style import PROBABILITY, QUALITATIVE, SEQUENTIAL, apply_style, heatmap_axes

__all__ = ["dyadic_probe_figure", "truncated_kl_figure", "kl_by_position_figure", "depth_sweep_figure", "next_token_figure", "probe_curves_figure",
           "local_to_global_heatmap", "lstar_figure", "attention_offset_figure", "parse_tree_figure",
           "training_curve_figure", "calibration_figure", "kl_depth_seeds_figure", "lstar_depth_seeds_figure"]


def kl_by_position_figure(frames: Mapping[str, pd.DataFrame], *, metric: str = "kl", baselines: bool = True,
                          title: str | None = None) -> go.Figure:
    """Per-position KL (mean ± s.e.) along the sequence, one trace per model (frames from `pcfg_kl`), with the
    bigram / unigram baselines of the first frame dashed."""
    fig = go.Figure()
    first = None
    for i, (name, df) in enumerate(frames.items()):
        first = df if first is None else first
        err = df[metric + "_se"] if metric + "_se" in df else None
        fig.add_trace(go.Scatter(x=df["position"], y=df[metric], name=name, mode="lines+markers",
                                 line=dict(color=QUALITATIVE[i % len(QUALITATIVE)]),
                                 error_y=dict(type="data", array=err, visible=err is not None)))
    if baselines and first is not None and metric == "kl":
        for col, dash in (("kl_bigram", "dash"), ("kl_unigram", "dot")):
            if col in first:
                fig.add_trace(go.Scatter(x=first["position"], y=first[col], name=col.replace("kl_", "") + " baseline",
                                         mode="lines", line=dict(color="grey", dash=dash)))
    return apply_style(fig, title=title or "KL(p_G ‖ q_θ) by position", xaxis="position p (0 = after BOS)",
                       yaxis=f"{metric} (nats)")


def depth_sweep_figure(summary: pd.DataFrame, *, log2_n: float | None = None, title: str | None = None) -> go.Figure:
    """Final KL against n_layers (columns n_layers, kl, kl_se, optional grammar, kl_bigram, kl_unigram), one trace
    per grammar, with a vertical marker at n_layers = log2 n."""
    fig = go.Figure()
    groups = summary.groupby("grammar") if "grammar" in summary else [("model", summary)]
    for i, (gname, d) in enumerate(groups):
        d = d.sort_values("n_layers")
        fig.add_trace(go.Scatter(x=d["n_layers"], y=d["kl"], name=str(gname), mode="lines+markers",
                                 error_y=dict(type="data", array=d.get("kl_se")),
                                 line=dict(color=QUALITATIVE[i % len(QUALITATIVE)])))
        for col, dash in (("kl_bigram", "dash"), ("kl_unigram", "dot")):
            if col in d:
                fig.add_hline(y=float(d[col].mean()), line=dict(color="grey", dash=dash),
                              annotation_text=col.replace("kl_", ""), annotation_position="top right")
    if log2_n is not None:
        fig.add_vline(x=log2_n, line=dict(color="black", dash="dot"), annotation_text="log₂ n")
    fig.update_yaxes(type="log")
    return apply_style(fig, title=title or "KL vs depth", xaxis="n_layers", yaxis="mean KL per token (nats, log)")


def next_token_figure(p_grammar: Sequence[float], q_model: Sequence[float] | None, labels: Sequence[str], *,
                      title: str | None = None) -> go.Figure:
    """Grammar vs model next-token distribution at one position (bars over terminals + EOS)."""
    fig = go.Figure()
    fig.add_trace(go.Bar(x=list(labels), y=list(p_grammar), name="grammar p_G", marker_color=QUALITATIVE[0]))
    if q_model is not None:
        fig.add_trace(go.Bar(x=list(labels), y=list(q_model), name="model q_θ", marker_color=QUALITATIVE[1]))
    fig.update_layout(barmode="group")
    return apply_style(fig, title=title or "next-token distribution", xaxis="next symbol", yaxis="probability")


def probe_curves_figure(df: pd.DataFrame, target: str, *, controls: bool = True, title: str | None = None) -> go.Figure:
    """Probe quality vs layer for one target, one curve per span-length bucket; random-init (dashed) and
    shuffled-label (dotted) controls in the same colour; l*(ℓ) as a marker."""
    d = df[df["target"] == target]
    fig = go.Figure()
    buckets = sorted(d["bucket"].unique(), key=lambda b: (b == "all", int(str(b).split("-")[0]) if b != "all" else 0))
    for i, bk in enumerate(buckets):
        g = d[d["bucket"] == bk].sort_values("layer")
        c = QUALITATIVE[i % len(QUALITATIVE)]
        err = g["score_std"] if "score_std" in g and g["score_std"].notna().any() else None
        fig.add_trace(go.Scatter(x=g["layer"], y=g["score"], name=f"ℓ={bk}", mode="lines+markers",
                                 line=dict(color=c), legendgroup=str(bk),
                                 error_y=dict(type="data", array=err, visible=err is not None)))
        if controls and "score_random_init" in g:
            fig.add_trace(go.Scatter(x=g["layer"], y=g["score_random_init"], name=f"ℓ={bk} random init",
                                     mode="lines", line=dict(color=c, dash="dash"), legendgroup=str(bk),
                                     showlegend=i == 0))
        if controls and "score_shuffled" in g:
            fig.add_trace(go.Scatter(x=g["layer"], y=g["score_shuffled"], name=f"ℓ={bk} shuffled labels",
                                     mode="lines", line=dict(color=c, dash="dot"), legendgroup=str(bk),
                                     showlegend=i == 0))
        if "l_star" in g:
            ls = int(g["l_star"].iloc[0])
            row = g[g["layer"] == ls]
            if len(row):
                fig.add_trace(go.Scatter(x=[ls], y=[float(row["score"].iloc[0])], mode="markers", showlegend=False,
                                         marker=dict(symbol="star", size=14, color=c, line=dict(color="black", width=1)),
                                         legendgroup=str(bk), hovertext=f"l*({bk}) = {ls}"))
    metric = d["metric"].iloc[0] if len(d) else "score"
    return apply_style(fig, title=title or f"probe quality by layer: {target}",
                       xaxis="layer (-1 = embeddings)", yaxis=f"held-out {metric}")


def local_to_global_heatmap(df: pd.DataFrame, target: str, *, title: str | None = None) -> go.Figure:
    """Layer × span-length bucket heatmap of probe quality normalised per bucket (score / bucket max), with l*."""
    d = df[(df["target"] == target) & (df["bucket"] != "all")]
    buckets = sorted(d["bucket"].unique(), key=lambda b: int(str(b).split("-")[0]))
    layers = sorted(d["layer"].unique())
    z = np.full((len(buckets), len(layers)), np.nan)
    for bi, bk in enumerate(buckets):
        g = d[d["bucket"] == bk].set_index("layer")["score"].clip(lower=0)
        mx = g.max()
        for li, l in enumerate(layers):
            if l in g.index and mx > 0:
                z[bi, li] = g[l] / mx
    fig = go.Figure(go.Heatmap(z=z, x=[str(l) for l in layers], y=[f"ℓ={b}" for b in buckets], colorscale=SEQUENTIAL,
                               zmin=0, zmax=1, colorbar=dict(title="score / max")))
    if "l_star" in d:
        ls = d.groupby("bucket")["l_star"].first()
        fig.add_trace(go.Scatter(x=[str(int(ls[b])) for b in buckets if b in ls], y=[f"ℓ={b}" for b in buckets if b in ls],
                                 mode="markers", marker=dict(symbol="star", size=14, color="white",
                                                             line=dict(color="black", width=1)), name="l*(ℓ)"))
    heatmap_axes(fig, y_reversed=False)
    return apply_style(fig, title=title or f"local-to-global: {target}", xaxis="layer", yaxis="span length bucket")


def lstar_figure(lstar: pd.DataFrame, *, slopes: Mapping[str, dict] | None = None, title: str | None = None) -> go.Figure:
    """l*(ℓ) against log2 ℓ, one trace per target (from `local_to_global`), with fitted slopes in the legend."""
    fig = go.Figure()
    d = lstar[lstar["log2_len"].notna()]
    for i, (t, g) in enumerate(d.groupby("target")):
        g = g.sort_values("log2_len")
        s = (slopes or {}).get(t)
        name = t if not s or not math.isfinite(s.get("slope", float("nan"))) else f"{t} (slope {s['slope']:.2f} ± {s['ci95']:.2f})"
        c = QUALITATIVE[i % len(QUALITATIVE)]
        fig.add_trace(go.Scatter(x=g["log2_len"], y=g["l_star"], name=name, mode="markers+lines", line=dict(color=c)))
        if s and math.isfinite(s.get("slope", float("nan"))):
            xs = np.array([g["log2_len"].min(), g["log2_len"].max()])
            fig.add_trace(go.Scatter(x=xs, y=s["slope"] * xs + s["intercept"], mode="lines", showlegend=False,
                                     line=dict(color=c, dash="dot")))
    return apply_style(fig, title=title or "l*(ℓ) vs log₂ ℓ", xaxis="log₂ ℓ (span length bucket)",
                       yaxis="l* (first layer ≥ 90% of best)")


def attention_offset_figure(df: pd.DataFrame, *, column: str = "mass", reduce: str = "max",
                            title: str | None = None) -> go.Figure:
    """Heatmap layer × k of the attention mass at offset 2^(k-1) (``reduce`` over heads: max or mean), divided by
    the mass a uniform causal pattern would give (1 = no preference)."""
    agg = df.groupby(["layer", "k"]).agg(v=(column, reduce), u=("uniform", "first")).reset_index()
    layers = sorted(agg["layer"].unique())
    ks = sorted(agg["k"].unique())
    z = np.full((len(layers), len(ks)), np.nan)
    for _, r in agg.iterrows():
        z[layers.index(r["layer"]), ks.index(r["k"])] = r["v"] / max(r["u"], 1e-12)
    fig = go.Figure(go.Heatmap(z=z, x=[f"k={k} (offset {2 ** (k - 1)})" for k in ks], y=[str(l) for l in layers],
                               colorscale=SEQUENTIAL, colorbar=dict(title="mass / uniform")))
    heatmap_axes(fig, y_reversed=False)
    return apply_style(fig, title=title or f"attention at offset 2^(k-1) ({reduce} over heads)", xaxis="k",
                       yaxis="layer")


def parse_tree_figure(words: Sequence[str], spans: Sequence[tuple], labels: Sequence[str], *,
                      colors: Sequence[float] | None = None, title: str | None = None) -> go.Figure:
    """A parse tree drawn as constituent bars: x = token positions, one row per depth (root on top). ``spans`` are
    (start, end, label_index, depth) rows; ``colors`` optional per-span values in [0, 1] (e.g. the exact prefix
    span posterior) shading the bars."""
    fig = go.Figure()
    if len(spans):
        maxd = max(int(s[3]) for s in spans)
    else:
        maxd = 0
    for k, (s, e, lab, d) in enumerate(spans):
        if e < 0:
            continue
        c = colors[k] if colors is not None else None
        fill = f"rgba(0,114,178,{0.25 + 0.6 * float(c):.3f})" if c is not None else "rgba(0,114,178,0.35)"
        y0 = maxd - int(d)
        fig.add_shape(type="rect", x0=s + 0.05, x1=e - 0.05, y0=y0 + 0.1, y1=y0 + 0.9, fillcolor=fill,
                      line=dict(color="rgb(0,80,140)", width=1))
        fig.add_trace(go.Scatter(x=[(s + e) / 2], y=[y0 + 0.5], mode="text", text=[labels[int(lab)]],
                                 showlegend=False, hovertext=f"{labels[int(lab)]} spans ({s},{e}]" +
                                 (f", posterior {float(c):.3f}" if c is not None else ""), hoverinfo="text"))
    fig.add_trace(go.Scatter(x=[i + 0.5 for i in range(len(words))], y=[-0.5] * len(words), mode="text",
                             text=list(words), showlegend=False, textfont=dict(size=14)))
    fig.update_xaxes(range=[0, max(1, len(words))], showgrid=False, zeroline=False, showticklabels=False)
    fig.update_yaxes(range=[-1, maxd + 1], showgrid=False, zeroline=False, showticklabels=False)
    return apply_style(fig, title=title or "parse tree", height=120 + 40 * (maxd + 1))


def training_curve_figure(curve: Sequence[dict], *, baselines: Mapping[str, float] | None = None,
                          title: str | None = None) -> go.Figure:
    """Training loss and evaluated KL vs step (log y) from a model card's curve, with baselines as lines."""
    fig = go.Figure()
    steps = [r["step"] for r in curve]
    fig.add_trace(go.Scatter(x=steps, y=[r["loss"] for r in curve], name="train loss (nats)", mode="lines"))
    ev = [(r["step"], r["kl"]) for r in curve if "kl" in r]
    if ev:
        fig.add_trace(go.Scatter(x=[a for a, _ in ev], y=[b for _, b in ev], name="held-out KL", mode="lines+markers"))
    for i, (k, v) in enumerate((baselines or {}).items()):
        fig.add_hline(y=v, line=dict(color="grey", dash=["dash", "dot", "dashdot"][i % 3]), annotation_text=k)
    fig.update_yaxes(type="log")
    return apply_style(fig, title=title or "training", xaxis="step", yaxis="nats (log)")


def calibration_figure(p: np.ndarray, q: np.ndarray, *, title: str | None = None) -> go.Figure:
    """log-log 2-D histogram of p_G(v|prefix) against q_θ(v|prefix) with the diagonal."""
    p = np.asarray(p).ravel()
    q = np.asarray(q).ravel()
    m = (p > 1e-6) & (q > 1e-6)
    lp, lq = np.log10(p[m]), np.log10(q[m])
    fig = go.Figure(go.Histogram2d(x=lp, y=lq, colorscale=PROBABILITY, nbinsx=40, nbinsy=40))
    lo = float(min(lp.min(), lq.min())) if m.any() else -6
    fig.add_trace(go.Scatter(x=[lo, 0], y=[lo, 0], mode="lines", line=dict(color="black", dash="dot"), showlegend=False))
    return apply_style(fig, title=title or "calibration", xaxis="log10 p_G", yaxis="log10 q_θ")


def dyadic_probe_figure(df: pd.DataFrame, *, column: str = "r2", title: str | None = None) -> go.Figure:
    """Heatmap layer × k of the held-out R² of the size-2^k dyadic inside vector read at aligned block ends (a
    ``probe`` frame of `construction_mirror`); cell text shows the random-init control in brackets. The
    construction predicts a diagonal: level k decodable from layer k − 1 on."""
    layers = sorted(df["layer"].unique())
    ks = sorted(df["k"].unique())
    z = np.full((len(layers), len(ks)), np.nan)
    text = [["" for _ in ks] for _ in layers]
    for _, r in df.iterrows():
        i, j = layers.index(r["layer"]), ks.index(r["k"])
        z[i, j] = r[column]
        ctrl = f" ({r['r2_random_init']:.2f})" if "r2_random_init" in r else ""
        text[i][j] = f"{r[column]:.2f}{ctrl}"
    fig = go.Figure(go.Heatmap(z=z, x=[f"k={k} (block {2 ** k})" for k in ks], y=[str(l) for l in layers],
                               text=text, texttemplate="%{text}", colorscale=SEQUENTIAL, zmin=0, zmax=1,
                               colorbar=dict(title="R²")))
    heatmap_axes(fig, y_reversed=False)
    return apply_style(fig, title=title or "dyadic inside vector of size 2^k: held-out R² (random init)",
                       xaxis="k", yaxis="layer (−1 = embeddings)")


def truncated_kl_figure(df: pd.DataFrame, *, title: str | None = None) -> go.Figure:
    """KL(p_trunc,k ‖ q_l) against k, one line per layer l (logit lens; a ``kl`` frame of `construction_mirror`),
    with KL(p_G ‖ p_trunc,k) dashed: how much the truncation itself loses. Log y axis."""
    fig = go.Figure()
    for i, (l, g) in enumerate(df.groupby("layer")):
        g = g.sort_values("k")
        fig.add_trace(go.Scatter(x=g["k"], y=g["kl_trunc_model"], mode="markers+lines", name=f"layer {l}",
                                 line=dict(color=QUALITATIVE[i % len(QUALITATIVE)])))
    g = df[df["layer"] == df["layer"].max()].sort_values("k")
    fig.add_trace(go.Scatter(x=g["k"], y=g["kl_exact_trunc"].clip(lower=1e-6), mode="lines",
                             name="KL(p_G ‖ p_trunc,k)", line=dict(color="black", dash="dash")))
    fig.update_yaxes(type="log")
    return apply_style(fig, title=title or "KL(p_trunc,k ‖ model at layer l)", xaxis="k (blocks up to size 2^k)",
                       yaxis="KL (nats/token)")


def kl_depth_seeds_figure(kl_by_depth: pd.DataFrame, organisms: pd.DataFrame, *, log2_n: float | None = None,
                          level: float = 0.95, title: str | None = None) -> go.Figure:
    """KL against n_layers: the mean over training seeds with its t interval (``kl_by_depth``: n_layers, mean, lo,
    hi) and each seed's organism as a dot (``organisms``: n_layers, seed, kl, optional kl_bigram)."""
    d = kl_by_depth.sort_values("n_layers")
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=organisms["n_layers"], y=organisms["kl"], mode="markers", name="one training seed",
                             marker=dict(color="grey", size=6, opacity=0.6),
                             text=[f"seed {s}" for s in organisms["seed"]]))
    fig.add_trace(go.Scatter(x=d["n_layers"], y=d["mean"], mode="lines+markers",
                             name=f"mean over seeds ({level:.0%} t interval)", line=dict(color=QUALITATIVE[0]),
                             error_y=dict(type="data", symmetric=False, array=d["hi"] - d["mean"],
                                          arrayminus=d["mean"] - d["lo"])))
    if "kl_bigram" in organisms:
        fig.add_hline(y=float(organisms["kl_bigram"].mean()), line=dict(color="grey", dash="dash"),
                      annotation_text="bigram", annotation_position="top right")
    if log2_n is not None:
        fig.add_vline(x=log2_n, line=dict(color="black", dash="dot"), annotation_text="log₂ n")
    fig.update_yaxes(type="log")
    return apply_style(fig, title=title or "KL vs depth (equal step budget)", xaxis="n_layers",
                       yaxis="mean KL per token (nats, log)")


def lstar_depth_seeds_figure(l_star: pd.DataFrame, slope_by_depth: pd.DataFrame, target: str, *,
                             title: str | None = None) -> go.Figure:
    """l*(ℓ) against log2 ℓ for one target, one line per depth (the mean of l* over training seeds; ``l_star``:
    n_layers, seed, target, log2_len, l_star), with the per-seed slope's mean and t interval in the legend
    (``slope_by_depth`` rows of view "seeds")."""
    d = l_star[(l_star["target"] == target) & l_star["log2_len"].notna()]
    sd = slope_by_depth[(slope_by_depth["target"] == target) & (slope_by_depth["view"] == "seeds")]
    fig = go.Figure()
    for i, (L, g) in enumerate(d.groupby("n_layers")):
        m = g.groupby("log2_len")["l_star"].mean().reset_index()
        s = sd[sd["n_layers"] == L]
        lab = f"{L} layers"
        if len(s) and math.isfinite(float(s["lo"].iloc[0])):
            r = s.iloc[0]
            lab += f" (slope {r['mean']:.2f} [{r['lo']:.2f}, {r['hi']:.2f}])"
        fig.add_trace(go.Scatter(x=m["log2_len"], y=m["l_star"], name=lab, mode="lines+markers",
                                 line=dict(color=QUALITATIVE[i % len(QUALITATIVE)])))
    return apply_style(fig, title=title or f"l*(ℓ) by depth: {target} (mean over training seeds)",
                       xaxis="log₂ ℓ (span length bucket)", yaxis="l* (first layer ≥ 90% of best)")
