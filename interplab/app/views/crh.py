"""The CRH page's sections (pages/4_CRH.py): the planted cylinder, the real-model study, a model's
concept (source, difference vectors, steering scans, try-it) and the spiral probe. Widget keys start
with `crh_`."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import streamlit as st

from interplab.app.compute import cached_compute
from interplab.app.model_jobs import loaded_model_job, model_settings
from interplab.app.widgets import saved_result, show_figure, validity_panel
from interplab.core.errors import InterplabError
from interplab.figures.crh import cylinder_scene, pairwise_scatter, penalty_heatmaps, sector_polar
from interplab.probes import crh

OFFLINE = "paper concept (offline pairs)"
SP_OFFLINE = "Offline concept pair (real chat model)"


def _degrees(angle: float, nan: str) -> str:
    return nan if math.isnan(angle) else f"{math.degrees(angle):.0f}°"


def validation() -> None:
    """A saved `validate-crh` run (the organisms are built by the experiment)."""
    from interplab.figures.crh import validation_sector_maps

    val = saved_result("validate-crh", "validation", "crh_val_run", label="Saved validation run",
                       hint=" (a few minutes on CPU)")
    if val is not None:
        st.dataframe(val.recovery_table(), hide_index=True, key="crh_val_table")
        show_figure(validation_sector_maps(val.maps), key="crh_val_maps")


@cached_compute("Drawing the planted cylinder and scanning sectors...", max_entries=16)
def synthetic(*, seed: int, sector: str, gamma: float, n_bins: int, n_test: int, lrh_null: bool):
    org = crh.planted_cylinder(seed=seed, sector=sector, n_test=n_test, lrh_null=lrh_null)
    L = np.linspace(6 / 25, 6, 25)
    sm, cyl = crh.synthetic_sector_map(org, gamma_deg=gamma, n_bins=n_bins, strengths=L)
    pm = crh.synthetic_penalty_map(org, cyl, strengths=L)
    pt = None
    try:
        pt = crh.pairwise_test(org.test, pm.margins(0), n_perm=200, seed=seed)
    except InterplabError:
        pass
    return org, cyl, sm, pm, pt


def cylinder_views(cyl, sm, pm, pt, sample_diffs, key: str, frame_note: str = "") -> None:
    """A fitted cylinder, its sector map, penalty heatmaps and the pairwise test (planted or a
    model's)."""
    st.subheader("Cylinder")
    c1, c2, c3 = st.columns(3)
    c1.metric("top-2 EV of normal residuals", f"{cyl.plane_explained:.3f}",
              help="LRH null (collinear diffs + isotropic noise) at this n, d: "
                   f"{cyl.null_plane_explained:.3f} (p99 {cyl.null_plane_explained_p99:.3f})")
    c2.metric("cylinder score (EV / null)", f"{cyl.cylinder_score:.2f}")
    c3.metric("radius (median normal norm)", f"{cyl.radius:.3g}", help=f"‖a‖ = {cyl.axis_norm:.3g}")
    s1, s2 = st.columns(2)
    with s1:
        sample = st.selectbox("Sample for the penalty polyline", list(range(sample_diffs.shape[0])),
                              key=f"{key}_sample")
    with s2:
        Lmax = float(sm.strengths.max())
        L = st.slider("Strength L of the polyline", 0.0, Lmax, value=Lmax / 2, key=f"{key}_L")
    fig = cylinder_scene(cyl, sector_auc=sm.population_auc, sample_diff=sample_diffs[int(sample)],
                         strength=L, ps=np.linspace(0, 1, 11))
    show_figure(fig, key=f"{key}_scene")
    st.subheader("Sector map" + frame_note)
    st.caption(f"Population sector centre: {_degrees(sm.centre, 'n/a (flat map)')} (AUC-weighted "
               f"circular mean); suppressing sector {_degrees(sm.suppress, 'n/a')}.")
    show_figure(sector_polar(sm), key=f"{key}_polar")
    with st.expander("Per-bin table"):
        st.dataframe(sm.bins_frame().round(4), hide_index=True, key=f"{key}_bins")
    st.subheader("Penalty steering (Implication 1)")
    show_figure(penalty_heatmaps(pm), key=f"{key}_penalty")
    st.subheader("Pairwise test (Implication 3)")
    if pt is None:
        st.info("Fewer than 3 pairs of activated samples: the pairwise test needs more samples or "
                "larger strengths.")
    else:
        show_figure(pairwise_scatter(pt), key=f"{key}_pairwise")


def planted() -> None:
    """The synthetic planted cylinder (no model): its settings, recovery against the planted truth,
    its views."""
    c1, c2, c3, c4, c5 = st.columns(5)
    seed = c1.number_input("Seed", 0, 10_000, 0, key="crh_syn_seed")
    sector = c2.selectbox("Hidden sectors", list(crh.SECTOR_MODES), key="crh_syn_sector")
    gamma = c3.slider("γ (tilt from the axis, °)", 5.0, 85.0, 45.0, key="crh_syn_gamma")
    n_bins = c4.select_slider("Sector bins", [8, 12, 24, 36], value=24, key="crh_syn_bins")
    lrh = c5.checkbox("LRH null (ρ = 0)", value=False, key="crh_syn_null")
    org, cyl, sm, pm, pt = synthetic(seed=int(seed), sector=sector, gamma=float(gamma),
                                     n_bins=int(n_bins), n_test=12, lrh_null=bool(lrh))
    if not lrh:
        centre = org.to_planted_angle(sm.centre, cyl.plane)
        error = ("n/a" if math.isnan(centre)
                 else f"{abs(math.degrees(crh.wrap_angle(centre - org.psi0))):.1f}°")
        st.success(f"Recovery: axis {crh.angle_between(cyl.axis, org.u):.2f}°, plane "
                   f"{crh.max_principal_angle(cyl.plane, org.plane):.2f}°, radius {cyl.radius:.3f} "
                   f"(expected {org.expected_radius:.3f}); sector centre error " + error
                   + " (spec thresholds: 6°, 6°, 10%, 15°).")
    cylinder_views(cyl, sm, pm, pt, org.test, key="crh_syn")


def concepts_study(picked, model, organism: bool) -> None:
    """The `crh-concepts` study: on a real model as a job at the documented depths (blocks 5, 10, 15
    of 30, at the same depths of this model); offline pairs are English, so an organism opens saved
    runs, labelled by model."""
    settings = None
    if not organism:
        L = model.n_layers
        depths = {} if L == 30 else {
            "select_layers": ",".join(map(str, sorted({L // 6, L // 3, L // 2}))),
            "steer_layer": L // 3}
        settings = model_settings("crh-concepts", picked, **depths)
    cstudy, _, _ = loaded_model_job("crh-concepts", "study", "crh_concepts", picked=picked,
                                    model=model, settings=settings, label="Run crh-concepts",
                                    saved_label="Saved crh-concepts run",
                                    saved_key="crh_concepts_run", launch=not organism)
    if cstudy is None:
        return
    from interplab.figures.crh import cylinder_stats_figure, elicitation_curves
    from interplab.probes.crh.elicitation import elicitation_frame, elicitation_summary

    try:
        el = elicitation_frame(cstudy)
    except InterplabError as exc:       # a geometry-only run (steer=false) has no replies to show
        st.info(str(exc))
    else:
        es = elicitation_summary(el, B=2000)
        show_figure(elicitation_curves(es), key="crh_concepts_elicitation")
        st.dataframe(es.round(3), hide_index=True, key="crh_concepts_summary")
    show_figure(cylinder_stats_figure(cstudy.stats, value="cylinder_score"),
                key="crh_concepts_stats")


def has_toy_vocab(model) -> bool:
    """The toy word-level vocabulary (~160 words), not a real BPE that happens to hold "cat" and
    "sep"."""
    vocab = model.tokenizer.get_vocab()
    return len(vocab) <= 1000 and all(w in vocab for w in ("cat", "dog", "sep", "the"))


@dataclass(frozen=True)
class Concept:
    """A model's concept as the page picked it: the data, where it is read, and `key`, everything it
    depends on."""

    data: crh.ConceptData
    kind: str
    layer: int
    position: str
    key: tuple

    @property
    def offline(self) -> bool:
        return self.kind == OFFLINE


def concept_source(picked, model) -> Concept:
    """The concept source (a real chat model opens on the paper's concepts; a toy organism on its
    own; a random test checkpoint, whose word-level vocabulary reads English as <unk>, on the
    fallback), the concept and its pairs. Stops the page with a notice when the inputs do not make a
    concept."""
    from interplab.data.concepts import CONCEPT_NAMES

    c1, c2, c3 = st.columns(3)
    with c1:
        first = ["toy concept"] if has_toy_vocab(model) else [OFFLINE] if model.chat_default else []
        kinds = (first + ["toy concept (vocab fallback)", "custom pairs"]
                 + ([] if OFFLINE in first else [OFFLINE]))
        kind = st.selectbox("Concept source", kinds, key="crh_kind",
                            help="Offline pairs: the same factual answer followed by an aside "
                                 "naming the concept's own words or everyday nouns (docs/crh.md, "
                                 "\"On a real model\"); read as the mean over the pair text's "
                                 "tokens, steered in units of the residual norm.")
    offline = kind == OFFLINE
    with c2:
        layer = st.number_input("Layer (read = write site resid_post.L)", 0, model.n_layers - 1,
                                model.n_layers // 3 if offline else model.n_layers // 2,
                                key="crh_layer")
    with c3:
        n_train = st.number_input("Train pairs", 6, 400, 25 if offline else 60, key="crh_ntrain")
    custom = ()
    if offline:
        from interplab.data.concept_pairs import concept_lexicon, offline_concept_pairs
        from interplab.probes.crh.real_data import user_concept_data

        keys = list(concept_lexicon())
        concept = st.selectbox("Concept", keys, index=keys.index("temperature"),
                               key="crh_offline_concept",
                               format_func=lambda k: f"{k}: {concept_lexicon()[k].output_concept}")
        pairs = offline_concept_pairs([concept], n_pairs=int(n_train) + 4, seed=0)
        data = user_concept_data(pairs, n_test=4, seed=0, model=model)[0]
    elif kind.startswith("toy"):
        concept = st.selectbox("Concept", list(CONCEPT_NAMES), key="crh_concept")
        try:
            data = crh.toy_concept_data(model, concept, n_train=int(n_train), n_test=4, seed=0,
                                        vocab_fallback="fallback" in kind)
        except InterplabError as exc:
            st.warning(str(exc))
            st.stop()
    else:
        txt = st.text_area("Pairs, one per line: `text without concept || text with concept`",
                           key="crh_pairs", height=140)
        words = st.text_input("Concept words (judge token set, comma-separated)", key="crh_words")
        prompts = st.text_area("Test prompts (one per line; each needs a pair above, first lines)",
                               key="crh_prompts")
        pairs = [tuple(s.strip() for s in line.split("||")) for line in txt.splitlines()
                 if "||" in line]
        tp = [p for p in prompts.splitlines() if p.strip()]
        if len(pairs) < 3 or not words.strip() or not tp or len(tp) > len(pairs):
            st.info("Give at least 3 pairs, the concept words and 1..n_pairs test prompts.")
            st.stop()
        data = crh.ConceptData(name="custom",
                               words=tuple(w.strip() for w in words.split(",") if w.strip()),
                               train_pairs=pairs, test_pairs=pairs[: len(tp)], test_prompts=tp)
        custom = (txt, words, prompts)        # custom pairs: their text is what they depend on
    position = "mean" if offline else "last"
    return Concept(data, kind, int(layer), position,
                   key=(picked.key, kind, data.name, int(layer), int(n_train), position, custom))


@cached_compute("Reading difference vectors...", max_entries=16)
def diffs(model, data, *, layer: int, position: str):
    return (crh.concept_diffs(model, data.train_pairs, layer=layer, position=position),
            crh.concept_diffs(model, data.test_pairs, layer=layer, position=position))


def steering_scans(model, c: Concept, cyl, d_test, judge, unit: float, unit_name: str) -> None:
    """The sector and penalty scans on request, and their last result on this concept (else the
    cylinder alone)."""
    with st.form("crh_scan"):
        st.markdown("**Steering scans** (batched: all conditions in as few generate calls as the "
                    "row budget allows)")
        f1, f2, f3, f4 = st.columns(4)
        n_bins_m = f1.select_slider("Sector bins", [6, 8, 12, 24], value=8 if c.offline else 12)
        n_steps = f2.number_input("Strength steps", 2, 25, 4 if c.offline else 6)
        lmax_mult = f3.number_input(f"L_max / {unit_name}", 0.05, 20.0, 1.0 if c.offline else 3.0,
                                    help=f"{unit_name} = {unit:.3g} at this layer")
        new_tok = f4.number_input("New tokens", 1, 32, 16 if c.offline else 8)
        go_scan = st.form_submit_button("Run sector + penalty scans")
    if go_scan:
        L = crh.strength_grid(float(lmax_mult) * unit, int(n_steps))
        bar = st.progress(0.0, text="sector scan")
        prompts = c.data.test_prompts
        sm = crh.sector_scan(model, prompts, cyl, layer=c.layer, judge=judge, n_bins=int(n_bins_m),
                             strengths=L, max_new_tokens=int(new_tok),
                             progress=lambda f: bar.progress(f * 0.5))
        pm = crh.penalty_scan(model, prompts, d_test, cyl.axis, layer=c.layer, judge=judge,
                              strengths=L, ps=crh.penalty_grid(6), max_new_tokens=int(new_tok),
                              progress=lambda f: bar.progress(0.5 + f * 0.5))
        bar.empty()
        pt = None
        try:
            pt = crh.pairwise_test(d_test, pm.margins(0), n_perm=200)
        except InterplabError:
            pass
        st.session_state["crh_model_result"] = {"key": c.key, "result": (sm, pm, pt)}
    res = st.session_state.get("crh_model_result")
    if res is not None and res["key"] == c.key:
        cylinder_views(cyl, *res["result"], d_test, key="crh_model")
    else:
        show_figure(cylinder_scene(cyl, sample_diff=d_test[0]), key="crh_model_scene_only")
        st.info("Run the scans to see sector maps, penalty heatmaps and the pairwise test.")


def try_steer(model, c: Concept, cyl, judge, unit: float) -> None:
    """One prompt, unsteered and steered along a sector vector (β, γ, L)."""
    t1, t2, t3, t4 = st.columns([3, 1, 1, 1])
    prompt = t1.text_input("Prompt (plain text; toy concepts use the chat template of the first "
                           "test prompt if empty)", key="crh_try_prompt")
    beta = t2.slider("β (°)", 0, 359, 0, key="crh_try_beta")
    gam = t3.slider("γ (°)", 0, 90, 45, key="crh_try_gamma")
    default_l = 0.5 * unit if c.offline else 3 * cyl.axis_norm
    strength = t4.number_input("L", 0.0, 1e4, float(round(default_l, 3)), key="crh_try_L")
    if not st.button("Generate", key="crh_try_go"):
        return
    p = prompt if prompt.strip() else c.data.test_prompts[0]
    if prompt.strip() and model.chat_default:
        # steer_generate reads strings as raw text: template the turn
        p = model.apply_chat_template([{"role": "user", "content": prompt}],
                                      add_generation_prompt=True)
    v = crh.sector_vector(cyl, gamma_deg=gam, beta_deg=beta, strength=strength)
    run = crh.steer_generate(model, [p, p], np.stack([np.zeros_like(v), v]),
                             site=f"resid_post.{c.layer}", max_new_tokens=16)
    labels = judge(run.texts)
    st.dataframe(pd.DataFrame({"condition": ["unsteered",
                                             f"steered (β={beta}°, γ={gam}°, L={strength:g})"],
                               "output": run.texts,
                               "label": [crh.LABEL_NAMES[int(x)] for x in labels]}),
                 hide_index=True, key="crh_try_table")


def spiral_views(sp, key: str) -> None:
    """A spiral probe's helix-fit table (trajectory and its two controls) and figures."""
    from interplab.figures.crh import helix_figure, steering_vectors_figure

    rows = []
    for mode in sp.fits:
        for label, fits in (("trajectory", sp.fits),
                            ("straight line (LRH control)", sp.reference_fits),
                            ("flat (top-2 PCs control)", sp.planar_fits)):
            if mode in fits:
                rows.append({"mode": mode, "fit to": label,
                             **{k: v for k, v in fits[mode].summary().items() if k != "mode"}})
    st.dataframe(pd.DataFrame(rows).round(4), hide_index=True, key=f"{key}_fits")
    for mode, fit in sp.fits.items():
        show_figure(helix_figure(fit), key=f"{key}_helix_{mode}")
    show_figure(steering_vectors_figure(sp.vectors), key=f"{key}_optim")


def _spiral_pair(model):
    """The prompt-pair picker. Returns (source, a function making the (ori, tgt) pair)."""
    from interplab.data.concepts import CONCEPTS

    sp_ori, sp_tgt, sp_question = crh.SPIRAL_DEFAULT_PAIR
    sp_opts = ["Toy concept pair (crh-spiral)", SP_OFFLINE, "Custom prompts"]
    if not has_toy_vocab(model) and model.chat_default:
        sp_opts = [SP_OFFLINE, *[o for o in sp_opts if o != SP_OFFLINE]]
    src = st.radio("Prompt pair", sp_opts, horizontal=True, key="crh_sp_source")
    if src == SP_OFFLINE:
        from interplab.data.concept_pairs import concept_lexicon
        from interplab.probes.crh.real_data import real_spiral_prompts

        lex_keys = list(concept_lexicon())
        p1, p2, p3 = st.columns(3)
        c_ori = p1.selectbox("Concept (ori)", lex_keys, index=lex_keys.index("temperature"),
                             key="crh_sp_off_ori")
        c_tgt = p2.selectbox("Concept (tgt)", lex_keys, index=lex_keys.index("wetland"),
                             key="crh_sp_off_tgt")
        question = p3.text_input("User question (empty: the capital of France, with its answer)",
                                 value="", key="crh_sp_off_question")
        return src, lambda: real_spiral_prompts(model, c_ori, c_tgt, question)
    if src.startswith("Toy"):
        concepts = list(CONCEPTS)
        p1, p2, p3 = st.columns(3)
        c_ori = p1.selectbox("Concept (ori)", concepts, index=concepts.index(sp_ori),
                             key="crh_sp_ori")
        c_tgt = p2.selectbox("Concept (tgt)", concepts, index=concepts.index(sp_tgt),
                             key="crh_sp_tgt")
        question = p3.text_input("Question", value=sp_question, key="crh_sp_question")
        return src, lambda: crh.toy_spiral_prompts(c_ori, c_tgt, question)
    p1, p2 = st.columns(2)
    txt_ori = p1.text_input("Prompt (ori)", key="crh_sp_prompt_ori",
                            help="one user turn (chat-templated when the model has a template)")
    txt_tgt = p2.text_input("Prompt (tgt, differs in one token)", key="crh_sp_prompt_tgt")
    return src, lambda: (txt_ori, txt_tgt)


def spiral(model, concept_key: tuple) -> None:
    """The spiral probe on a prompt pair, on request, and its last result (with the verdict
    `crh-spiral` saves)."""
    src, make_pair = _spiral_pair(model)
    q1, q2, q3, q4, q5 = st.columns(5)
    sp_layer = q1.number_input("Layer L (resid_pre.L)", 0, model.n_layers - 1,
                               model.n_layers // 3 if src == SP_OFFLINE else model.n_layers // 2,
                               key="crh_sp_layer")
    w_min = q2.number_input("w min", 0.0, 10.0, 0.5, step=0.1, key="crh_sp_wmin")
    w_max = q3.number_input("w max", 0.0, 10.0, 3.0, step=0.1, key="crh_sp_wmax")
    w_step = q4.number_input("w step", 0.05, 5.0, 0.5, step=0.05, key="crh_sp_wstep")
    sp_steps = q5.number_input("Adam steps", 0, 200, 10, key="crh_sp_steps")
    if st.button("Run spiral probe", key="crh_sp_go"):
        try:
            ws = crh.budget_grid(float(w_min), float(w_max), float(w_step))
            ori, tgt = make_pair()
            with st.spinner("Optimising steering vectors and fitting helices..."):
                sp = crh.spiral_probe(model, ori, tgt, int(sp_layer), ws=ws, steps=int(sp_steps))
            st.session_state["crh_sp_result"] = {
                "key": concept_key, "source": src, "layer": int(sp_layer),
                "ws": tuple(ws.tolist()), "steps": int(sp_steps), "result": sp}
        except InterplabError as exc:
            st.session_state.pop("crh_sp_result", None)
            st.error(f"Spiral probe failed: {exc}")
    res = st.session_state.get("crh_sp_result")
    if res is None or res["key"] != concept_key:
        return
    from interplab.probes.crh.verdicts import spiral_verdicts
    from interplab.probes.validity import ValidityReport

    sp = res["result"]
    sv, tok = sp.vectors, model.tokenizer
    st.caption(f"t* = {sv.t_star}, dist = ‖Δ‖ = {sv.dist:.3g}; pushing away from "
               f"{tok.convert_ids_to_tokens(sv.src_tokens)} towards "
               f"{tok.convert_ids_to_tokens(sv.dst_tokens)}.")
    # the verdict `crh-spiral` saves, computed on this probe (one prompt pair: inconclusive by
    # design)
    validity_panel(ValidityReport.of(spiral_verdicts(sp)), key="crh_sp_validity")
    spiral_views(sp, key="crh_sp")
