"""Feature Browser: any SAELens-format SAE directory (trained here or elsewhere) on the chosen model. Features are
searched / sorted by density or max activation; each feature card shows its top contexts (per-sample, tokens
shaded by activation) and activation histogram, then the direction dashboard of its decoder row (the Direction
page's API: projection histogram, logit effects, cosine neighbours among every collected direction), and a
steer-with-this-feature box."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

st.set_page_config(page_title="interplab · Feature Browser", page_icon=":microscope:", layout="wide")

from interplab.app.widgets import page_model, show_figure  # noqa: E402
from interplab.core.errors import InterplabError  # noqa: E402

st.title("Feature Browser")
st.caption("Top-activating contexts are computed one dialogue per forward (FAST), so no context contains another "
           "sample's tokens. Pick any SAELens directory (cfg.json + sae_weights.safetensors).")

picked = page_model("fb", page="features", suggested="toy-chat", fits=lambda n: n.endswith("chat"))
name, backend, device, dtype = picked.name, picked.backend, picked.device, picked.dtype
model = picked.load()

from interplab.figures.sae import context_html, feature_histogram_figure, special_token_heatmap  # noqa: E402
from interplab.results.runs import interplab_home  # noqa: E402
from interplab.sae import FeatureStats, feature_statistics, load_sae, sae_data, sae_site, steering_sweep  # noqa: E402

from interplab.sae.data import OFFLINE_CHAT, load_sae_data  # noqa: E402
from interplab.zoo import shipped_saes  # noqa: E402

root = Path(st.session_state.get("sae_root", str(interplab_home() / "saes")))
found = sorted([p for p in root.iterdir() if (p / "cfg.json").exists()], key=lambda p: p.stat().st_mtime,
               reverse=True) if root.is_dir() else []
# the organism's own shipped SAE first (so the page opens on something), then the user's trained runs
shipped = shipped_saes(name)
default_dir = st.session_state.get("fb_dir") or (str(shipped[0]) if shipped else str(found[0]) if found else "")
sae_dir = st.text_input("SAE directory", value=default_dir, key="fb_dir_input",
                        placeholder="/path/to/sae (cfg.json + sae_weights.safetensors)")
if shipped:
    st.caption(f"Shipped with `{name}`: " + ", ".join(f"`{p}`" for p in shipped)
               + (" (recorded config: the run's `config.json`, two folders up; docs/sae.md \"On a real model\")."
                  if name.startswith("real:") else " (recorded config: `run_config.json` in that folder)."))
if found:
    st.caption("Runs in " + f"`{root}`: " + ", ".join(f"`{p.name}`" for p in found[:8]))
if not sae_dir.strip():
    st.info("Type the path of an SAE directory (train one on the SAE Training page).")
    st.stop()
st.session_state["fb_dir"] = sae_dir


@st.cache_resource(max_entries=4, show_spinner="Loading SAE...")
def _sae(path: str, mtime: float):  # noqa: ARG001 - mtime is a cache key
    return load_sae(path)


try:
    p = Path(sae_dir).expanduser()
    sae = _sae(str(p), (p / "sae_weights.safetensors").stat().st_mtime if (p / "sae_weights.safetensors").exists() else 0.0)
except (InterplabError, OSError, ValueError, KeyError) as e:
    st.error(f"Cannot load an SAE from `{sae_dir}`: {e}")
    st.stop()

md = sae.cfg.metadata
try:
    default_site = sae_site(sae)
except InterplabError:
    default_site = f"resid_post.{max(0, model.n_layers // 2 - 1)}"
c1, c2, c3 = st.columns(3)
with c1:
    site = st.text_input("Site", value=default_site, key="fb_site",
                         help="interplab site the SAE reads (from its metadata hook_name)")
with c2:
    n_samples = st.number_input("Dialogues to scan", 4, 20_000, value=64, key="fb_n")
with c3:
    k = st.number_input("Top contexts per feature", 1, 50, value=5, key="fb_k")
st.caption(f"architecture `{sae.cfg.architecture()}` · d_in {sae.cfg.d_in} · d_sae {sae.cfg.d_sae} · "
           f"model `{md.get('model_name')}` · hook `{md.get('hook_name')}` · "
           f"training data `{md.get('training_data_mode', 'unknown')}`")
if sae.cfg.d_in != model.d_model:
    st.error(f"The SAE's d_in ({sae.cfg.d_in}) does not match the model's d_model ({model.d_model}).")
    st.stop()

key = (sae_dir, name, backend, site, int(n_samples), int(k))
if st.session_state.get("fb_key") != key:
    st.session_state.pop("fb_stats", None)
if st.button("Compute feature statistics", key="fb_compute", type="primary") or "fb_stats" in st.session_state:
    if "fb_stats" not in st.session_state:
        # the SAE's own evaluation data: the built-in chat set for an SAE trained on it (a real chat model), else
        # the toy dialogues (held-out split, seed 1)
        if "offline chat" in str(md.get("dataset_path") or ""):
            data = load_sae_data(model, OFFLINE_CHAT, 4, min(int(n_samples), 200), 4, seed=0)
        else:
            data = sae_data(model, 4, int(n_samples), 4, seed=1)
        bar = st.progress(0.0, text="scanning dialogues...")
        try:
            st.session_state["fb_stats"] = feature_statistics(
                model, sae, data.eval, k=int(k), site=site,
                progress=lambda i, n: bar.progress(min(1.0, i / n), text=f"dialogue {i}/{n}"))
            st.session_state["fb_key"] = key
        except InterplabError as e:
            st.error(str(e))
            st.stop()
    stats: FeatureStats = st.session_state["fb_stats"]
else:
    st.info("Press **Compute feature statistics** to scan held-out dialogues with this SAE.")
    st.stop()

df = stats.to_frame()
st.subheader("Features")
c1, c2, c3 = st.columns([2, 1, 1])
with c1:
    query = st.text_input("Search (feature id or a token among the top logit effects)", key="fb_query")
with c2:
    sort_by = st.selectbox("Sort by", ["max_act", "density", "mean_act", "feature"], key="fb_sort")
with c3:
    hide_dead = st.checkbox("Hide dead features", value=True, key="fb_hide_dead")
view = df
if hide_dead:
    view = view[~view["dead"]]
if query.strip():
    q = query.strip()
    view = view[(view["feature"].astype(str) == q) | view["top_logits"].str.contains(q, regex=False)]
view = view.sort_values(sort_by, ascending=sort_by == "feature")
st.dataframe(view.head(200), hide_index=True, key="fb_table")
st.caption(f"{int(df['dead'].sum())} of {len(df)} features never fired on {stats.n_tokens} tokens.")
if view.empty:
    st.warning("No feature matches.")
    st.stop()

feature = int(st.selectbox("Feature", view["feature"].tolist()[:500], key="fb_feature"))
st.subheader(f"Feature #{feature}")
r = df.set_index("feature").loc[feature]
m1, m2, m3 = st.columns(3)
m1.metric("density", f"{r['density']:.4f}")
m2.metric("max activation", f"{r['max_act']:.3g}")
m3.metric("mean activation (active)", f"{r['mean_act']:.3g}")
ctxs = stats.contexts(feature)
st.markdown("**Top contexts** (one sample each; darker = stronger activation)")
if not ctxs:
    st.caption("This feature never fired on the scanned dialogues.")
vmax = max((c["max"] for c in ctxs), default=1.0)
for c in ctxs:
    st.markdown(f"max {c['max']:.3g} at position {c['position']} (sample {c['sample']})")
    st.markdown(context_html(c["tokens"], c["acts"], vmax), unsafe_allow_html=True)
# A feature's decoder row is a direction: the rest of the card is the direction dashboard of W_dec[f] (the same
# API as the Direction page): projection histogram, logit effects through the unembedding, cosine neighbours among
# every direction collected for this model at this site (this SAE's other features included).
from interplab.figures.lenses import direction_histogram  # noqa: E402
from interplab.figures.lenses import logit_effects_figure as direction_logit_figure  # noqa: E402
from interplab.probes.lenses import collect_directions, default_pair, direction_dashboard  # noqa: E402


@st.cache_data(max_entries=4, show_spinner="Collecting the directions computed for this model...")
def _fb_registry(_model, _sae, key, site: str):  # noqa: ARG001 - key: cache key (SAE dir, model, site)
    W = _sae.W_dec.detach().double().cpu().numpy()
    own = {f"SAE {Path(key[0]).name} #{i}": W[i] for i in range(W.shape[0])}
    return collect_directions(_model, site, extra=own)


@st.cache_data(max_entries=64, show_spinner="Reading the feature's decoder direction...")
def _fb_dashboard(_model, _sae, key, feature: int, site: str):  # noqa: ARG001 - key: cache key
    prompts = [default_pair(_model, seed=s)[0] for s in range(16)]
    return direction_dashboard(_model, _sae.W_dec[feature].detach().double().cpu().numpy(), site, prompts)


try:
    registry = _fb_registry(model, sae, key, site)
    dash = _fb_dashboard(model, sae, key, feature, site)
except InterplabError as e:
    st.error(f"Cannot read the feature's direction: {e}")
    st.stop()
own_name = f"SAE {Path(sae_dir).name} #{feature}"
col_a, col_b = st.columns(2)
with col_a:
    show_figure(feature_histogram_figure(stats, feature), key=f"fb_hist")
    show_figure(direction_histogram(dash, title=f"Projection onto W_dec[{feature}] · {site}"), key="fb_proj")
with col_b:
    show_figure(direction_logit_figure(dash, title=f"Direct logit effect of W_dec[{feature}]"), key=f"fb_logits")
    st.markdown(f"**Cosine neighbours** among {len(registry)} directions collected at {site} (this SAE's other "
                "features, other SAEs, saved atlas and decodeshare runs); the Direction page shows any of them")
    st.dataframe(registry.neighbours(registry.vector(own_name), k=10, exclude=own_name).round(4), hide_index=True,
                 key="fb_neighbours")
with st.expander("Special-token features (paper App. F ranking)"):
    st.dataframe(stats.special_ranking(5), hide_index=True, key="fb_special_table")
    show_figure(special_token_heatmap(stats), key="fb_special")

st.subheader("Steer with this feature")
s1, s2, s3, s4 = st.columns([3, 1, 1, 1])
with s1:
    from interplab.probes.next_token import suggest_prompt

    prompt = st.text_input("User message", value=suggest_prompt(model), key="fb_steer_prompt",
                           help="a user turn; rendered with the chat template and a generation prompt")
with s2:
    alpha = st.number_input("alpha", -1000.0, 1000.0, value=8.0, key="fb_alpha")
with s3:
    positions = st.selectbox("Positions", ["all", "template", "generated"], key="fb_positions")
with s4:
    max_new = st.number_input("New tokens", 1, 256, value=16, key="fb_max_new")
STEER_COLUMNS = (
    "**alpha**: the multiple of the feature's decoder row W_dec[f] added at the SAE's site on the chosen positions "
    "(0 = no steering). **text**: the greedy reply up to the end-of-turn token. **target_activation**: the feature's "
    "mean activation over the *generated* tokens when the finished reply is re-run *without* steering, i.e. whether "
    "the steered text itself evokes the feature. It is 0 when the feature never fires on those tokens (a JumpReLU "
    "feature is exactly 0 below its threshold; steering changes which tokens are generated, not the clean read-out) "
    "or when no token was generated. **repeated_3gram_frac**: share of the reply's 3-grams that repeat an earlier "
    "one (degenerate loops).")
if st.button("Generate", key="fb_generate"):
    if not prompt.strip():
        st.warning("Type a user message first.")
    else:
        try:
            res = steering_sweep(model, sae, [[{"role": "user", "content": prompt}]], feature=feature,
                                 alphas=(0.0, float(alpha)), positions=positions, max_new_tokens=int(max_new),
                                 site=site)
            out = res.to_frame()[["alpha", "text", "target_activation", "repeated_3gram_frac"]]
            st.dataframe(out, hide_index=True, key="fb_steer_out")
            st.caption(STEER_COLUMNS)
        except InterplabError as e:
            st.error(str(e))
