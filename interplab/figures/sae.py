"""Figures for FAST SAE training and the feature browser (pure builders: results -> plotly Figure; no model runs)."""
from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np

from interplab.figures.arrays import token_label, token_text
from interplab.figures.style import QUALITATIVE, SEQUENTIAL, apply_style

METRIC_LABELS = {
    "log2_mse": "log2 MSE (Eq. 7, sequence-weighted)",
    "log2_mse_special": "log2 MSE, special tokens",
    "explained_variance": "explained variance",
    "l0": "L0 (active features / token)",
    "delta_loss_pct": "Delta Loss (%)",
    "ce_loss_score": "CE-loss score",
    "kl_sae": "KL(clean || SAE)",
    "dead_features": "dead features",
    "delta_loss_pct_response": "Delta Loss (%), assistant answers",
    "ce_loss_score_response": "CE-loss score, assistant answers",
    "kl_sae_response": "KL(clean || SAE), assistant answers",
    "delta_ce": "CE increase with the SAE (nats/token)",
    "delta_ce_response": "CE increase with the SAE, assistant answers (nats/token)",
}


def metrics_bar_figure(df, metric: str = "log2_mse", *, x: str = "architecture", color: str = "method",
                       title: str | None = None):
    """Grouped bars of one metric (rows of `df`: one SAE each, with columns x, color, metric). log2 metrics show
    their linear value in the hover."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for i, (name, g) in enumerate(df.groupby(color, sort=False)):
        vals = g[metric].astype(float)
        hover = None
        if metric.startswith("log2_"):
            hover = [f"{name}<br>{metric} = {v:.4f}<br>linear = {2 ** v:.4g}" if math.isfinite(v) else str(v)
                     for v in vals]
        fig.add_bar(x=g[x].astype(str), y=vals, name=str(name), marker_color=QUALITATIVE[i % len(QUALITATIVE)],
                    hovertext=hover, hoverinfo="text" if hover else None)
    fig.update_layout(barmode="group")
    return apply_style(fig, title=title or METRIC_LABELS.get(metric, metric), xaxis=x,
                       yaxis=METRIC_LABELS.get(metric, metric))


def metrics_grid_figure(df, metrics: Sequence[str] = ("log2_mse", "log2_mse_special", "explained_variance", "l0",
                                                       "delta_loss_pct", "ce_loss_score", "delta_loss_pct_response",
                                                       "ce_loss_score_response"),
                        *, x: str = "architecture", color: str = "method", title: str = "SAE comparison"):
    """Small multiples: one grouped-bar panel per metric."""
    from plotly.subplots import make_subplots

    metrics = [m for m in metrics if m in df.columns]
    n = len(metrics)
    cols = min(3, max(n, 1))
    rows = max(1, math.ceil(n / cols))
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[METRIC_LABELS.get(m, m) for m in metrics])
    groups = list(df.groupby(color, sort=False))
    for k, m in enumerate(metrics):
        r, c = k // cols + 1, k % cols + 1
        for i, (name, g) in enumerate(groups):
            fig.add_bar(x=g[x].astype(str), y=g[m].astype(float), name=str(name), legendgroup=str(name),
                        showlegend=k == 0, marker_color=QUALITATIVE[i % len(QUALITATIVE)], row=r, col=c)
    fig.update_layout(barmode="group")
    return apply_style(fig, title=title, height=320 * rows)


def gsnr_figure(df, *, stat: str = "mean", color: str = "method", facet: str | None = None,
                title: str = "Gradient signal-to-noise ratio per SAE parameter"):
    """Bars of per-tensor GSNR (log y). df columns: tensor, `stat`, `color` (and optionally `facet`, e.g. theta)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    facets = list(df[facet].unique()) if facet else [None]
    fig = make_subplots(rows=1, cols=len(facets), subplot_titles=[str(f) for f in facets] if facet else None,
                        shared_yaxes=True)
    names = list(dict.fromkeys(df[color]))
    for j, fv in enumerate(facets):
        sub = df if fv is None else df[df[facet] == fv]
        for i, name in enumerate(names):
            g = sub[sub[color] == name]
            fig.add_trace(go.Bar(x=g["tensor"], y=g[stat].astype(float).clip(lower=1e-12), name=str(name),
                                 legendgroup=str(name), showlegend=j == 0,
                                 marker_color=QUALITATIVE[i % len(QUALITATIVE)]), row=1, col=j + 1)
    fig.update_yaxes(type="log")
    fig.update_layout(barmode="group")
    return apply_style(fig, title=title, yaxis=f"GSNR ({stat} over coordinates)")


def training_curves_figure(logs: Mapping[str, object], y: str = "mse_loss", *, x: str = "step",
                           log_y: bool = True, title: str | None = None):
    """One line per run: `logs` maps run label -> training_log DataFrame."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for i, (name, df) in enumerate(logs.items()):
        if df is None or len(df) == 0 or y not in df:
            continue
        fig.add_scatter(x=df[x], y=df[y], mode="lines", name=str(name), line=dict(color=QUALITATIVE[i % 8]))
    if log_y:
        fig.update_yaxes(type="log")
    return apply_style(fig, title=title or f"{y} during training", xaxis=x, yaxis=y)


def density_histogram_figure(log10_density: Mapping[str, np.ndarray], *, bins: int = 40,
                             title: str = "Feature density (log10 fraction of tokens)"):
    """Overlaid histograms of log10 feature density per run (dead features sit at the floor, -10)."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for i, (name, v) in enumerate(log10_density.items()):
        fig.add_histogram(x=np.asarray(v, dtype=float), nbinsx=bins, name=str(name), opacity=0.6,
                          marker_color=QUALITATIVE[i % 8])
    fig.update_layout(barmode="overlay")
    return apply_style(fig, title=title, xaxis="log10 density", yaxis="features")


def feature_histogram_figure(stats, feature: int, *, title: str | None = None):
    """Histogram of log10(activation) over the tokens where `feature` is active (from FeatureStats)."""
    import plotly.graph_objects as go

    edges = np.asarray(stats.hist_edges)
    counts = np.asarray(stats.hist_counts[feature])
    centres = (edges[:-1] + edges[1:]) / 2
    fig = go.Figure(go.Bar(x=10 ** centres, y=counts, width=np.diff(10 ** edges), marker_color=QUALITATIVE[0],
                           hovertemplate="activation ~ %{x:.3g}<br>tokens = %{y}<extra></extra>"))
    fig.update_xaxes(type="log")
    return apply_style(fig, title=title or f"Feature {feature}: activation histogram (active tokens)",
                       xaxis="activation", yaxis="tokens", height=320)


def logit_effects_figure(stats, feature: int, *, title: str | None = None):
    """Top promoted / suppressed tokens of W_dec[feature] @ W_U^T as horizontal bars."""
    import plotly.graph_objects as go

    s = {k: token_label(v) for k, v in stats.token_strs.items()}
    top = [(s.get(int(i), str(int(i))), float(v))
           for i, v in zip(stats.logit_top_ids[feature], stats.logit_top_vals[feature])]
    bot = [(s.get(int(i), str(int(i))), float(v))
           for i, v in zip(stats.logit_bottom_ids[feature], stats.logit_bottom_vals[feature])]
    items = bot[::-1] + top[::-1]
    # unique y labels even if a token appears twice
    labels = [f"{t} " if k < len(bot) else t for k, (t, _) in enumerate(items)]
    fig = go.Figure(go.Bar(x=[v for _, v in items], y=labels, orientation="h",
                           marker_color=[QUALITATIVE[3] if v < 0 else QUALITATIVE[0] for _, v in items]))
    return apply_style(fig, title=title or f"Feature {feature}: logit effects (W_dec · W_U)", xaxis="logit effect",
                       height=max(300, 22 * len(items)))


def special_token_heatmap(stats, *, top: int = 5, title: str = "Special-token features (mean per-sample max activation)"):
    """Special tokens (rows) x the union of each token's top features (columns)."""
    import plotly.graph_objects as go

    keep = np.asarray(stats.special_counts) > 0
    S = np.asarray(stats.special_scores)[keep]
    ids = np.asarray(stats.special_ids)[keep]
    feats = []
    for r in S:
        for f in np.argsort(-r)[:top]:
            if int(f) not in feats:
                feats.append(int(f))
    z = S[:, feats] if feats else np.zeros((len(S), 0))
    ylab = [token_label(stats.token_strs.get(int(t), str(int(t)))) for t in ids]
    fig = go.Figure(go.Heatmap(z=z, x=[f"#{f}" for f in feats], y=ylab, colorscale=SEQUENTIAL,
                               hovertemplate="token %{y}<br>feature %{x}<br>score %{z:.3g}<extra></extra>"))
    fig.update_xaxes(type="category")
    return apply_style(fig, title=title, xaxis="feature", yaxis="token", height=max(280, 40 * len(ylab) + 120))


def steering_sweep_figure(result, *, title: str | None = None):
    """Target-feature activation on the generated tokens and repetition vs alpha (means over prompts)."""
    from plotly.subplots import make_subplots

    s = result.summary()
    fig = make_subplots(rows=1, cols=2, subplot_titles=["target feature activation (clean re-forward)",
                                                        "repeated 3-gram fraction"])
    fig.add_scatter(x=s["alpha"], y=s["target_activation"], mode="lines+markers", name="activation",
                    line=dict(color=QUALITATIVE[0]), row=1, col=1)
    fig.add_scatter(x=s["alpha"], y=s["repeated_3gram_frac"], mode="lines+markers", name="repetition",
                    line=dict(color=QUALITATIVE[3]), row=1, col=2)
    fig.update_xaxes(title_text="alpha")
    return apply_style(fig, title=title or f"Steering sweep, feature {result.config.feature} "
                                           f"({result.config.positions} positions)", height=360)


def leakage_figure(df, value: str = "rel_l2", *,
                   title: str = "Packing leakage: block vs per-sample (FAST) activations by segment index"):
    """Box plot per segment index inside a block (df columns: segment_index and `value`, e.g. rel_l2 =
    mean ||a_block - a_FAST|| / ||a_FAST|| or abs_diff = max |diff|)."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for i, (k, g) in enumerate(df.groupby("segment_index")):
        fig.add_box(y=g[value].clip(lower=1e-12), name=str(k), marker_color=QUALITATIVE[0], showlegend=False)
    fig.update_yaxes(type="log")
    label = {"rel_l2": "relative L2 difference", "abs_diff": "max |diff|",
             "abs_diff_rel": "max |diff| / typical norm"}.get(value, value)
    return apply_style(fig, title=title, xaxis="segment index in block (0 = block start)", yaxis=label)


def context_html(tokens: Sequence[str], acts: Sequence[float], vmax: float | None = None) -> str:
    """Tokens shaded by activation (inline HTML; used by the feature browser and exported reports). The tokens
    are written back to back as the text they decode to (no gap between the pieces of a word: "SmolLM", not
    "Sm ol LM"; spaces are the tokens' own), each shaded box with its activation on hover; a newline is shown as
    '⏎' and breaks the line."""
    import html

    a = np.nan_to_num(np.asarray(acts, dtype=float), nan=0.0)
    vmax = vmax or (float(a.max()) if a.size and a.max() > 0 else 1.0)
    parts = []
    for t, v in zip(tokens, a):
        alpha = max(0.0, min(1.0, v / vmax))
        text = html.escape(token_text(t)).replace("\n", "⏎<br>")
        parts.append(f'<span title="{v:.3g}" style="background: rgba(230,159,0,{alpha:.2f})">{text}</span>')
    return ("<div style='line-height:1.9; font-family: monospace; font-size: 13px; white-space: pre-wrap'>"
            + "".join(parts) + "</div>")


SYNTHETIC_METRICS = {"mcc": "MCC (all true features)", "rec_bos": "recovery: bos (special token)",
                     "rec_eot": "recovery: eot (special token)", "rec_pos": "recovery: position features",
                     "rec_topic": "recovery: topic features", "rec_generic": "recovery: generic features",
                     "explained_variance": "explained variance (FAST)",
                     "explained_variance_packed": "explained variance (packed BT(F))"}


def sequential_truth_figure(df, metrics: Sequence[str] = ("mcc", "rec_bos", "rec_eot", "rec_pos", "rec_topic",
                                                          "rec_generic"), *, title: str | None = None):
    """Sequential synthetic benchmark (`interplab.sae.sequential`): per metric, one bar per training arm (FAST,
    BT(F), BT(P)) with the mean over SAE seeds and a 95% Student-t interval (`stats.intervals`), all scored on the
    FAST distribution against the true features. `df`: one row per (arm, seed)."""
    import plotly.graph_objects as go

    from interplab.probes.stats import intervals

    labels = {"fast": "FAST", "bt_f": "BT(F)", "bt_p": "BT(P)"}
    fig = go.Figure()
    for i, (arm, g) in enumerate(df.groupby("arm", sort=False)):
        cis = [intervals(g[m]) for m in metrics]
        means = [c["mean"] for c in cis]
        plus = [c["hi"] - c["mean"] if math.isfinite(c["hi"]) else 0.0 for c in cis]
        minus = [c["mean"] - c["lo"] if math.isfinite(c["lo"]) else 0.0 for c in cis]
        hover = [f"{labels.get(arm, arm)}<br>{m}: {c['mean']:.3f} [{c['lo']:.3f}, {c['hi']:.3f}] (t, n={c['n']})"
                 for m, c in zip(metrics, cis)]
        fig.add_bar(x=[SYNTHETIC_METRICS.get(m, m) for m in metrics], y=means, name=labels.get(arm, arm),
                    marker_color=QUALITATIVE[i % len(QUALITATIVE)], hovertext=hover, hoverinfo="text",
                    error_y=dict(type="data", array=plus, arrayminus=minus, visible=True))
    fig.update_layout(barmode="group", yaxis_range=[0, 1.05])
    return apply_style(fig, title=title or "Sequential synthetic benchmark: recovery of the true features "
                                            "(FAST distribution; mean and 95% t interval over SAE seeds)",
                       xaxis="", yaxis="max |cos| / MCC")


def sequential_l0_figure(df, metric: str = "mcc", *, title: str | None = None):
    """Matched-L0 view of the sequential benchmark: `metric` against measured L0 (FAST distribution), one line per
    arm over the TopK sweep (k), mean and 95% t interval over SAE seeds (`stats.intervals`) at each k."""
    import plotly.graph_objects as go

    from interplab.probes.stats import intervals

    labels = {"fast": "FAST", "bt_f": "BT(F)", "bt_p": "BT(P)"}
    fig = go.Figure()
    for i, (arm, g) in enumerate(df.groupby("arm", sort=False)):
        pts = [(intervals(h["sae_l0"])["mean"], intervals(h[metric])) for _, h in g.groupby("k")]
        ys = [c["mean"] for _, c in pts]
        err = [c["hi"] - c["mean"] if math.isfinite(c["hi"]) else 0.0 for _, c in pts]
        fig.add_scatter(x=[x for x, _ in pts], y=ys, mode="lines+markers", name=labels.get(arm, arm),
                        line_color=QUALITATIVE[i % len(QUALITATIVE)], error_y=dict(type="data", array=err))
    return apply_style(fig, title=title or f"{SYNTHETIC_METRICS.get(metric, metric)} vs L0 (TopK sweep; 95% t "
                                           "intervals over SAE seeds)", xaxis="L0 (FAST distribution)",
                       yaxis=SYNTHETIC_METRICS.get(metric, metric))


PARETO_EVALS = {"fast": "FAST distribution (one dialogue per forward)",
                "packed": "packed distribution (BT(F) blocks)"}


def pareto_figure(summary, metric: str = "log2_mse", *, architectures: Sequence[str] | None = None,
                  title: str | None = None):
    """Pareto curves of `metric` against L0 (`interplab.sae.pareto.pareto_summary` rows: one per eval distribution,
    architecture, sparsity value and method, with `<m>_mean/_lo/_hi`): one panel per eval distribution, one line
    per (method, architecture) through its sweep points ordered by L0, 95% t interval bars over SAE seeds on both
    axes. Colour = method, dash = architecture; L0 on a log axis."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    evals = [e for e in PARETO_EVALS if e in set(summary["eval"])]
    fig = make_subplots(rows=1, cols=len(evals), subplot_titles=[PARETO_EVALS[e] for e in evals],
                        shared_yaxes=True, horizontal_spacing=0.06)
    methods = list(dict.fromkeys(summary["method"]))
    archs = list(architectures or dict.fromkeys(summary["architecture"]))
    dashes = ("solid", "dash", "dot", "dashdot")

    def bars(g, m):
        hi, lo, mean = g[f"{m}_hi"].to_numpy(float), g[f"{m}_lo"].to_numpy(float), g[f"{m}_mean"].to_numpy(float)
        return dict(type="data", array=np.nan_to_num(hi - mean), arrayminus=np.nan_to_num(mean - lo), visible=True)

    for c, ev in enumerate(evals, start=1):
        for i, meth in enumerate(methods):
            for j, arch in enumerate(archs):
                g = summary[(summary["eval"] == ev) & (summary["method"] == meth)
                            & (summary["architecture"] == arch)].sort_values("l0_mean")
                if not len(g) or f"{metric}_mean" not in g:
                    continue
                hover = [f"{meth} {arch} ({s:g})<br>L0 {l:.1f} [{a:.1f}, {b:.1f}]<br>{metric} {v:.4g} "
                         f"[{lo:.4g}, {hi:.4g}] (t, n={n})" for s, l, a, b, v, lo, hi, n in
                         zip(g["sparsity"], g["l0_mean"], g["l0_lo"], g["l0_hi"], g[f"{metric}_mean"],
                             g[f"{metric}_lo"], g[f"{metric}_hi"], g["n"])]
                fig.add_scatter(x=g["l0_mean"], y=g[f"{metric}_mean"], mode="lines+markers",
                                name=f"{meth} · {arch}", legendgroup=f"{meth}{arch}", showlegend=c == 1,
                                line=dict(color=QUALITATIVE[i % len(QUALITATIVE)], dash=dashes[j % len(dashes)]),
                                error_x=bars(g, "l0"), error_y=bars(g, metric), hovertext=hover, hoverinfo="text",
                                row=1, col=c)
        fig.update_xaxes(type="log", title_text="L0 (active features / token)", row=1, col=c)
    fig.update_yaxes(title_text=METRIC_LABELS.get(metric, metric), row=1, col=1)
    return apply_style(fig, title=title or f"{METRIC_LABELS.get(metric, metric)} vs L0 (mean and 95% t interval "
                                           "over SAE seeds)", height=420)
