"""Hyperfitting page: hyperfitting as late-stage geometric expansion of the layers.

Two models (a base and a hyperfitted / LoRA descendant) on identical held-out text: participation ratio by layer with
DeltaDim, cosine/L2 by layer, the results table, the base-rank histogram of the target's greedy tokens, the
entropy-matched temperature control, and generations side by side with repetition highlighted."""
from __future__ import annotations

from pathlib import Path

import streamlit as st

st.set_page_config(page_title="interplab · Hyperfitting", page_icon=":microscope:", layout="wide")

from interplab.app import state  # noqa: E402
from interplab.app.model_jobs import loaded_model_job, model_settings, runs_of  # noqa: E402
from interplab.app.widgets import page_model, require_model, show_figure  # noqa: E402
from interplab.core.errors import InterplabError  # noqa: E402

st.title("Hyperfitting: layer geometry")
st.caption("Hyperfitting (training to near-zero loss on a few sequences) makes greedy text less repetitive. Is it just "
           "a sharper distribution (temperature), a static vocabulary reweighting, or a late-layer geometric "
           "expansion? Compare a base model with its hyperfitted descendant on identical held-out text.")


# A: the sidebar's model (its backend, device, dtype); B: a hyperfitted descendant of it
picked = page_model("geo", picker="geo_a", page="hyperfit", suggested="text-base",
                    fits=lambda n: n.startswith("text-"))
name_a = picked.name
# targets: the zoo's hyperfitted organisms of text-base, the checkpoints of your hyperfit-train runs of this model
targets = (["zoo:text-hyperfit", "zoo:text-late-lora", "zoo:text-full-lora"] if name_a == "zoo:text-base" else []) \
    + [f"{p}/checkpoint" for p in runs_of("hyperfit-train", name_a) if Path(p, "checkpoint").is_dir()]
with st.sidebar:
    st.subheader("Target (B)")
    pick_b = st.selectbox("Hyperfitted descendant", targets, key="geo_b_pick") if targets else None
    path_b = st.text_input("Target (B): local checkpoint (overrides)", value="", key="geo_b_path",
                           placeholder="/path/to/hf-checkpoint-dir")
name_b = path_b.strip() or pick_b

with st.expander("Your data (CSV / JSONL / Parquet file)"):
    from interplab.app.data_box import data_box, run_with_data  # noqa: E402

    run_with_data("hyperfit", data_box("hyperfit", key="geo_data"), key="geo_data",
                  overrides={"base": name_a, "targets": name_b or "", "n_prompts": 0})

with st.expander("Hyperfitting controls (saved run): is the PR growth specific to hyperfitting?"):
    st.caption("Hyperfitting vs ordinary fine-tuning (same steps, early stopping on held-out windows) vs hyperfitting "
               "on token-shuffled windows: ΔDim per layer and the weight change ‖ΔW‖ against the base, mean and 95% t "
               "interval over seeds (`interplab run hyperfit-controls`; docs/hyperfit.md).")
    from interplab.app.widgets import saved_result  # noqa: E402

    controls = saved_result("hyperfit-controls", "controls", key="geo_controls_run", loaded=name_a)
    if controls is not None:
        from interplab.figures.geometry import delta_dim_by_arm_figure, weight_change_figure  # noqa: E402

        summary = controls.summary
        geo = controls.geometry
        if not (summary["quantity"] == "delta_pr_std").any() and "pr_std_b" in geo.columns:
            # a run saved before the summary had standardised rows: rebuild the intervals from its
            # geometry
            from interplab.probes.hyperfit import summarize_controls  # noqa: E402

            g = geo.assign(delta_pr_std=geo["pr_std_b"] - geo["pr_std_a"])
            summary = summarize_controls(g, controls.weights, controls.runs)
        left, right = st.columns(2)
        with left:
            show_figure(delta_dim_by_arm_figure(summary), key="geo_controls_ddim")
        with right:
            show_figure(weight_change_figure(controls.summary), key="geo_controls_dw")
        cols = [c for c in ("arm", "seed", "steps", "epochs", "final_train_loss", "converged", "heldout_loss",
                            "stop_step", "best_step", "dW_total") if c in controls.runs.columns]
        st.dataframe(controls.runs[cols].round(4), hide_index=True, key="geo_controls_runs")

with st.expander("Saved runs (e.g. SmolLM2-135M-Instruct): the paper's table and the LoRA k sweep"):
    st.caption("Runs of `hyperfit-eval` and `hyperfit-ksweep` (ΔDim per layer is in the controls box above), including the committed "
               "SmolLM2-135M-Instruct runs (Late-Stage LoRA on its last 5 of 30 blocks; docs/hyperfit.md \"On a real "
               "model\"). A hyperfitted 135M checkpoint is 0.5 GB, so the real model's targets are not shipped; "
               "`interplab run hyperfit-train --set base=real:smollm2-135m-instruct` makes one.")
    from interplab.app.widgets import saved_result  # noqa: E402
    from interplab.figures.geometry import diversity_bars_figure as _bars, k_sweep_figure  # noqa: E402

    ev = saved_result("hyperfit-eval", "eval", key="geo_saved_eval", label="Saved table", loaded=name_a)
    if ev is not None:
        show_figure(_bars(ev.table, metrics=("ttr", "rep2", "rep3", "diversity", "gen_top1")), key="geo_saved_bars")
        cols = [c for c in ("setting", "kind", "ttr", "ttr_lo", "ttr_hi", "rep2", "rep3", "diversity",
                            "top1_agreement", "gen_top1", "entropy", "changed_share", "nll")
                if c in ev.table.columns]  # changed_share: did the arm change the replies at all
        st.dataframe(ev.table[cols].round(4), hide_index=True, key="geo_saved_table")
    st.caption("Terminal Expansion verdicts of a saved `hyperfit-geometry` run (headline: "
               "standardised PR with position 0 excluded; raw PR beside it):")
    saved_result("hyperfit-geometry", "validity", key="geo_saved_geo", label="Saved geometry run",
                 loaded=name_a)
    ks = saved_result("hyperfit-ksweep", "k_sweep", key="geo_saved_ks", label="Saved k sweep", loaded=name_a)
    if ks is not None:
        show_figure(k_sweep_figure(ks.frame), key="geo_saved_ksfig")

with st.sidebar.expander("Data and budget"):
    n_texts = st.number_input("held-out texts", 4, 400, 24, step=4, key="geo_ntexts")
    max_tokens = st.number_input("tokens per text", 16, 1024, 128, step=16, key="geo_maxtok")
    exclude_bos = st.checkbox("exclude BOS / first position", value=True, key="geo_nobos")
    n_prompts = st.number_input("prompts for generations and ranks", 2, 200, 12, step=2, key="geo_nprompts")
    new_tokens = st.number_input("generated tokens", 8, 256, 64, step=8, key="geo_newtok")
    context = st.number_input("prompt context tokens", 4, 128, 32, step=4, key="geo_ctx")
    custom = st.text_area("custom texts (one per paragraph; blank = held-out corpus)", value="", key="geo_custom")

model_a = picked.load()
with st.expander("Hyperfit the loaded model (`hyperfit-train`): makes a target B", expanded=name_b is None):
    loaded_model_job("hyperfit-train", "hyperfit", "geo_train", picked=picked, model=model_a,
                     settings=model_settings("hyperfit-train", picked, "base"), label="Hyperfit the loaded model",
                     saved_label="Saved hyperfit-train run")

if name_b is None:
    st.info(f"No hyperfitted descendant of `{name_a}` yet: hyperfit it above (a job), or give a checkpoint in the "
            "sidebar.")
    st.stop()

with st.expander("The documented geometry run (`hyperfit-geometry`) of A against B, as a job"):
    import re  # noqa: E402

    from interplab.figures.geometry import pr_by_layer_figure  # noqa: E402

    # the result's name, as hyperfit-geometry writes it: geometry_<the target folder's name, filename-safe>
    tag = re.sub(r"[^A-Za-z0-9._+=-]+", "_", name_b.rstrip("/").rsplit("/", 1)[-1].replace("zoo:", ""))
    full, _, _ = loaded_model_job("hyperfit-geometry", f"geometry_{tag.lstrip('.-') or 'target'}", "geo_job",
                                  picked=picked,
                                  model=model_a, label="Run hyperfit-geometry", saved_label="Saved geometry run",
                                  settings=model_settings("hyperfit-geometry", picked, "base", targets=name_b))
    if full is not None:
        show_figure(pr_by_layer_figure(full, name_a="A", name_b="B"), key="geo_job_pr")

model_b = require_model(name_b, picked.backend, picked.device, picked.dtype, key=picked.picker)   # as A is
if (model_a.n_layers, model_a.d_model, model_a.d_vocab) != (model_b.n_layers, model_b.d_model, model_b.d_vocab):
    st.error(f"The two models must share n_layers, d_model and vocabulary: {model_a} vs {model_b}.")
    st.stop()


@st.cache_data(max_entries=4, show_spinner=False)
def _texts(custom_text: str, n: int) -> list[str]:
    if custom_text.strip():
        return [p.strip() for p in custom_text.split("\n\n") if p.strip()][:n]
    from interplab.probes.hyperfit import heldout_texts

    return heldout_texts(n)


texts = _texts(custom, int(n_texts))
if not texts:
    st.info("No texts: type some custom text or clear the box to use the held-out corpus.")
    st.stop()
key = (picked.key, state.normalize_name(name_b))


@st.cache_data(max_entries=8, show_spinner="Measuring layer geometry...")
def _geometry(k, texts, max_tokens, exclude_bos, _a=None, _b=None):
    from interplab.probes.hyperfit import compute_layer_geometry

    return compute_layer_geometry(_a, _b, texts, exclude_bos=exclude_bos, max_tokens=max_tokens)


@st.cache_data(max_entries=8, show_spinner="Rank reordering along the target's greedy generations...")
def _ranks(k, texts, n_prompts, new_tokens, context, max_tokens, _a=None, _b=None):
    from interplab.probes.hyperfit import rank_reordering

    return rank_reordering(_a, _b, texts[:n_prompts], texts=texts, context_tokens=context,
                           max_new_tokens=new_tokens, max_tokens=max_tokens)


@st.cache_data(max_entries=8, show_spinner="Entropy-matched temperature...")
def _match(k, texts, max_tokens, _a=None, _b=None):
    from interplab.probes.hyperfit import match_temperature

    return match_temperature(_a, _b, texts, max_tokens=max_tokens)


@st.cache_data(max_entries=8, show_spinner="Generating...")
def _generations(k, texts, n_prompts, new_tokens, context, T, seed, _a=None, _b=None):
    from interplab.probes.hyperfit import base_ranks_of, context_prompts, generate_continuations

    prompts = context_prompts(_a, texts, context)[:n_prompts]
    out = {}
    for label, m, greedy in (("base greedy", _a, True), (f"base sampled T={T:.3f}", _a, False),
                             ("target greedy", _b, True)):
        g, t = generate_continuations(m, prompts, max_new_tokens=new_tokens, greedy=greedy, temperature=T,
                                      seed=seed)
        out[label] = (g, t, base_ranks_of(_a, prompts, g))
    return prompts, out


try:
    geo = _geometry(key, texts, int(max_tokens), bool(exclude_bos), _a=model_a, _b=model_b)
except InterplabError as exc:
    st.error(f"Cannot measure geometry: {exc}")
    st.stop()

from interplab.figures.geometry import (cos_l2_figure, diversity_bars_figure, eigen_spectrum_figure,  # noqa: E402
                                        entropy_temperature_figure, pr_by_layer_figure, rank_histogram_figure,
                                        repetition_html)

df = geo.to_frame()
last = model_a.n_layers - 1
rp = df[(df["site"] == "resid_post") & (df["layer"] == last)]
fn = df[df["site"] == "final_norm"]


def _d(rows, col: str) -> str:
    return f"{float(rows[col].iloc[0]):+.2f}" if len(rows) else "n/a"


# the headline is the standardised PR (interplab.probes.hyperfit.HEADLINE_ESTIMATOR;
# docs/hyperfit.md): a few massive coordinates set the raw PR of a real model's last block, so the
# raw value is shown beside it, not instead
c1, c2, c3, c4 = st.columns(4)
c1.metric("ΔDim, last block", _d(rp, "delta_pr_std"),
          help="standardised PR, position 0 excluded: the headline estimator")
c2.metric("raw PR ΔDim", _d(rp, "delta_pr"), help="the paper's estimator, last block")
c3.metric("ΔDim, final norm", _d(fn, "delta_pr_std"), help=f"standardised; raw {_d(fn, 'delta_pr')}")
c4.metric("tokens measured", f"{int(df['n_tokens'].iloc[0]):,}")
from interplab.probes.hyperfit.verdicts import MAX_COORDINATE_CHANGE  # noqa: E402

for col, what in (("pr_loo", "raw PR"), ("pr_std_loo", "standardised PR")):
    for side, name in (("a", "A"), ("b", "B")):
        moved = float(rp[f"{col}_{side}"].iloc[0]) if len(rp) else 0.0
        if moved > MAX_COORDINATE_CHANGE:
            st.warning(f"Model {name}'s {what} at the last block moves by {moved:.0%} when "
                       f"coordinate {int(rp[f'{col}_dim_{side}'].iloc[0])} is dropped (more than "
                       f"{MAX_COORDINATE_CHANGE:.0%}): one massive coordinate sets it, so its ΔDim "
                       "is not a dimension change (validity check outlier_dominance).")
if not exclude_bos:
    st.warning("Position 0 is included: on real models it carries a massive activation that "
               "dominates the covariance (even the standardised PR); the headline excludes it.")

st.subheader("Participation ratio by layer")
left, right = st.columns(2)
with left:
    show_figure(pr_by_layer_figure(geo, name_a="A", name_b="B"), key="geo_pr")
with right:
    show_figure(cos_l2_figure(geo), key="geo_cosl2")
with st.expander("Results table and last-layer eigen-spectrum", expanded=True):
    st.dataframe(df.round(4), hide_index=True, key="geo_table")
    show_figure(eigen_spectrum_figure(geo, name_a="A", name_b="B"), key="geo_spectrum")

# Everything below generates text with both models (tens of seconds cold on 2 CPU cores): it runs on
# request, so the page's first open shows the geometry within seconds.
if not (st.button("Compute rank reordering, temperature control and generations", key="geo_more", type="primary")
        or st.session_state.get("geo_more_done")):
    st.info("Rank reordering, the entropy-matched temperature control and the side-by-side generations decode "
            f"{int(n_prompts)} prompts × {int(new_tokens)} tokens with both models: press the button above.")
    st.stop()
st.session_state["geo_more_done"] = True

st.subheader("Rank reordering")
try:
    rr = _ranks(key, texts, int(n_prompts), int(new_tokens), int(context), int(max_tokens), _a=model_a, _b=model_b)
except InterplabError as exc:
    st.error(f"Cannot compute rank reordering: {exc}")
    st.stop()
left, right = st.columns([3, 2])
with left:
    show_figure(rank_histogram_figure(rr), key="geo_ranks")
with right:
    st.dataframe(rr.to_frame().assign(value=lambda d: d["value"].astype(float).round(4)), hide_index=True,
                 key="geo_rank_summary")

st.subheader("Temperature control")
match = _match(key, texts, int(max_tokens), _a=model_a, _b=model_b)
left, right = st.columns([3, 2])
with left:
    show_figure(entropy_temperature_figure(match), key="geo_temperature")
with right:
    st.markdown(f"Entropy-matched temperature **T\\* = {match.T:.3f}**: the base model's mean teacher-forced "
                f"entropy at T\\* equals the target's ({match.target_entropy:.3f} nats; base at T=1: "
                f"{match.base_entropy:.3f}). Temperature never changes the argmax, so greedy decoding is identical "
                "at every T; the control samples at T\\*.")
    T = st.slider("sampling temperature for the base", 0.05, 2.0, float(min(max(match.T, 0.05), 2.0)), 0.01,
                  key="geo_T")
    seed = st.number_input("seed", 0, 10_000, 0, key="geo_seed")

prompts, gens = _generations(key, texts, int(n_prompts), int(new_tokens), int(context), float(T), int(seed),
                             _a=model_a, _b=model_b)
from interplab.probes.hyperfit import metrics_table  # noqa: E402

table = metrics_table({k: (g, t) for k, (g, t, _) in gens.items()})
table["gen_top1"] = [float((r == 1).mean()) for (_, _, r) in gens.values()]
show_figure(diversity_bars_figure(table, metrics=("ttr", "rep2", "rep3", "diversity", "gen_top1")),
            key="geo_diversity")
st.dataframe(table.round(4), hide_index=True, key="geo_gen_table")

st.subheader("Generations side by side")
i = st.number_input("prompt", 0, len(prompts) - 1, 0, key="geo_prompt_idx")
tok = model_a.tokenizer
st.markdown("**Prompt:** " + tok.decode(prompts[int(i)], skip_special_tokens=True))
st.caption("Red background: the token completes a 3-gram already seen in this generation. Bold blue / purple: the "
           "base model ranks this token 2-10 / >10 given the same prefix (hover for the rank).")
cols = st.columns(len(gens))
for col, (label, (g, _, r)) in zip(cols, gens.items()):
    with col:
        st.markdown(f"**{label}**")
        units = [tok.convert_tokens_to_string([tok.convert_ids_to_tokens(t)]) for t in g[int(i)]]
        st.markdown(repetition_html(units, 3, ranks=r[int(i)].tolist()), unsafe_allow_html=True)
