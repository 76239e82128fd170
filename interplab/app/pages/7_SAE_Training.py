"""SAE Training page: train FAST / BT(F) / BT(P) SAEs on SAELens, compare runs (metrics table, bar charts,
training curves, feature density) and their gradient signal-to-noise ratio."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

st.set_page_config(page_title="interplab · SAE Training", page_icon=":microscope:", layout="wide")

from interplab.app.widgets import page_model, show_figure  # noqa: E402
from interplab.core.errors import InterplabError  # noqa: E402

st.title("SAE Training")
st.caption("Train sparse autoencoders with SAELens's trainer on FAST (one chat-templated dialogue per forward) or "
           "block-packed activations (BT(F) on the same dialogues, BT(P) on plain text), then compare them on held-out "
           "dialogues: log2 MSE (paper Eq. 7), MSE on special tokens, explained variance, L0, Delta Loss, CE score. "
           "Delta Loss / CE score / KL come twice: over every position and (`_response`) over the positions that "
           "predict assistant-answer tokens only, the tokens a chat model is trained on: on a chat organism the "
           "all-position numbers are dominated by prompt tokens it never learned to predict.")

picked = page_model("sae", page="sae", suggested="toy-chat", fits=lambda n: n.endswith("chat"))
name, backend, device, dtype = picked.name, picked.backend, picked.device, picked.dtype

with st.expander("Your data (CSV / JSONL / Parquet file)"):
    from interplab.app.data_box import data_box, run_with_data  # noqa: E402

    run_with_data("sae", data_box("sae", key="sae_data"), key="sae_data",
                  overrides={"model": name})

model = picked.load()

from interplab.core.io import read_json, write_json  # noqa: E402
from interplab.results.runs import interplab_home  # noqa: E402
from interplab.sae import (ARCHITECTURES, METHOD_LABELS, load_train_info, load_training_log, metrics_row,  # noqa: E402
                           sae_data, train_one)

default_root = str(interplab_home() / "saes")
root = Path(st.sidebar.text_input("SAE runs folder", value=st.session_state.get("sae_root", default_root),
                                  key="sae_root_input", help="every run is an SAELens directory inside this folder"))
st.session_state["sae_root"] = str(root)


@st.cache_data(max_entries=4, show_spinner=False)
def _data(model_key: tuple, n_train: int, n_eval: int, _model=None):
    return sae_data(_model, n_train, n_eval, n_train, seed=0)


def _runs(root: Path) -> dict[str, Path]:
    """{label: SAE directory}: the user's runs in `root` (newest first), then the SAEs shipped with the model."""
    from interplab.zoo import shipped_saes

    mine = sorted([p for p in root.iterdir() if (p / "cfg.json").exists()], key=lambda p: p.stat().st_mtime,
                  reverse=True) if root.is_dir() else []
    return {**{p.name: p for p in mine}, **{f"{p.name} (shipped with {name})": p for p in shipped_saes(name)}}


PAIRS = (("delta_loss_pct", "Delta Loss (%): relative increase of the next-token loss with the SAE spliced in"),
         ("ce_loss_score", "CE score: share of the zero-ablation loss gap the SAE recovers (1 = lossless)"),
         ("kl_sae", "KL(clean ‖ with SAE), nats/token"),
         ("ce_clean", "clean loss (nats/token) the relative numbers divide by"))


def loss_pairs(row: dict) -> pd.DataFrame:
    """The loss metrics measured on every position next to the same metrics on assistant-answer positions only."""
    return pd.DataFrame([{"metric": label, "all positions": row.get(k), "assistant answers only": row.get(f"{k}_response")}
                         for k, label in PAIRS if k in row])


def disagreement(row: dict) -> str | None:
    """One line saying why the all-position and answer-only numbers tell different stories (None if they agree)."""
    d_all, d_resp = row.get("delta_loss_pct"), row.get("delta_loss_pct_response")
    if d_all is None or d_resp is None:
        return None
    if abs(d_resp) <= max(10.0, 3 * abs(d_all)):
        return None
    ce = row.get("ce_clean_response", float("nan"))
    return (f"They disagree because the clean loss on the answers is tiny ({ce:.2g} nats/token: the organism is "
            "nearly certain of its answers), so a small absolute increase is a huge relative Delta Loss; the CE "
            "score, which compares with zero-ablation, is the fairer answer-only number. The all-position numbers are "
            "dominated by prompt tokens a chat model was never trained to predict.")


def show_loss_metrics(row: dict, *, key: str) -> None:
    st.markdown("**Loss metrics: all positions vs assistant answers only** (the `_response` columns)")
    st.dataframe(loss_pairs(row), hide_index=True, key=key)
    why = disagreement(row)
    if why:
        st.caption(why)


tab_train, tab_compare, tab_gsnr = st.tabs(["Train", "Compare runs", "GSNR"])
model_key = (name, backend, device, dtype)

with tab_train:
    c1, c2, c3, c4 = st.columns(4)
    with c1:
        method = st.selectbox("Method", list(METHOD_LABELS), format_func=METHOD_LABELS.get, key="sae_method")
        arch = st.selectbox("Architecture", list(ARCHITECTURES), index=list(ARCHITECTURES).index("jumprelu"),
                            key="sae_arch")
    with c2:
        layer = st.number_input("Layer (resid_post)", 0, model.n_layers - 1, value=max(0, model.n_layers // 2 - 1),
                                key="sae_layer")
        expansion = st.number_input("Expansion (d_sae / d_model)", 1, 64, value=8, key="sae_expansion")
    with c3:
        steps = st.number_input("Steps", 1, 100_000, value=300, key="sae_steps")
        batch = st.number_input("Batch tokens", 8, 8192, value=128, key="sae_batch")
    with c4:
        lr = st.number_input("Learning rate", 1e-6, 1e-1, value=1e-3, format="%.5f", key="sae_lr")
        coef = st.number_input("Sparsity coefficient (L1 standard/gated, L0 jumprelu)", 0.0, 100.0,
                               value=0.5 if arch == "jumprelu" else 1.0, format="%.4f", key="sae_coef")
    c5, c6, c7 = st.columns(3)
    with c5:
        n_train = st.number_input("Training dialogues / texts", 8, 100_000, value=400, key="sae_ntrain")
    with c6:
        n_eval = st.number_input("Held-out evaluation dialogues", 2, 10_000, value=64, key="sae_neval")
    with c7:
        run_name = st.text_input("Run name", value=f"{arch}_{method}_L{layer}", key="sae_run_name")
    mode = st.radio("Training mode", ["paper", "native"], horizontal=True, key="sae_mode",
                    help="paper = SAELens 5.x semantics used by the FAST paper (geometric-median b_dec, unit-norm "
                         "decoder rows); native = SAELens 6 defaults")
    if st.button("Train", key="sae_train_btn", type="primary"):
        data = _data(model_key, int(n_train), int(n_eval), _model=model)
        out = root / run_name
        bar = st.progress(0.0, text="harvesting activations...")

        def progress(step, total, row):
            bar.progress(min(1.0, step / total),
                         text=f"step {step}/{total} · mse {row.get('mse_loss', float('nan')):.4g} · L0 {row['l0']:.1f}")

        try:
            kw = {"l0_coefficient": coef} if arch == "jumprelu" else {"l1_coefficient": coef}
            train_one(model, data, out, method=method, architecture=arch, site=f"resid_post.{int(layer)}",
                      steps=int(steps), batch_tokens=int(batch), lr=float(lr), expansion=int(expansion), mode=mode,
                      progress=progress, overwrite=True, **kw)
            bar.progress(1.0, text="evaluating on held-out dialogues...")
            row = metrics_row(model, out, data.eval, method=METHOD_LABELS[method], architecture=arch,
                              run=run_name)
            write_json(out / "metrics.json", row)
            bar.progress(1.0, text=f"done: {int(steps)} steps trained and evaluated")
            st.success(f"Saved `{out}` (SAELens format: `sae_lens.SAE.load_from_disk('{out}')`).")
            show_loss_metrics(row, key="sae_new_pairs")
            st.dataframe(pd.DataFrame([row]).drop(columns=["path"]), hide_index=True, key="sae_new_metrics")
        except InterplabError as e:
            bar.empty()
            st.error(str(e))

with tab_compare:
    runs = _runs(root)
    if not runs:
        st.info(f"No SAE runs in `{root}` yet: train one in the Train tab.")
    else:
        chosen = st.multiselect("Runs", list(runs), default=list(runs)[:6], key="sae_cmp")
        rows, logs, dens = [], {}, {}
        for nm in chosen:
            p = runs[nm]
            mfile = p / "metrics.json"
            info = load_train_info(p)
            row = read_json(mfile) if mfile.exists() else {"method": info.get("method", "?"),
                                                            "architecture": info.get("architecture", "?")}
            row["run"] = nm
            rows.append(row)
            logs[nm] = load_training_log(p)
            sp = p / "sparsity.safetensors"
            if sp.exists():
                from interplab.core.io import read_arrays
                dens[nm] = read_arrays(sp)["sparsity"]
        if rows:
            df = pd.DataFrame(rows)
            show_cols = [c for c in ["run", "method", "architecture", "log2_mse", "log2_mse_special",
                                     "explained_variance", "l0", "dead_features", "delta_loss_pct", "ce_loss_score",
                                     "kl_sae", "delta_loss_pct_response", "ce_loss_score_response",
                                     "kl_sae_response", "train_tokens_per_s"] if c in df.columns]
            st.dataframe(df[show_cols], hide_index=True, key="sae_cmp_table")
            if "delta_loss_pct_response" in df.columns:
                st.caption("Columns without a suffix are measured on every position of the held-out dialogues; "
                           "`_response` columns on the positions that predict assistant-answer tokens only. "
                           + (disagreement(rows[0]) or ""))
            from interplab.figures.sae import density_histogram_figure, metrics_grid_figure, training_curves_figure

            if "log2_mse" in df.columns:
                df["label"] = df["run"]
                show_figure(metrics_grid_figure(df, x="architecture", color="method"), key="sae_cmp_bars")
            y = st.selectbox("Training curve", ["mse_loss", "loss", "l0", "explained_variance", "dead_features"],
                             key="sae_curve_y")
            show_figure(training_curves_figure(logs, y=y, log_y=y in ("mse_loss", "loss")), key="sae_curves")
            if dens:
                show_figure(density_histogram_figure(dens), key="sae_density")

with tab_gsnr:
    st.markdown("Gradient signal-to-noise ratio of each run's final SAE, with mini-batches of the same size drawn "
                "from a chosen activation source (the same θ under different data isolates the data effect).")
    runs = _runs(root)
    if not runs:
        st.info("No runs yet.")
    else:
        gruns = st.multiselect("Runs", list(runs), default=list(runs)[:3], key="sae_gsnr_runs")
        src = st.selectbox("Data source", ["own method", "fast", "bt_f", "bt_p"], key="sae_gsnr_src")
        nb = st.number_input("Mini-batches", 2, 1000, value=16, key="sae_gsnr_nb")
        gb = st.number_input("Tokens per mini-batch (B)", 8, 4096, value=128, key="sae_gsnr_b")
        if st.button("Compute GSNR", key="sae_gsnr_btn") and gruns:
            from interplab.figures.sae import gsnr_figure
            from interplab.sae import block_provider, fast_provider, gsnr, load_sae

            data = _data(model_key, 400, 8, _model=model)
            frames = []
            bar = st.progress(0.0)
            for i, nm in enumerate(gruns):
                p = runs[nm]
                info = load_train_info(p)
                sae = load_sae(p)
                site = sae.cfg.metadata.get("interplab_site") or f"resid_post.{max(0, model.n_layers // 2 - 1)}"
                m = src
                if m == "own method":
                    md = sae.cfg.metadata
                    m = "fast" if md.get("training_data_mode") == "fast_sequential" else (
                        "bt_p" if md.get("block_data") == "texts" else "bt_f")
                if m == "fast":
                    prov = fast_provider(model, data.train, site=site, repeat=True)
                else:
                    prov = block_provider(model, data.texts if m == "bt_p" else data.train, site=site,
                                          context_size=int(info.get("context_size", 128)), repeat=True)
                g = gsnr(sae, prov, n_batches=int(nb), batch_tokens=int(gb))
                g["method"] = f"{nm} on {METHOD_LABELS.get(m, m)}"
                frames.append(g)
                bar.progress((i + 1) / len(gruns))
            gdf = pd.concat(frames, ignore_index=True)
            st.dataframe(gdf, hide_index=True, key="sae_gsnr_table")
            show_figure(gsnr_figure(gdf), key="sae_gsnr_fig")

# ------------------------------------------------------------------------------------------------ ground truth
st.header("Ground truth: sequential synthetic benchmark")
st.caption("FAST vs BT(F) vs BT(P) SAEs trained on synthetic sequences whose features are known (special-token "
           "bos/eot, position, topic carried over when blocks are packed), all scored on the FAST distribution: MCC "
           "and the recovery (max |cos| of a decoder row) of each feature group; bars are means over SAE seeds with "
           "95% t intervals. Produced by `interplab run sae-synthetic` (model-free; docs/sae.md).")
from interplab.app.widgets import saved_result  # noqa: E402

syn_res = saved_result("sae-synthetic", "sequential", "sae_syn_run", label="Saved sae-synthetic run",
                       hint=" (add `--set 'ks=[2,4,8]'` for the MCC vs L0 curve)")
if syn_res is not None:
    from interplab.figures.sae import sequential_l0_figure, sequential_truth_figure

    syn = syn_res.table
    ks = sorted(syn["k"].unique()) if "k" in syn else [None]
    k_pick = st.selectbox("TopK k (L0)", ks, index=len(ks) // 2, key="sae_syn_k") if len(ks) > 1 else ks[0]
    show_figure(sequential_truth_figure(syn if k_pick is None else syn[syn["k"] == k_pick]), key="sae_syn_fig")
    if len(ks) > 1:
        metric = st.selectbox("Matched-L0 metric (MCC vs L0 against the known features)",
                              ["mcc", "rec_bos", "rec_eot", "explained_variance", "explained_variance_packed"],
                              key="sae_syn_metric")
        show_figure(sequential_l0_figure(syn, metric), key="sae_syn_l0_fig")
    else:
        st.caption("This run has one k: run `interplab run sae-synthetic --set 'ks=[2,4,8]'` for MCC vs L0.")
    st.dataframe(syn.round(4), hide_index=True, key="sae_syn_table")

# ------------------------------------------------------------------------------------------------ matched L0
st.header("FAST vs block training at matched L0")
st.caption("Every arm (FAST, BT(F), BT(P)) trained at every point of a sparsity sweep (TopK k: L0 = k, so the arms "
           "are matched exactly; Standard SAE L1 coefficient: L0 is an outcome, so arms are compared by "
           "interpolating each seed's curve at common L0), several SAE seeds per point, each SAE evaluated on the "
           "FAST distribution (one held-out dialogue per forward) and on the packed distribution (the same "
           "dialogues packed into BT(F) blocks). Points are means with 95% t intervals over seeds on both axes. "
           "Produced by `interplab run sae-pareto` (docs/sae.md, \"Matched L0 on toy-chat\" and, for SmolLM2, "
           "\"On a real model\").")
from interplab.experiments.sae_pareto import matched_l0, pareto_summary  # noqa: E402

pareto = saved_result("sae-pareto", "pareto", "sae_pareto_run", label="Saved sae-pareto run",
                      prefer_model=name)   # the SmolLM2 run first when SmolLM2 is the page's model
if pareto is not None:   # saved before runs checked themselves: sae-verdicts made its verdicts
    from interplab.app.widgets import later_verdicts

    later_verdicts("sae-verdicts", st.session_state.get("sae_pareto_run"),
                   key="sae_pareto_later_verdicts")
if pareto is not None:
    from interplab.figures.sae import METRIC_LABELS, pareto_figure

    p_summary, p_matched = pareto_summary(pareto.table), matched_l0(pareto.table)
    archs = list(dict.fromkeys(p_summary["architecture"]))
    p_arch = st.multiselect("Architectures", archs, default=archs, key="sae_pareto_arch")
    p_metric = st.selectbox("Metric against L0", ["log2_mse", "delta_ce_response", "explained_variance",
                                                  "ce_loss_score_response", "kl_sae_response", "delta_ce",
                                                  "log2_mse_special"],
                            format_func=lambda m: METRIC_LABELS.get(m, m), key="sae_pareto_metric")
    show_figure(pareto_figure(p_summary[p_summary["architecture"].isin(p_arch)], p_metric), key="sae_pareto_fig")
    st.markdown("**At matched L0** (TopK: the sweep points; Standard: interpolated in log L0 inside the range every "
                "seed's curve covers). `fast_minus_*`: FAST minus that arm, paired by SAE seed, 95% t interval.")
    cols = [c for c in p_matched.columns if c.split("_")[0] in ("eval", "architecture", "l0", "method", "n")
            or c.startswith(("log2_mse", "delta_ce_response", "fast_minus_log2_mse", "fast_minus_delta_ce"))]
    st.dataframe(p_matched[cols].round(4), hide_index=True, key="sae_pareto_matched")
    st.caption(f"{pareto.config.get('steps')} steps x {pareto.config.get('batch_tokens')} tokens per SAE, seeds "
               f"{pareto.config.get('seeds')}; MCC against known features needs ground truth: see the sequential "
               "synthetic benchmark's MCC vs L0 curve above.")
