"""Hyperfitting page: hyperfitting as late-stage geometric expansion of the layers.

Two models (a base and a hyperfitted / LoRA descendant) on identical held-out text: participation ratio by layer with
DeltaDim, cosine/L2 by layer, the results table, the base-rank histogram of the target's greedy tokens, the
entropy-matched temperature control, and generations side by side with repetition highlighted. The
sections live in interplab.app.views.hyperfit."""
from __future__ import annotations

import streamlit as st

st.set_page_config(page_title="interplab · Hyperfitting", page_icon=":microscope:", layout="wide")

from interplab.app.data_box import your_data  # noqa: E402
from interplab.app.model_jobs import loaded_model_job, model_settings  # noqa: E402
from interplab.app.views import hyperfit as V  # noqa: E402
from interplab.app.widgets import page_model  # noqa: E402
from interplab.core.errors import InterplabError  # noqa: E402

st.title("Hyperfitting: layer geometry")
st.caption("Hyperfitting (training to near-zero loss on a few sequences) makes greedy text less repetitive. Is it just "
           "a sharper distribution (temperature), a static vocabulary reweighting, or a late-layer geometric "
           "expansion? Compare a base model with its hyperfitted descendant on identical held-out text.")

# A: the sidebar's model (its backend, device, dtype); B: a hyperfitted descendant, loaded as A is
picked = page_model("geo", picker="geo_a", page="hyperfit", suggested="text-base",
                    fits=lambda n: n.startswith("text-"))
name_a = picked.name
name_b = V.pick_target(name_a)
your_data("hyperfit", key="geo_data",
          overrides={"base": name_a, "targets": name_b or "", "n_prompts": 0})

with st.expander("Hyperfitting controls (saved run): is the PR growth specific to hyperfitting?"):
    st.caption("Hyperfitting vs ordinary fine-tuning (same steps, early stopping on held-out windows) vs hyperfitting "
               "on token-shuffled windows: ΔDim per layer and the weight change ‖ΔW‖ against the base, mean and 95% t "
               "interval over seeds (`interplab run hyperfit-controls`; docs/hyperfit.md).")
    V.saved_controls(name_a)

with st.expander("Saved runs (e.g. SmolLM2-135M-Instruct): the paper's table and the LoRA k sweep"):
    st.caption("Runs of `hyperfit-eval` and `hyperfit-ksweep` (ΔDim per layer is in the controls "
               "box above), including the committed SmolLM2-135M-Instruct runs (Late-Stage LoRA on "
               "its last 5 of 30 blocks; docs/hyperfit.md \"On a real model\"). A hyperfitted 135M "
               "checkpoint is 0.5 GB, so the real model's targets are not shipped; `interplab run "
               "hyperfit-train --set base=real:smollm2-135m-instruct` makes one.")
    V.saved_tables(name_a)

bud = V.budget()
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
    V.geometry_job(picked, model_a, name_b)

target = picked.like(name_b)
model_b = target.load()
if (model_a.n_layers, model_a.d_model, model_a.d_vocab) != (model_b.n_layers, model_b.d_model, model_b.d_vocab):
    st.error(f"The two models must share n_layers, d_model and vocabulary: {model_a} vs {model_b}.")
    st.stop()
texts = V.texts(custom_text=bud.custom, n=bud.n_texts)
if not texts:
    st.info("No texts: type some custom text or clear the box to use the held-out corpus.")
    st.stop()
key = (picked.key, target.key)
try:
    geo = V.geometry(model_a, model_b, key=key, texts=texts, max_tokens=bud.max_tokens,
                     exclude_bos=bud.exclude_bos)
except InterplabError as exc:
    st.error(f"Cannot measure geometry: {exc}")
    st.stop()
V.headline(geo, model_a.n_layers, bud.exclude_bos)

st.subheader("Participation ratio by layer")
V.layer_views(geo)

# Everything below generates text with both models (tens of seconds cold on 2 CPU cores): it runs on
# request, so the page's first open shows the geometry within seconds.
if not (st.button("Compute rank reordering, temperature control and generations", key="geo_more", type="primary")
        or st.session_state.get("geo_more_done")):
    st.info("Rank reordering, the entropy-matched temperature control and the side-by-side "
            f"generations decode {bud.n_prompts} prompts × {bud.new_tokens} tokens with both "
            "models: press the button above.")
    st.stop()
st.session_state["geo_more_done"] = True

st.subheader("Rank reordering")
V.rank_reordering(model_a, model_b, key, texts, bud)
st.subheader("Temperature control")
T, seed = V.temperature(model_a, model_b, key, texts, bud)
V.side_by_side(model_a, model_b, key, texts, bud, T, seed)
