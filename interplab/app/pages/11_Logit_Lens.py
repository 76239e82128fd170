"""Logit Lens page: every layer's residual stream read through the final norm and unembedding (and a trained tuned
lens), plus direct logit attribution per head and MLP (interplab.probes.lenses; docs/lenses.md)."""
from __future__ import annotations

import streamlit as st

st.set_page_config(page_title="interplab · Logit Lens", page_icon=":microscope:", layout="wide")

from interplab.app.runs_view import show_reopened_run  # noqa: E402
from interplab.app.widgets import job_panel, page_model, show_figure  # noqa: E402
from interplab.core.errors import InterplabError  # noqa: E402
from interplab.figures.lenses import dla_figure, logit_lens_figure  # noqa: E402
from interplab.probes.lenses import default_pair, direct_logit_attribution, logit_lens  # noqa: E402

TUNED_PROMPTS = 16   # training prompts of the tuned lens (the model's default prompts, seeds 0..15)

st.title("Logit Lens")
st.caption("What would the model predict if it stopped after layer L? Each layer's resid_post goes through the "
           "model's own final norm and unembedding; the last layer is the model's output.")

picked = page_model("ll")
model, model_key, is_new = picked.load(), picked.key, picked.is_new
show_reopened_run(("logit-lens",))   # a saved logit-lens run reopened from the Runs page
if is_new:
    st.session_state["ll_prompt"] = default_pair(model)[0]
    for stale in ("dla_answer", "dla_wrong"):   # tokens of the previous model's vocabulary
        st.session_state.pop(stale, None)

c1, c2, c3, c4 = st.columns([4, 1, 1, 1])
with c1:
    prompt = st.text_area("Prompt", key="ll_prompt", height=80)
with c2:
    top_k = st.number_input("Top k", 1, min(20, model.d_vocab), 5, key="ll_topk")
with c3:
    target = st.text_input("Target token (optional)", key="ll_target")
with c4:
    value = st.selectbox("Colour", ["top1_prob", "kl"] + (["target_prob"] if target else []), key="ll_value")
if not prompt.strip():
    st.info("Type a prompt.")
    st.stop()

try:
    ll = logit_lens(model, prompt, top_k=int(top_k), target=target or None)
except InterplabError as exc:
    st.error(f"Cannot run the lens: {exc}")
    st.stop()
show_figure(logit_lens_figure(ll, value=value), key="ll_fig", filename="logit_lens")
frame = ll.to_frame()
last = frame[frame["position"] == ll.n_pos - 1].drop(columns=["lens", "position"])
st.dataframe(last.round(4), hide_index=True, key="ll_table")

st.subheader("Tuned lens")
st.caption("One affine translator per layer trained to match the final distribution on the model's default prompts "
           "(the `logit-lens` experiment with tuned_steps; on a real model a job of minutes, streamed one layer at a "
           "time so memory stays flat).")
steps = st.number_input("Training steps", 10, 2000, 100, step=10, key="ll_tuned_steps")
settings = dict(model=picked.name, backend=picked.backend, device=picked.device, dtype=picked.dtype, prompt=prompt,
                top_k=int(top_k), target=target, tuned_steps=int(steps), n_tuned_prompts=TUNED_PROMPTS)
tuned_run = job_panel("logit-lens", settings, "ll_tuned", model=model, model_key=model_key, label="Train tuned lens",
                      button_key="ll_tuned_go")
if tuned_run is not None:
    tl = logit_lens(model, prompt, top_k=int(top_k), target=target or None, tuned=tuned_run.result("tuned_lens"))
    show_figure(logit_lens_figure(tl, value=value), key="ll_tuned_fig", filename="tuned_lens")

st.subheader("Direct logit attribution")
top1 = ll.top_tokens[-1][-1][0]
c1, c2 = st.columns(2)
with c1:
    answer = st.text_input("Answer token", value=top1, key="dla_answer")
with c2:
    wrong = st.text_input("Minus token (optional)", value=target, key="dla_wrong")
try:
    d = direct_logit_attribution(model, prompt, answer, wrong or None)
    show_figure(dla_figure(d), key="dla_fig", filename="dla")
    st.caption(f"Contributions sum to {float(d.component_sum[0]):.5f}; the model's logit difference is "
               f"{float(d.total[0]):.5f} (final-norm scale frozen).")
except InterplabError as exc:
    st.error(f"Cannot attribute: {exc}")
