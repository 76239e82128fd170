"""The SAE Training page's sections (pages/7_SAE_Training.py) and the SAE runs folder the Feature
Browser shares: training, comparing runs, GSNR, the synthetic ground truth and the matched-L0
comparison. Widget keys start with `sae_`."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

from interplab.app.compute import cached_compute
from interplab.app.widgets import later_verdicts, saved_result, show_figure
from interplab.core.errors import InterplabError

ROOT_KEY = "sae_root"       # the SAE runs folder: SAE Training and Feature Browser share it
COMPARE_COLUMNS = ["run", "method", "architecture", "log2_mse", "log2_mse_special",
                   "explained_variance", "l0", "dead_features", "delta_loss_pct", "ce_loss_score",
                   "kl_sae", "delta_loss_pct_response", "ce_loss_score_response",
                   "kl_sae_response", "train_tokens_per_s"]
PARETO_METRICS = ["log2_mse", "delta_ce_response", "explained_variance", "ce_loss_score_response",
                  "kl_sae_response", "delta_ce", "log2_mse_special"]


def runs_root() -> Path:
    """The SAE runs folder this session works in (default `<INTERPLAB_HOME>/saes`)."""
    from interplab.results.runs import interplab_home

    return Path(st.session_state.get(ROOT_KEY, str(interplab_home() / "saes")))


def sae_dirs(root: Path) -> list[Path]:
    """The SAELens directories in `root`, newest first."""
    if not root.is_dir():
        return []
    return sorted([p for p in root.iterdir() if (p / "cfg.json").exists()],
                  key=lambda p: p.stat().st_mtime, reverse=True)


def pick_root() -> Path:
    root = Path(st.sidebar.text_input("SAE runs folder", value=str(runs_root()),
                                      key="sae_root_input",
                                      help="every run is an SAELens directory inside this folder"))
    st.session_state[ROOT_KEY] = str(root)
    return root


def runs(root: Path, name: str) -> dict[str, Path]:
    """{label: SAE directory}: the user's runs in `root` (newest first), then the SAEs shipped with
    model `name`."""
    from interplab.zoo import shipped_saes

    return {**{p.name: p for p in sae_dirs(root)},
            **{f"{p.name} (shipped with {name})": p for p in shipped_saes(name)}}


@cached_compute(max_entries=4)
def data(model, *, n_train: int, n_eval: int):
    from interplab.sae import sae_data

    return sae_data(model, n_train, n_eval, n_train, seed=0)


PAIRS = (("delta_loss_pct",
          "Delta Loss (%): relative increase of the next-token loss with the SAE spliced in"),
         ("ce_loss_score",
          "CE score: share of the zero-ablation loss gap the SAE recovers (1 = lossless)"),
         ("kl_sae", "KL(clean ‖ with SAE), nats/token"),
         ("ce_clean", "clean loss (nats/token) the relative numbers divide by"))


def loss_pairs(row: dict) -> pd.DataFrame:
    """The loss metrics measured on every position next to the same metrics on assistant-answer
    positions only."""
    return pd.DataFrame([{"metric": label, "all positions": row.get(k),
                          "assistant answers only": row.get(f"{k}_response")}
                         for k, label in PAIRS if k in row])


def disagreement(row: dict) -> str | None:
    """One line saying why the all-position and answer-only numbers tell different stories (None
    if they agree)."""
    d_all, d_resp = row.get("delta_loss_pct"), row.get("delta_loss_pct_response")
    if d_all is None or d_resp is None:
        return None
    if abs(d_resp) <= max(10.0, 3 * abs(d_all)):
        return None
    ce = row.get("ce_clean_response", float("nan"))
    return (f"They disagree because the clean loss on the answers is tiny ({ce:.2g} nats/token: "
            "the organism is nearly certain of its answers), so a small absolute increase is a "
            "huge relative Delta Loss; the CE score, which compares with zero-ablation, is the "
            "fairer answer-only number. The all-position numbers are dominated by prompt tokens a "
            "chat model was never trained to predict.")


def show_loss_metrics(row: dict, *, key: str) -> None:
    st.markdown("**Loss metrics: all positions vs assistant answers only** (the `_response` "
                "columns)")
    st.dataframe(loss_pairs(row), hide_index=True, key=key)
    why = disagreement(row)
    if why:
        st.caption(why)


def train(picked, model, root: Path) -> None:
    """The Train tab: one SAE on SAELens, saved in `root` and evaluated on held-out dialogues."""
    from interplab.core.io import write_json
    from interplab.sae import ARCHITECTURES, METHOD_LABELS, metrics_row, train_one

    c1, c2, c3, c4 = st.columns(4)
    with c1:
        method = st.selectbox("Method", list(METHOD_LABELS), format_func=METHOD_LABELS.get,
                              key="sae_method")
        arch = st.selectbox("Architecture", list(ARCHITECTURES),
                            index=list(ARCHITECTURES).index("jumprelu"), key="sae_arch")
    with c2:
        layer = st.number_input("Layer (resid_post)", 0, model.n_layers - 1,
                                value=max(0, model.n_layers // 2 - 1), key="sae_layer")
        expansion = st.number_input("Expansion (d_sae / d_model)", 1, 64, value=8,
                                    key="sae_expansion")
    with c3:
        steps = st.number_input("Steps", 1, 100_000, value=300, key="sae_steps")
        batch = st.number_input("Batch tokens", 8, 8192, value=128, key="sae_batch")
    with c4:
        lr = st.number_input("Learning rate", 1e-6, 1e-1, value=1e-3, format="%.5f", key="sae_lr")
        coef = st.number_input("Sparsity coefficient (L1 standard/gated, L0 jumprelu)", 0.0, 100.0,
                               value=0.5 if arch == "jumprelu" else 1.0, format="%.4f",
                               key="sae_coef")
    c5, c6, c7 = st.columns(3)
    with c5:
        n_train = st.number_input("Training dialogues / texts", 8, 100_000, value=400,
                                  key="sae_ntrain")
    with c6:
        n_eval = st.number_input("Held-out evaluation dialogues", 2, 10_000, value=64,
                                 key="sae_neval")
    with c7:
        run_name = st.text_input("Run name", value=f"{arch}_{method}_L{layer}", key="sae_run_name")
    mode = st.radio("Training mode", ["paper", "native"], horizontal=True, key="sae_mode",
                    help="paper = SAELens 5.x semantics used by the FAST paper (geometric-median "
                         "b_dec, unit-norm decoder rows); native = SAELens 6 defaults")
    if not st.button("Train", key="sae_train_btn", type="primary"):
        return
    d = data(model, key=picked.key, n_train=int(n_train), n_eval=int(n_eval))
    out = root / run_name
    bar = st.progress(0.0, text="harvesting activations...")

    def progress(step, total, row):
        mse = row.get("mse_loss", float("nan"))
        bar.progress(min(1.0, step / total),
                     text=f"step {step}/{total} · mse {mse:.4g} · L0 {row['l0']:.1f}")

    try:
        kw = {"l0_coefficient": coef} if arch == "jumprelu" else {"l1_coefficient": coef}
        train_one(model, d, out, method=method, architecture=arch, site=f"resid_post.{int(layer)}",
                  steps=int(steps), batch_tokens=int(batch), lr=float(lr),
                  expansion=int(expansion), mode=mode, progress=progress, overwrite=True, **kw)
        bar.progress(1.0, text="evaluating on held-out dialogues...")
        row = metrics_row(model, out, d.eval, method=METHOD_LABELS[method], architecture=arch,
                          run=run_name)
        write_json(out / "metrics.json", row)
        bar.progress(1.0, text=f"done: {int(steps)} steps trained and evaluated")
        st.success(f"Saved `{out}` (SAELens format: `sae_lens.SAE.load_from_disk('{out}')`).")
        show_loss_metrics(row, key="sae_new_pairs")
        st.dataframe(pd.DataFrame([row]).drop(columns=["path"]), hide_index=True,
                     key="sae_new_metrics")
    except InterplabError as e:
        bar.empty()
        st.error(str(e))


def compare(root: Path, name: str) -> None:
    """The Compare runs tab: metrics table, bar charts, training curves and feature density of
    chosen runs."""
    from interplab.core.io import read_arrays, read_json
    from interplab.figures.sae import (density_histogram_figure, metrics_grid_figure,
                                       training_curves_figure)
    from interplab.sae import load_train_info, load_training_log

    found = runs(root, name)
    if not found:
        st.info(f"No SAE runs in `{root}` yet: train one in the Train tab.")
        return
    chosen = st.multiselect("Runs", list(found), default=list(found)[:6], key="sae_cmp")
    rows, logs, dens = [], {}, {}
    for nm in chosen:
        p = found[nm]
        mfile = p / "metrics.json"
        info = load_train_info(p)
        row = read_json(mfile) if mfile.exists() else {
            "method": info.get("method", "?"), "architecture": info.get("architecture", "?")}
        row["run"] = nm
        rows.append(row)
        logs[nm] = load_training_log(p)
        if (p / "sparsity.safetensors").exists():
            dens[nm] = read_arrays(p / "sparsity.safetensors")["sparsity"]
    if not rows:
        return
    df = pd.DataFrame(rows)
    show_cols = [c for c in COMPARE_COLUMNS if c in df.columns]
    st.dataframe(df[show_cols], hide_index=True, key="sae_cmp_table")
    if "delta_loss_pct_response" in df.columns:
        st.caption("Columns without a suffix are measured on every position of the held-out "
                   "dialogues; `_response` columns on the positions that predict assistant-answer "
                   "tokens only. " + (disagreement(rows[0]) or ""))
    if "log2_mse" in df.columns:
        df["label"] = df["run"]
        show_figure(metrics_grid_figure(df, x="architecture", color="method"), key="sae_cmp_bars")
    y = st.selectbox("Training curve",
                     ["mse_loss", "loss", "l0", "explained_variance", "dead_features"],
                     key="sae_curve_y")
    show_figure(training_curves_figure(logs, y=y, log_y=y in ("mse_loss", "loss")),
                key="sae_curves")
    if dens:
        show_figure(density_histogram_figure(dens), key="sae_density")


def gsnr_tab(picked, model, root: Path) -> None:
    """The GSNR tab: each chosen run's final SAE on mini-batches from a chosen activation source."""
    found = runs(root, picked.name)
    if not found:
        st.info("No runs yet.")
        return
    gruns = st.multiselect("Runs", list(found), default=list(found)[:3], key="sae_gsnr_runs")
    src = st.selectbox("Data source", ["own method", "fast", "bt_f", "bt_p"], key="sae_gsnr_src")
    nb = st.number_input("Mini-batches", 2, 1000, value=16, key="sae_gsnr_nb")
    gb = st.number_input("Tokens per mini-batch (B)", 8, 4096, value=128, key="sae_gsnr_b")
    if not (st.button("Compute GSNR", key="sae_gsnr_btn") and gruns):
        return
    from interplab.figures.sae import gsnr_figure
    from interplab.sae import (METHOD_LABELS, block_provider, fast_provider, gsnr, load_sae,
                               load_train_info)

    d = data(model, key=picked.key, n_train=400, n_eval=8)
    frames = []
    bar = st.progress(0.0)
    for i, nm in enumerate(gruns):
        p = found[nm]
        info = load_train_info(p)
        sae = load_sae(p)
        site = (sae.cfg.metadata.get("interplab_site")
                or f"resid_post.{max(0, model.n_layers // 2 - 1)}")
        m = src
        if m == "own method":
            md = sae.cfg.metadata
            m = "fast" if md.get("training_data_mode") == "fast_sequential" else (
                "bt_p" if md.get("block_data") == "texts" else "bt_f")
        if m == "fast":
            prov = fast_provider(model, d.train, site=site, repeat=True)
        else:
            prov = block_provider(model, d.texts if m == "bt_p" else d.train, site=site,
                                  context_size=int(info.get("context_size", 128)), repeat=True)
        g = gsnr(sae, prov, n_batches=int(nb), batch_tokens=int(gb))
        g["method"] = f"{nm} on {METHOD_LABELS.get(m, m)}"
        frames.append(g)
        bar.progress((i + 1) / len(gruns))
    gdf = pd.concat(frames, ignore_index=True)
    st.dataframe(gdf, hide_index=True, key="sae_gsnr_table")
    show_figure(gsnr_figure(gdf), key="sae_gsnr_fig")


def synthetic_truth() -> None:
    """A saved `sae-synthetic` run: recovery of known features per arm, and MCC against L0."""
    syn_res = saved_result("sae-synthetic", "sequential", "sae_syn_run",
                           label="Saved sae-synthetic run",
                           hint=" (add `--set 'ks=[2,4,8]'` for the MCC vs L0 curve)")
    if syn_res is None:
        return
    from interplab.figures.sae import sequential_l0_figure, sequential_truth_figure

    syn = syn_res.table
    ks = sorted(syn["k"].unique()) if "k" in syn else [None]
    k_pick = (st.selectbox("TopK k (L0)", ks, index=len(ks) // 2, key="sae_syn_k") if len(ks) > 1
              else ks[0])
    show_figure(sequential_truth_figure(syn if k_pick is None else syn[syn["k"] == k_pick]),
                key="sae_syn_fig")
    if len(ks) > 1:
        metric = st.selectbox("Matched-L0 metric (MCC vs L0 against the known features)",
                              ["mcc", "rec_bos", "rec_eot", "explained_variance",
                               "explained_variance_packed"], key="sae_syn_metric")
        show_figure(sequential_l0_figure(syn, metric), key="sae_syn_l0_fig")
    else:
        st.caption("This run has one k: run `interplab run sae-synthetic --set 'ks=[2,4,8]'` for "
                   "MCC vs L0.")
    st.dataframe(syn.round(4), hide_index=True, key="sae_syn_table")


def matched_l0(name: str) -> None:
    """A saved `sae-pareto` run (the SmolLM2 run first when SmolLM2 is the page's model), with the
    verdicts a later `sae-verdicts` run made from it."""
    from interplab.experiments.sae_pareto import matched_l0 as matched, pareto_summary

    pareto = saved_result("sae-pareto", "pareto", "sae_pareto_run", label="Saved sae-pareto run",
                          prefer_model=name)
    if pareto is None:
        return
    # saved before runs checked themselves: sae-verdicts made its verdicts
    later_verdicts("sae-verdicts", st.session_state.get("sae_pareto_run"),
                   key="sae_pareto_later_verdicts")
    from interplab.figures.sae import METRIC_LABELS, pareto_figure

    p_summary, p_matched = pareto_summary(pareto.table), matched(pareto.table)
    archs = list(dict.fromkeys(p_summary["architecture"]))
    p_arch = st.multiselect("Architectures", archs, default=archs, key="sae_pareto_arch")
    p_metric = st.selectbox("Metric against L0", PARETO_METRICS,
                            format_func=lambda m: METRIC_LABELS.get(m, m), key="sae_pareto_metric")
    show_figure(pareto_figure(p_summary[p_summary["architecture"].isin(p_arch)], p_metric),
                key="sae_pareto_fig")
    st.markdown("**At matched L0** (TopK: the sweep points; Standard: interpolated in log L0 "
                "inside the range every seed's curve covers). `fast_minus_*`: FAST minus that "
                "arm, paired by SAE seed, 95% t interval.")
    cols = [c for c in p_matched.columns
            if c.split("_")[0] in ("eval", "architecture", "l0", "method", "n")
            or c.startswith(("log2_mse", "delta_ce_response", "fast_minus_log2_mse",
                             "fast_minus_delta_ce"))]
    st.dataframe(p_matched[cols].round(4), hide_index=True, key="sae_pareto_matched")
    st.caption(f"{pareto.config.get('steps')} steps x {pareto.config.get('batch_tokens')} tokens "
               f"per SAE, seeds {pareto.config.get('seeds')}; MCC against known features needs "
               "ground truth: see the sequential synthetic benchmark's MCC vs L0 curve above.")
