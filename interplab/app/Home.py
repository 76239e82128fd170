"""interplab dashboard: home page (served by `interplab app`)."""
from __future__ import annotations

import streamlit as st

st.set_page_config(page_title="interplab", page_icon=":microscope:", layout="wide")

from interplab.app import state  # noqa: E402
from interplab.app.widgets import model_picker  # noqa: E402

PAGES = [
    ("Models",
     "Pick a zoo organism or a local Hugging Face checkpoint, see its architecture (layers, query and key/value "
     "heads, widths, vocabulary, context, parameters), run a prompt, and read the top next tokens and the "
     "attention pattern of any layer and head."),
    ("Truth Scores",
     "Per-head probes of context truthfulness: one logistic probe per (layer, head) trained in a single batched "
     "fit, the resulting score map, how the scores carry over between related models (inheritance across a "
     "lineage), and soft gating of the truthful heads during generation."),
    ("DecodeShare",
     "The task-shared subspace of decode-time (KV-cached) states: estimate it across tasks, project it out only "
     "while decoding, and compare against prefill-only and random-subspace controls; overlap with steering "
     "directions."),
    ("CRH",
     "Concept cylinders: the central axis, normal plane and sensitive sectors of concept difference vectors, "
     "and what a cylinder penalty or sector steering does to the model's output."),
    ("PCFG",
     "Exact next-token distributions of a probabilistic context-free grammar (inside and prefix probabilities) "
     "next to the model's, and layer-wise probes that read parse quantities out of the residual stream."),
    ("Layer Geometry",
     "Per-layer participation ratio of the residual stream (does the last layer expand?), an entropy-matched "
     "temperature control, rank reordering, and late-stage LoRA fine-tuning of the final layers."),
    ("SAE Training",
     "Train sparse autoencoders on a layer's activations with SAELens, per-sample (finetuning-aligned) versus "
     "block-wise, with gradient signal-to-noise and reconstruction / sparsity evaluations."),
    ("Feature Browser",
     "Browse a trained SAE's features: top-activating contexts, activation histograms, the tokens each feature "
     "promotes, and steering the model with a feature."),
    ("Runs",
     "Every saved run: its experiment, config, date, interplab version and figures, reopenable in its method "
     "page; `interplab runs list|show|rm|clean` from the command line. Pages also offer the runs interplab ships "
     "under results/ (marked 'shipped')."),
    ("Patching",
     "Activation patching between a clean and a corrupted prompt over layer x position and layer x head grids, "
     "attribution patching (gradient and integrated gradients) on the same grid, and the patched generation of "
     "any cell you click."),
    ("Logit Lens",
     "Every layer's residual stream read through the final norm and unembedding (and a trained tuned lens), "
     "with direct logit attribution per head and MLP."),
    ("Attention",
     "Every query head's attention pattern of a layer, with token hover and grouped-query (KV) groups shown."),
    ("Direction",
     "A dashboard for any direction (a token's unembedding, an SAE feature, a decode-shared basis vector, a CRH "
     "axis, a head's Truth-Score probe, an uploaded vector): where it fires, what it writes to the logits, its nearest neighbours among every "
     "direction computed for the model, and what adding it does."),
    ("Atlas",
     "One model, every method on shared axes: Truth Scores, per-head patching and direct logit attribution on "
     "layer x head, the participation ratio next to where patching matters, SAE features against the "
     "decode-shared subspace and CRH axes, and how much the methods agree; on the validation organisms, whether "
     "it finds the planted mechanism."),
]

st.title("interplab")
st.markdown(
    "**A mechanistic-interpretability workbench.** One hook layer over TransformerLens's TransformerBridge and "
    "nnsight carries six published methods and the interventions that go with them. Every model is an ordinary "
    "Hugging Face checkpoint: interplab's own small *model organisms* run offline, and the same pages work on "
    "GPT-2, Qwen or Llama checkpoints on your own machine. Everything on these pages can also be scripted "
    "(`import interplab`) or run from the command line (`interplab run NAME`), and every figure exports to "
    "HTML, PNG, SVG or PDF."
)

st.header("Pages")
for title, text in PAGES:
    st.markdown(f"**{title}.** {text}")

name, backend = model_picker("model")

st.header("Current model")
model, err = state.try_get_model(name, backend=backend)
if model is None:
    st.warning(f"**Model `{name}` is not available.** {err}")
    st.markdown(state.model_help(name))
else:
    st.success(f"`{name}` is loaded on the **{backend}** backend: {model.n_layers} layers, {model.n_heads} query "
               f"heads ({model.n_kv_heads} key/value), d_model {model.d_model}, vocabulary {model.d_vocab}. "
               "Open **Models** in the sidebar to run a prompt.")
st.caption("Models are cached (at most two at a time) by name, backend, device and dtype. "
           "The server listens on 127.0.0.1 unless started with `interplab app --address`.")
