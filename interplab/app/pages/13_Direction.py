"""Direction page: a dashboard for any vector at a residual site — top-activating contexts, activation histogram,
direct logit effects, cosine neighbours and a steering preview (interplab.probes.lenses.direction_dashboard)."""
from __future__ import annotations

import io

import numpy as np
import streamlit as st

st.set_page_config(page_title="interplab · Direction", page_icon=":microscope:", layout="wide")

from interplab.app.compute import cached_compute  # noqa: E402
from interplab.app.widgets import page_model, show_figure  # noqa: E402
from interplab.core.errors import InterplabError  # noqa: E402
from interplab.figures.lenses import direction_histogram, logit_effects_figure  # noqa: E402
from interplab.probes.lenses import collect_directions, default_direction, direction_dashboard  # noqa: E402
from interplab.probes.lenses.common import fact_token_ids  # noqa: E402

st.title("Direction")
st.caption("Any direction in the residual stream — an SAE decoder row, a probe weight, a subspace basis vector, a "
           "steering vector, an uploaded array: where it fires, what it writes to the logits, what it is close to, "
           "and what adding it does.")

picked = page_model("dir")
model, model_key, is_new = picked.load(), picked.key, picked.is_new
if is_new:
    st.session_state.pop("dir_result", None)


@cached_compute("Collecting the directions computed for this model...")
def _registry(model, at, *, site: str):
    extra = {}
    if at is not None and at.model == model.name and at.site == site:   # the Atlas page's atlas
        extra = {f"{k}[{j}] (this session's atlas)": b[:, j] for k, b in at.directions.items() if k != "sae"
                 for j in range(b.shape[1])}
    # words' unembeddings (the default facts' countries and capitals): a real vocabulary's first ids are special and
    # byte tokens with near-identical unembeddings, which made every neighbour the same cosine
    return collect_directions(model, site, unembedding=fact_token_ids(model) or 64, extra=extra)


@cached_compute("Reading the model's default direction...")
def _defaults(model):
    return default_direction(model)


@cached_compute("Fitting the Truth-Score probe of that head...", max_entries=16)
def _truth_direction(model, *, layer: int, head: int):
    from interplab.probes.lenses.atlas_inputs import truth_items
    from interplab.probes.truth import truth_probe_directions

    res = truth_probe_directions(model, truth_items(model), [(layer, head)])
    return res.directions[0], float(res.accuracy[0])


c1, c2, c3 = st.columns([2, 2, 3])
with c1:
    site = st.selectbox("Site", [f"resid_post.{i}" for i in range(model.n_layers)], index=model.n_layers - 1,
                        key="dir_site")
at = st.session_state.get("at_result")
registry = _registry(model, at, key=(model_key, id(at), getattr(at, "site", "")), site=site)
defaults = _defaults(model, key=model_key)
collected = [n for n, src in zip(registry.names, registry.sources) if src != "unembedding"]
with c2:
    sources = ["unembedding of a token", "a collected direction", "Truth-Score probe of a head", "upload .npy"]
    source = st.selectbox("Direction", sources, key="dir_source",
                          help=f"{len(collected)} directions collected at this site: SAE decoder rows, saved atlas "
                               "and decodeshare runs, this session's atlas")
with c3:
    W_U, _ = model.unembedding()
    if source == "upload .npy":
        up = st.file_uploader(f"A [{model.d_model}] float array (.npy)", type=["npy"], key="dir_upload")
        vec = np.load(io.BytesIO(up.getvalue())) if up is not None else None
        vec_name = None
    elif source == "Truth-Score probe of a head":
        layer_now = int(site.split(".")[1])
        h1, h2 = st.columns(2)
        t_layer = int(h1.number_input("Layer", 0, layer_now, layer_now, key="dir_truth_layer",
                                      help="a head writes into the stream read at resid_post of its layer and later"))
        t_head = int(h2.number_input("Head", 0, model.n_heads - 1, 0, key="dir_truth_head"))
        try:
            vec, t_acc = _truth_direction(model, key=model_key, layer=t_layer, head=t_head)
            vec_name = None
            st.caption(f"probe weight w on L{t_layer}H{t_head}'s z, written through its W_O (w @ W_O); held-out "
                       f"accuracy (its Truth Score) {t_acc:.3f}")
        except InterplabError as exc:
            vec, vec_name = None, None
            st.info(f"No Truth-Score probe for this model: {exc}")
    elif source == "a collected direction":
        vec_name = st.selectbox("Collected direction", collected, key="dir_collected",
                                placeholder="none collected at this site") if collected else None
        vec = registry.vector(vec_name) if vec_name else None
        if not collected:
            st.caption("Nothing collected at this site yet: train an SAE, or run the atlas or decodeshare.")
    else:
        tok = st.text_input("Token", value=defaults.token, key="dir_token",
                            help="one token's text, leading space included (' Paris' is the word after a space)")
        try:
            tid = model.token_id(tok) if tok else None
        except InterplabError as exc:
            st.caption(str(exc))
            tid = None
        vec = W_U[:, tid].numpy() if tid is not None else None
        vec_name = None if tid is None else f"unembed {tid}:{model.tokenizer.decode([tid]).strip()}"
steer_prompt = st.text_input("Steering prompt", value=defaults.steer_prompt, key="dir_steer_prompt")
scales = st.multiselect("Steering scales (× the site's typical activation norm)",
                        [0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0, 2.0],
                        default=list(defaults.scales), key="dir_scales")

if st.button("Build dashboard", key="dir_go", type="primary", disabled=vec is None):
    try:
        with st.spinner("Reading the direction..."):
            dash = direction_dashboard(model, vec, site, list(defaults.prompts), steer_prompt=steer_prompt,
                                       steer_scales=scales, relative_scales=True)
            dash.neighbours = registry.neighbours(vec, k=15, exclude=vec_name)
            st.session_state["dir_result"] = dash
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
    st.markdown(f"**Cosine neighbours** among {len(registry)} directions collected for this model at {dash.site} "
                "(SAE decoder rows, saved atlas / decodeshare runs, this session's atlas, the unembeddings of the "
                "default facts' countries and capitals)")
    st.dataframe(dash.neighbours.round(4), hide_index=True, key="dir_neigh")
if dash.steering:
    st.markdown(f"**Steering preview** (scale 1 = the typical norm at {dash.site}, {dash.steer_unit:.1f})")
    st.code("\n".join(f"scale {k}: {v}" for k, v in dash.steering.items()), language=None)
