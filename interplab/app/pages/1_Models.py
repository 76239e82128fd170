"""Models page: architecture, a prompt's top next tokens, and an attention pattern heatmap."""
from __future__ import annotations

import pandas as pd
import streamlit as st

st.set_page_config(page_title="interplab · Models", page_icon=":microscope:", layout="wide")

from interplab.app.compute import cached_compute  # noqa: E402
from interplab.app.runs_view import show_reopened_run  # noqa: E402
from interplab.app.widgets import page_model, show_figure  # noqa: E402
from interplab.core.errors import InterplabError  # noqa: E402
from interplab.interventions import Ablate  # noqa: E402
from interplab.models.lab_model import unknown_token_message  # noqa: E402
from interplab.probes.lenses import default_fact_pair  # noqa: E402
from interplab.probes.next_token import (model_summary, next_token_report, prompt_input, suggest_chat,  # noqa: E402
                                         suggest_prompt, token_steer)
from interplab.figures.arrays import token_label  # noqa: E402
from interplab.figures.models import attention_figure, top_tokens_figure  # noqa: E402

st.title("Models")
st.caption("Pick a zoo organism or a local checkpoint in the sidebar; run a prompt; read the next-token "
           "distribution and any head's attention pattern.")

show_reopened_run(("next-token",))    # a saved next-token run reopened from the Runs page
picked = page_model("models")
model = picked.load()


@cached_compute("Running the prompt...", max_entries=32)
def _report(model, *, prompt: str, layer: int, top_k: int, system: str = "", chat=None):
    return next_token_report(model, prompt, layer=layer, top_k=top_k, system=system, chat=chat)


@cached_compute("Running the prompt under the edit...", max_entries=32)
def _report_edited(model, edits, *, prompt: str, top_k: int, system: str = "", chat=None):
    # the key names the edits by their full description; the Edit objects themselves are not hashed
    return next_token_report(model, prompt, layer=0, top_k=top_k, edits=edits, system=system,
                             chat=chat)


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
    # a real base model opens on a fact whose next token is its answer (" Paris"); a bare fragment such as "the cat
    # sat on the" puts Gemma-3's <start_of_image> on top, as plain transformers does on the same weights
    # (docs/real_models.md, "Reading a base model")
    _pair = default_fact_pair(model)
    user_default = _pair.clean if _pair.answer else suggest_prompt(model)
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
    res = _report(model, key=picked.key, prompt=prompt, layer=int(layer), top_k=int(top_k),
                  system=system, chat=chat)
except InterplabError as exc:
    st.error(f"Cannot run this prompt: {exc}")
    st.stop()

st.markdown(f"**Tokens ({len(res.tokens)}):** " + " ".join(f"`{token_label(t)}`" for t in res.tokens))
left, right = st.columns([2, 3])
with left:
    st.markdown(f"**Top next tokens** — top token `{token_label(res.top.iloc[0]['token'])}`, "
                f"p = {res.top.iloc[0]['prob']:.4f}")
    st.dataframe(res.top.assign(prob=res.top["prob"].round(4), logit=res.top["logit"].round(3)),
                 hide_index=True, key="top_tokens_table")
with right:
    show_figure(top_tokens_figure(res.top), key="top_tokens")

st.subheader(f"Attention pattern · layer {int(layer)}, head {int(head)}")
show_figure(attention_figure(res.pattern[int(head)], res.tokens, layer=int(layer), head=int(head)),
            key="attention", filename=f"attention_L{int(layer)}H{int(head)}")

st.subheader("Intervene")
st.caption("The same prompt under one explicit edit, next to the clean run. Settings can come from the URL "
           "(`?edit=steer&token=make&layer=2&scale=40` or `?edit=ablate&layer=3&heads=0,1`), so a view can be shared.")
_q = st.query_params
_kinds = ["none", "steer", "ablate"]
e1, e2, e3, e4 = st.columns([1, 1, 2, 1])
with e1:
    edit_kind = st.selectbox("Edit", _kinds, index=_kinds.index(_q.get("edit", "none")) if _q.get("edit", "none")
                             in _kinds else 0, key="models_edit_kind")
with e2:
    edit_layer = st.number_input("Edit layer", min_value=0, max_value=model.n_layers - 1, step=1,
                                 value=min(int(_q.get("layer", 0) or 0), model.n_layers - 1), key="models_edit_layer")
edits, edit_label = [], "no edit"
try:
    if edit_kind == "steer":
        with e3:
            token = st.text_input("Steer toward token", value=_q.get("token", res.top["token"].iloc[-1]),
                                  key="models_edit_token")
        with e4:
            scale = st.number_input("Scale", value=float(_q.get("scale", 8.0)), key="models_edit_scale")
        edits = [token_steer(model, token, int(edit_layer), float(scale))]
        edit_label = f"steer toward {token!r} at resid_post.{int(edit_layer)}, scale {scale:g}"
    elif edit_kind == "ablate":
        with e3:
            heads_txt = st.text_input("Heads to zero (comma-separated)", value=_q.get("heads", "0"),
                                      key="models_edit_heads")
        heads = [int(h) for h in heads_txt.split(",") if h.strip()]
        edits = [Ablate(f"attn_z.{int(edit_layer)}", heads=heads)]
        edit_label = f"zero heads {heads} at attn_z.{int(edit_layer)}"
    if edits:
        edited = _report_edited(model, edits, key=(picked.key, edit_label), prompt=prompt,
                                top_k=int(top_k), system=system, chat=chat)
except (InterplabError, ValueError) as exc:
    st.error(f"Cannot apply this edit: {exc}")
    st.stop()
if edits:
    top1 = edited.top.iloc[0]
    st.markdown(f"**Top next tokens under the edit** ({edit_label}) — top token `{token_label(top1['token'])}`, "
                f"p = {top1['prob']:.4f}")
    st.dataframe(edited.top.assign(prob=edited.top["prob"].round(4), logit=edited.top["logit"].round(3)),
                 hide_index=True, key="edited_tokens_table")
