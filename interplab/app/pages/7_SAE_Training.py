"""SAE Training page: train FAST / BT(F) / BT(P) SAEs on SAELens, compare runs (metrics table, bar charts,
training curves, feature density) and their gradient signal-to-noise ratio. The sections live in
interplab.app.views.sae."""
from __future__ import annotations

import streamlit as st

st.set_page_config(page_title="interplab · SAE Training", page_icon=":microscope:", layout="wide")

from interplab.app.data_box import your_data  # noqa: E402
from interplab.app.views import sae as V  # noqa: E402
from interplab.app.widgets import page_model  # noqa: E402

st.title("SAE Training")
st.caption("Train sparse autoencoders with SAELens's trainer on FAST (one chat-templated dialogue per forward) or "
           "block-packed activations (BT(F) on the same dialogues, BT(P) on plain text), then compare them on held-out "
           "dialogues: log2 MSE (paper Eq. 7), MSE on special tokens, explained variance, L0, Delta Loss, CE score. "
           "Delta Loss / CE score / KL come twice: over every position and (`_response`) over the positions that "
           "predict assistant-answer tokens only, the tokens a chat model is trained on: on a chat organism the "
           "all-position numbers are dominated by prompt tokens it never learned to predict.")

picked = page_model("sae", page="sae", suggested="toy-chat", fits=lambda n: n.endswith("chat"))
your_data("sae", key="sae_data", overrides={"model": picked.name})
model = picked.load()
root = V.pick_root()

tab_train, tab_compare, tab_gsnr = st.tabs(["Train", "Compare runs", "GSNR"])
with tab_train:
    V.train(picked, model, root)
with tab_compare:
    V.compare(root, picked.name)
with tab_gsnr:
    st.markdown("Gradient signal-to-noise ratio of each run's final SAE, with mini-batches of the same size drawn "
                "from a chosen activation source (the same θ under different data isolates the data effect).")
    V.gsnr_tab(picked, model, root)

st.header("Ground truth: sequential synthetic benchmark")
st.caption("FAST vs BT(F) vs BT(P) SAEs trained on synthetic sequences whose features are known (special-token "
           "bos/eot, position, topic carried over when blocks are packed), all scored on the FAST distribution: MCC "
           "and the recovery (max |cos| of a decoder row) of each feature group; bars are means over SAE seeds with "
           "95% t intervals. Produced by `interplab run sae-synthetic` (model-free; docs/sae.md).")
V.synthetic_truth()

st.header("FAST vs block training at matched L0")
st.caption("Every arm (FAST, BT(F), BT(P)) trained at every point of a sparsity sweep (TopK k: L0 = k, so the arms "
           "are matched exactly; Standard SAE L1 coefficient: L0 is an outcome, so arms are compared by "
           "interpolating each seed's curve at common L0), several SAE seeds per point, each SAE evaluated on the "
           "FAST distribution (one held-out dialogue per forward) and on the packed distribution (the same "
           "dialogues packed into BT(F) blocks). Points are means with 95% t intervals over seeds on both axes. "
           "Produced by `interplab run sae-pareto` (docs/sae.md, \"Matched L0 on toy-chat\" and, for SmolLM2, "
           "\"On a real model\").")
V.matched_l0(picked.name)
