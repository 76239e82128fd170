"""Models page: architecture, a prompt's top next tokens, and an attention pattern heatmap."""
from __future__ import annotations

import pandas as pd
import streamlit as st

st.set_page_config(page_title="interplab · Models", page_icon=":microscope:", layout="wide")

from interplab.app import state  # noqa: E402
from interplab.app.runs_view import show_reopened_run  # noqa: E402
from interplab.app.widgets import model_picker, picked_device_dtype, require_model, show_figure  # noqa: E402
from interplab.core.errors import InterplabError  # noqa: E402
from interplab.experiments.models import (model_summary, next_token_report, prompt_input,  # noqa: E402
                                         suggest_chat, suggest_prompt)
from interplab.models.lab_model import unknown_token_message  # noqa: E402
from interplab.figures.models import attention_figure, top_tokens_figure  # noqa: E402

st.title("Models")
st.caption("Pick a zoo organism or a local checkpoint in the sidebar; run a prompt; read the next-token "
           "distribution and any head's attention pattern.")

show_reopened_run(("next-token",))    # a saved next-token run reopened from the Runs page
name, backend = model_picker("model")
device, dtype = picked_device_dtype("model")
model = require_model(name, backend, device, dtype)


@st.cache_data(max_entries=32, show_spinner="Running the prompt...")
def _report(key: tuple, prompt: str, layer: int, top_k: int, system: str = "", chat=None, _model=None):
    # `key` = (normalized name, backend, device, dtype) identifies the model; `_model` is not hashed.
    return next_token_report(_model, prompt, layer=layer, top_k=top_k, system=system, chat=chat)


summary = model_summary(model)
st.subheader("Architecture")
arch = pd.DataFrame([
    ("architecture", summary["architecture"]),
    ("n_layers", summary["n_layers"]),
    ("n_heads (query)", summary["n_heads"]),
    ("n_kv_heads", summary["n_kv_heads"]),
    ("d_model", summary["d_model"]),
    ("d_head", summary["d_head"]),
    ("vocab", summary["d_vocab"]),
    ("n_ctx", summary["n_ctx"]),
    ("params", f"{summary['n_params']:,}" if summary["n_params"] is not None else "?"),
    ("backend / device / dtype", f"{summary['backend']} / {summary['device']} / {summary['dtype']}"),
], columns=["property", "value"])
arch["value"] = arch["value"].astype(str)
st.dataframe(arch, hide_index=True, key="arch_table")

st.subheader("Run a prompt")
# Widget state lives in st.session_state (no `value=`), so switching to a smaller model can clamp it.
for _k, _hi, _default in (("models_layer", model.n_layers - 1, 0), ("models_head", model.n_heads - 1, 0),
                          ("models_topk", min(50, model.d_vocab), min(10, model.d_vocab))):
    st.session_state.setdefault(_k, _default)
    if st.session_state[_k] > _hi:
        st.session_state[_k] = _hi
# Chat models are prompted through their chat template (docs/hook_layer.md, "Prompts: text and chat").
system, chat = "", None
if model.chat_default:
    sys_default, user_default = suggest_chat(model)
    s1, s2 = st.columns([2, 3])
    form = s1.radio("Prompt form", ["chat template", "raw text (+ <bos>)"], horizontal=True, key="models_form",
                    help="Chat template: the turns below are rendered by the checkpoint's own template, as the "
                         "model was tuned. Raw text: the tokenizer's plain encoding, with its <bos>.")
    chat = None if form == "chat template" else False
    if chat is None:
        system = s2.text_input("System turn (the task instruction for the toy organisms)", value=sys_default,
                               key="models_system")
else:
    user_default = suggest_prompt(model)
c1, c2, c3, c4 = st.columns([4, 1, 1, 1])
with c1:
    prompt = st.text_input("Prompt" if not model.chat_default else "User turn", value=user_default,
                           key="models_prompt")
with c2:
    layer = st.number_input("Layer", min_value=0, max_value=model.n_layers - 1, step=1, key="models_layer")
with c3:
    head = st.number_input("Head", min_value=0, max_value=model.n_heads - 1, step=1, key="models_head")
with c4:
    top_k = st.number_input("Top k", min_value=1, max_value=min(50, model.d_vocab), step=1, key="models_topk")

if not prompt.strip():
    st.info("Type a prompt to see the model's next-token distribution.")
    st.stop()

try:
    unknown = model.unknown_tokens(prompt_input(model, prompt, system, chat), chat=chat)
    if unknown:
        st.warning(unknown_token_message(model.name, unknown))
    res = _report((state.normalize_name(name), backend, device, dtype), prompt, int(layer), int(top_k),
                  system, chat, _model=model)
except InterplabError as exc:
    st.error(f"Cannot run this prompt: {exc}")
    st.stop()

st.markdown(f"**Tokens ({len(res.tokens)}):** " + " ".join(f"`{t}`" for t in res.tokens))
left, right = st.columns([2, 3])
with left:
    st.markdown("**Top next tokens**")
    st.dataframe(res.top.assign(prob=res.top["prob"].round(4), logit=res.top["logit"].round(3)),
                 hide_index=True, key="top_tokens_table")
with right:
    show_figure(top_tokens_figure(res.top), key="top_tokens")

st.subheader(f"Attention pattern · layer {int(layer)}, head {int(head)}")
show_figure(attention_figure(res.pattern[int(head)], res.tokens, layer=int(layer), head=int(head)),
            key="attention", filename=f"attention_L{int(layer)}H{int(head)}")
