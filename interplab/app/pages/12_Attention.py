"""Attention page: every query head's pattern of a layer, with token hover and KV groups (GQA) shown
(interplab.probes.lenses.attention_patterns; docs/lenses.md)."""
from __future__ import annotations

import streamlit as st

st.set_page_config(page_title="interplab · Attention", page_icon=":microscope:", layout="wide")

from interplab.app.widgets import page_model, show_figure  # noqa: E402
from interplab.core.errors import InterplabError  # noqa: E402
from interplab.figures.lenses import attention_heads_figure  # noqa: E402
from interplab.probes.lenses import attention_patterns, default_pair  # noqa: E402

st.title("Attention")
st.caption("Per-head attention patterns. Under grouped-query attention, heads of one KV group share keys and "
           "values, so their patterns differ only through their queries.")

picked = page_model("att")
model, model_key, is_new = picked.load(), picked.key, picked.is_new
if is_new:
    st.session_state["att_prompt"] = default_pair(model)[0]
    st.session_state["att_layer"] = model.n_layers - 1

c1, c2, c3 = st.columns([4, 1, 2])
with c1:
    prompt = st.text_area("Prompt", key="att_prompt", height=80)
with c2:
    layer = st.number_input("Layer", 0, model.n_layers - 1, step=1, key="att_layer")
with c3:
    heads = st.multiselect("Heads (empty = all)", list(range(model.n_heads)), key="att_heads")
if not prompt.strip():
    st.info("Type a prompt.")
    st.stop()
try:
    att = attention_patterns(model, prompt, int(layer))
except InterplabError as exc:
    st.error(f"Cannot read attention: {exc}")
    st.stop()
st.markdown(f"{model.n_heads} query heads, {model.n_kv_heads} KV groups: " +
            " · ".join(f"group {g}: heads {[h for h in range(model.n_heads) if att.kv_group[h] == g]}"
                       for g in sorted(set(att.kv_group.tolist()))))
show_figure(attention_heads_figure(att.patterns, att.tokens, n_kv_heads=att.n_kv_heads, layer=int(layer),
                                   heads=heads or None), key="att_fig", filename=f"attention_L{int(layer)}")
frame = att.to_frame()
last = frame[frame["query"] == len(att.tokens) - 1].sort_values("weight", ascending=False)
st.markdown("**Where the last token looks** (top keys per head)")
st.dataframe(last.groupby("head").head(3).round(4), hide_index=True, key="att_table")
