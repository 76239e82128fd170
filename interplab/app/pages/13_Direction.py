"""Direction page: a dashboard for any vector at a residual site — top-activating contexts, activation histogram,
direct logit effects, cosine neighbours and a steering preview (interplab.probes.lenses.direction_dashboard)."""
from __future__ import annotations

import io

import numpy as np
import streamlit as st

st.set_page_config(page_title="interplab · Direction", page_icon=":microscope:", layout="wide")

from interplab.app import state  # noqa: E402
from interplab.app.widgets import model_picker, picked_device_dtype, require_model, show_figure  # noqa: E402
from interplab.core.errors import InterplabError  # noqa: E402
from interplab.figures.lenses import direction_histogram, logit_effects_figure  # noqa: E402
from interplab.probes.lenses import default_pair, direction_dashboard  # noqa: E402

st.title("Direction")
st.caption("Any direction in the residual stream — an SAE decoder row, a probe weight, a subspace basis vector, a "
           "steering vector, an uploaded array: where it fires, what it writes to the logits, what it is close to, "
           "and what adding it does.")

name, backend = model_picker("model")
device, dtype = picked_device_dtype("model")
model = require_model(name, backend, device, dtype)
model_key = (state.normalize_name(name), backend, device, dtype)
if st.session_state.get("dir_model_key") != model_key:
    st.session_state["dir_model_key"] = model_key
    st.session_state.pop("dir_result", None)

c1, c2, c3 = st.columns([2, 2, 3])
with c1:
    site = st.selectbox("Site", [f"resid_post.{i}" for i in range(model.n_layers)], index=model.n_layers - 1,
                        key="dir_site")
with c2:
    source = st.selectbox("Direction", ["unembedding of a token", "upload .npy"], key="dir_source")
with c3:
    W_U, _ = model.unembedding()
    if source == "upload .npy":
        up = st.file_uploader(f"A [{model.d_model}] float array (.npy)", type=["npy"], key="dir_upload")
        vec = np.load(io.BytesIO(up.getvalue())) if up is not None else None
    else:
        answer = model.generate([default_pair(model)[0]], max_new_tokens=1).new_tokens[0][0]
        tok = st.text_input("Token", value=model.tokenizer.decode([answer]).strip(), key="dir_token")
        ids = model.tokenizer(tok, add_special_tokens=False)["input_ids"] if tok else []
        vec = W_U[:, ids[0]].numpy() if len(ids) == 1 else None
steer_prompt = st.text_input("Steering prompt", value=default_pair(model)[1], key="dir_steer_prompt")
scales = st.multiselect("Steering scales", [0.0, 2.0, 4.0, 8.0, 16.0], default=[0.0, 4.0, 8.0], key="dir_scales")

if st.button("Build dashboard", key="dir_go", type="primary", disabled=vec is None):
    prompts = [default_pair(model, seed=s)[0] for s in range(16)]
    others = {f"unembed {model.tokenizer.decode([t]).strip()}": W_U[:, t].numpy()
              for t in range(min(model.d_vocab, 64))}
    try:
        with st.spinner("Reading the direction..."):
            st.session_state["dir_result"] = direction_dashboard(model, vec, site, prompts, others=others,
                                                                 steer_prompt=steer_prompt, steer_scales=scales)
    except InterplabError as exc:
        st.error(f"Cannot build the dashboard: {exc}")
if "dir_result" not in st.session_state:
    st.info("Pick a direction and press **Build dashboard**.")
    st.stop()
dash = st.session_state["dir_result"]
left, right = st.columns(2)
with left:
    show_figure(direction_histogram(dash), key="dir_hist")
    st.markdown("**Top-activating contexts**")
    st.dataframe(dash.top_contexts.round(4), hide_index=True, key="dir_top")
with right:
    show_figure(logit_effects_figure(dash), key="dir_logits")
    st.markdown("**Cosine neighbours** (unembedding directions of the first 64 tokens)")
    st.dataframe(dash.neighbours.head(10).round(4), hide_index=True, key="dir_neigh")
if dash.steering:
    st.markdown("**Steering preview**")
    st.code("\n".join(f"scale {k}: {v}" for k, v in dash.steering.items()), language=None)
