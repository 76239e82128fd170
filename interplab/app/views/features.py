"""The Feature Browser page's sections (pages/8_Feature_Browser.py): the SAE picker, feature
statistics, the feature table and card, the decoder row's direction dashboard and steering with a
feature. Widget keys start with `fb_`. Model computations are cached on the PageModel's key and the
SAE directory."""
from __future__ import annotations

from pathlib import Path

import streamlit as st

from interplab.app.compute import cached_compute
from interplab.app.views.sae import runs_root, sae_dirs
from interplab.app.widgets import show_figure
from interplab.core.errors import InterplabError

STEER_COLUMNS = (
    "**alpha**: the multiple of the feature's decoder row W_dec[f] added at the SAE's site on the "
    "chosen positions (0 = no steering). **text**: the greedy reply up to the end-of-turn token. "
    "**target_activation**: the feature's mean activation over the *generated* tokens when the "
    "finished reply is re-run *without* steering, i.e. whether the steered text itself evokes the "
    "feature. It is 0 when the feature never fires on those tokens (a JumpReLU feature is exactly "
    "0 below its threshold; steering changes which tokens are generated, not the clean read-out) "
    "or when no token was generated. **repeated_3gram_frac**: share of the reply's 3-grams that "
    "repeat an earlier one (degenerate loops).")
SORT_BY = ["max_act", "density", "mean_act", "feature"]


def pick_sae_dir(name: str) -> str:
    """The SAE directory: typed, or the model's own shipped SAE first (so the page opens on
    something), then the user's trained runs. Stops the page with a hint when there is none."""
    from interplab.zoo import shipped_saes

    root = runs_root()
    found = sae_dirs(root)
    shipped = shipped_saes(name)
    default_dir = (st.session_state.get("fb_dir")
                   or (str(shipped[0]) if shipped else str(found[0]) if found else ""))
    sae_dir = st.text_input("SAE directory", value=default_dir, key="fb_dir_input",
                            placeholder="/path/to/sae (cfg.json + sae_weights.safetensors)")
    if shipped:
        recorded = (" (recorded config: the run's `config.json`, two folders up; docs/sae.md \"On "
                    "a real model\")." if name.startswith("real:") else
                    " (recorded config: `run_config.json` in that folder).")
        st.caption(f"Shipped with `{name}`: " + ", ".join(f"`{p}`" for p in shipped) + recorded)
    if found:
        st.caption("Runs in " + f"`{root}`: " + ", ".join(f"`{p.name}`" for p in found[:8]))
    if not sae_dir.strip():
        st.info("Type the path of an SAE directory (train one on the SAE Training page).")
        st.stop()
    st.session_state["fb_dir"] = sae_dir
    return sae_dir


@cached_compute("Loading SAE...", max_entries=4, resource=True)
def _load(*, path: str, mtime: float):     # noqa: ARG001 - mtime: a rewritten SAE is loaded again
    from interplab.sae import load_sae

    return load_sae(path)


def weights_stamp(sae_dir: str) -> float:
    """When the SAE's weights were written (0 when there are none): a rewritten SAE is another
    SAE."""
    w = Path(sae_dir).expanduser() / "sae_weights.safetensors"
    return w.stat().st_mtime if w.exists() else 0.0


def load(sae_dir: str):
    """The SAE in `sae_dir` (cached until its weights change), or stop the page saying why it
    cannot load."""
    try:
        return _load(path=str(Path(sae_dir).expanduser()), mtime=weights_stamp(sae_dir))
    except (InterplabError, OSError, ValueError, KeyError) as e:
        st.error(f"Cannot load an SAE from `{sae_dir}`: {e}")
        st.stop()


def scan_settings(model, sae) -> tuple[str, int, int]:
    """(site, dialogues to scan, top contexts per feature); stops the page when the SAE does not
    fit the model."""
    from interplab.sae import sae_site

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
    st.caption(f"architecture `{sae.cfg.architecture()}` · d_in {sae.cfg.d_in} · d_sae "
               f"{sae.cfg.d_sae} · model `{md.get('model_name')}` · hook `{md.get('hook_name')}` · "
               f"training data `{md.get('training_data_mode', 'unknown')}`")
    if sae.cfg.d_in != model.d_model:
        st.error(f"The SAE's d_in ({sae.cfg.d_in}) does not match the model's d_model "
                 f"({model.d_model}).")
        st.stop()
    return site, int(n_samples), int(k)


def statistics(model, sae, key: tuple, site: str, n_samples: int, k: int):
    """Feature statistics over held-out dialogues, computed on request and kept while `key` (model,
    SAE, site, scan size) stays the same; stops the page until they exist."""
    if st.session_state.get("fb_key") != key:
        st.session_state.pop("fb_stats", None)
    if not (st.button("Compute feature statistics", key="fb_compute", type="primary")
            or "fb_stats" in st.session_state):
        st.info("Press **Compute feature statistics** to scan held-out dialogues with this SAE.")
        st.stop()
    if "fb_stats" not in st.session_state:
        from interplab.sae import feature_statistics, sae_data
        from interplab.sae.data import OFFLINE_CHAT, load_sae_data

        # the SAE's own evaluation data: the built-in chat set for an SAE trained on it (a real
        # chat model), else the toy dialogues (held-out split, seed 1)
        if "offline chat" in str(sae.cfg.metadata.get("dataset_path") or ""):
            data = load_sae_data(model, OFFLINE_CHAT, 4, min(n_samples, 200), 4, seed=0)
        else:
            data = sae_data(model, 4, n_samples, 4, seed=1)
        bar = st.progress(0.0, text="scanning dialogues...")
        try:
            st.session_state["fb_stats"] = feature_statistics(
                model, sae, data.eval, k=k, site=site,
                progress=lambda i, n: bar.progress(min(1.0, i / n), text=f"dialogue {i}/{n}"))
            st.session_state["fb_key"] = key
        except InterplabError as e:
            st.error(str(e))
            st.stop()
    return st.session_state["fb_stats"]


def pick_feature(stats) -> int:
    """The searchable, sortable feature table and the feature picked from it (stops when none
    matches)."""
    df = stats.to_frame()
    c1, c2, c3 = st.columns([2, 1, 1])
    with c1:
        query = st.text_input("Search (feature id or a token among the top logit effects)",
                              key="fb_query")
    with c2:
        sort_by = st.selectbox("Sort by", SORT_BY, key="fb_sort")
    with c3:
        hide_dead = st.checkbox("Hide dead features", value=True, key="fb_hide_dead")
    view = df[~df["dead"]] if hide_dead else df
    if query.strip():
        q = query.strip()
        view = view[(view["feature"].astype(str) == q)
                    | view["top_logits"].str.contains(q, regex=False)]
    view = view.sort_values(sort_by, ascending=sort_by == "feature")
    st.dataframe(view.head(200), hide_index=True, key="fb_table")
    st.caption(f"{int(df['dead'].sum())} of {len(df)} features never fired on {stats.n_tokens} "
               "tokens.")
    if view.empty:
        st.warning("No feature matches.")
        st.stop()
    return int(st.selectbox("Feature", view["feature"].tolist()[:500], key="fb_feature"))


def feature_card(stats, feature: int) -> None:
    from interplab.figures.sae import context_html

    r = stats.to_frame().set_index("feature").loc[feature]
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


def _own_name(sae_name: str, feature: int) -> str:
    return f"SAE {sae_name} #{feature}"


@cached_compute("Collecting the directions computed for this model...", max_entries=4)
def registry(model, sae, *, sae_name: str, site: str):
    from interplab.probes.lenses import collect_directions

    W = sae.W_dec.detach().double().cpu().numpy()
    own = {_own_name(sae_name, i): W[i] for i in range(W.shape[0])}
    return collect_directions(model, site, extra=own)


@cached_compute("Reading the feature's decoder direction...", max_entries=64)
def dashboard(model, sae, *, feature: int, site: str):
    from interplab.probes.lenses import default_pair, direction_dashboard

    prompts = [default_pair(model, seed=s)[0] for s in range(16)]
    row = sae.W_dec[feature].detach().double().cpu().numpy()
    return direction_dashboard(model, row, site, prompts)


def direction_views(model, sae, key: tuple, sae_dir: str, stats, feature: int, site: str) -> None:
    """A feature's decoder row is a direction: the direction dashboard of W_dec[f] (the Direction
    page's API): projection histogram, logit effects through the unembedding, cosine neighbours
    among every direction collected for this model at this site (this SAE's other features
    included); then the special-token ranking."""
    from interplab.figures.lenses import direction_histogram, logit_effects_figure
    from interplab.figures.sae import feature_histogram_figure, special_token_heatmap

    sae_name = Path(sae_dir).name
    try:
        reg = registry(model, sae, key=key, sae_name=sae_name, site=site)
        dash = dashboard(model, sae, key=key, feature=feature, site=site)
    except InterplabError as e:
        st.error(f"Cannot read the feature's direction: {e}")
        st.stop()
    own = _own_name(sae_name, feature)
    col_a, col_b = st.columns(2)
    with col_a:
        show_figure(feature_histogram_figure(stats, feature), key="fb_hist")
        show_figure(direction_histogram(dash, title=f"Projection onto W_dec[{feature}] · {site}"),
                    key="fb_proj")
    with col_b:
        show_figure(logit_effects_figure(dash, title=f"Direct logit effect of W_dec[{feature}]"),
                    key="fb_logits")
        st.markdown(f"**Cosine neighbours** among {len(reg)} directions collected at {site} (this "
                    "SAE's other features, other SAEs, saved atlas and decodeshare runs); the "
                    "Direction page shows any of them")
        st.dataframe(reg.neighbours(reg.vector(own), k=10, exclude=own).round(4), hide_index=True,
                     key="fb_neighbours")
    with st.expander("Special-token features (paper App. F ranking)"):
        st.dataframe(stats.special_ranking(5), hide_index=True, key="fb_special_table")
        show_figure(special_token_heatmap(stats), key="fb_special")


def steer(model, sae, feature: int, site: str) -> None:
    """A user message answered with and without adding the feature's decoder row."""
    from interplab.probes.next_token import suggest_prompt
    from interplab.sae import steering_sweep

    s1, s2, s3, s4 = st.columns([3, 1, 1, 1])
    with s1:
        prompt = st.text_input("User message", value=suggest_prompt(model), key="fb_steer_prompt",
                               help="a user turn; rendered with the chat template and a generation "
                                    "prompt")
    with s2:
        alpha = st.number_input("alpha", -1000.0, 1000.0, value=8.0, key="fb_alpha")
    with s3:
        positions = st.selectbox("Positions", ["all", "template", "generated"], key="fb_positions")
    with s4:
        max_new = st.number_input("New tokens", 1, 256, value=16, key="fb_max_new")
    if not st.button("Generate", key="fb_generate"):
        return
    if not prompt.strip():
        st.warning("Type a user message first.")
        return
    try:
        res = steering_sweep(model, sae, [[{"role": "user", "content": prompt}]], feature=feature,
                             alphas=(0.0, float(alpha)), positions=positions,
                             max_new_tokens=int(max_new), site=site)
        st.dataframe(res.to_frame()[["alpha", "text", "target_activation", "repeated_3gram_frac"]],
                     hide_index=True, key="fb_steer_out")
        st.caption(STEER_COLUMNS)
    except InterplabError as e:
        st.error(str(e))
