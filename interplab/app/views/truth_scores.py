"""The Truth Scores page's sections (pages/2_Truth_Scores.py): score maps, lineage, evidence,
gating, try-it, validation and the world-facts views. Widget keys start with `ts_`."""
from __future__ import annotations

import warnings

import pandas as pd
import streamlit as st

from interplab.app.compute import cached_compute
from interplab.app.model_jobs import known_facts_setting, loaded_model_job, model_settings
from interplab.app.widgets import saved_result, show_figure
from interplab.core.errors import ConfigError, InterplabError
from interplab.figures import truth_scores as F
from interplab.interventions.head_gate import (GATE_REBASES, GATE_SITES, HeadGate, gate_summary,
                                               truth_gates)
from interplab.probes.truth import (RELEASED_PAIRS, correlation_matrix, evidence_summary,
                                    gating_sweep, lineage_correlation, load_released_maps,
                                    per_layer_correlation)

CTXMEM = "Score a model (CtxMem)"
GATE_MODES = ["normalize", "contrast", "legacy_amplify", "raw", "inverse_baseline"]
LINEAGE_STATS = ["pearson", "spearman", "pearson_centered", "topk_jaccard"]


@cached_compute("Loading the released maps...", max_entries=2)
def released_maps() -> dict:
    try:
        return load_released_maps()
    except InterplabError:  # not shipped with this checkout: the page offers live scoring only
        return {}


@cached_compute("Scoring the model (capture + batched probes)...")
def score_ctxmem(model, *, name: str, n: int, seed: int, fmt: str, epochs: int, solver: str):
    from interplab.probes.truth import ProbeRecipe, score_organism

    res = score_organism(model, name=name, recipe=ProbeRecipe(epochs=epochs, solver=solver),
                         n_samples=n, data_seed=seed, fmt=fmt)
    res.scores.model = name
    return res.scores, res.evidence_mass


def score_source(picked, organism: bool, released: dict, scored: dict):
    """Section 1's source: a released map or the sidebar's model scored on CtxMem. Returns (map,
    evidence mass or None, source)."""
    src_opts = (["Released maps (authors)"] if released else []) + [CTXMEM]
    source = st.radio("Source", src_opts, horizontal=True, key="ts_source")
    if source != CTXMEM:
        pick = st.selectbox("Released map", list(released), index=list(released).index("vicuna")
                            if "vicuna" in released else 0, key="ts_released_pick")
        return released[pick], None, source
    c1, c2, c3, c4, c5 = st.columns(5)
    n = c1.number_input("prompts", 20, 2000, 292, step=10, key="ts_n")
    seed = c2.number_input("data seed", 0, 10_000, 0, key="ts_seed")
    fmt = c3.selectbox("format", ["raw", "chat"], key="ts_fmt")
    solver = c4.selectbox("solver", ["lbfgs", "adamw"], key="ts_solver",
                          help="lbfgs: fast, the scikit-learn LogisticRegression(C=1) optimum "
                               "(interactive default); adamw: the authors' recipe (200 AdamW "
                               "epochs), the faithful mode experiments use")
    epochs = c5.number_input("epochs (adamw)", 5, 500, 200, step=5, key="ts_epochs")
    if not organism:
        # CtxMem items are organism text (`ctx e25 v3 ...`); a BPE tokenizer spells them in
        # pieces, so a map scored on them would say nothing about a real model
        st.info(f"`{picked.name}` is scored on counterfactual world facts, not on CtxMem (the "
                "organisms' toy language): section 7 launches that on it as a job, and its map "
                "then shows here; or score your own verification file (columns text, label) in "
                "*Your data* above.")
    elif st.button("Compute Truth Scores", key="ts_go", type="primary"):
        model = picked.load()
        try:
            scored[picked.name] = score_ctxmem(model, key=picked.key, name=picked.name, n=int(n),
                                               seed=int(seed), fmt=fmt, epochs=int(epochs),
                                               solver=solver)
        except InterplabError as e:
            st.error(str(e))
    if not scored:
        st.info("Pick a model in the sidebar (a toy organism or a local checkpoint) and press "
                "*Compute*.")
        return None, None, source
    pick = st.selectbox("Scored model", list(scored), index=len(scored) - 1, key="ts_pick")
    current, em_cur = scored[pick]
    st.caption(f"{current.n_samples} prompts ({current.n_positive} gold), solver "
               f"{current.provenance.get('solver', 'adamw')}, top heads: "
               + ", ".join(f"L{l}H{h} {s:.2f}" for l, h, s in current.top_heads(3)))
    return current, em_cur, source


def score_map_view(current) -> None:
    """The map as a heatmap (raw / normalized / gates), the gates it makes and the probe's
    diagnostics."""
    c1, c2, c3, c4 = st.columns(4)
    view = c1.radio("View", ["raw", "normalized", "gates"], horizontal=True, key="ts_view")
    mode = c2.selectbox("Gate mode", GATE_MODES, key="ts_mode")
    alpha = c3.number_input("α", 0.0, 20.0, 1.0, step=0.1, key="ts_alpha")
    rebase = c4.selectbox("Rebase", list(GATE_REBASES), key="ts_rebase",
                          help="layer_mean divides each layer's gates by their mean (deep and real "
                               "models; docs/real_models.md)")
    try:
        g = truth_gates(current, mode, alpha, rebase=rebase)
    except ConfigError as e:  # e.g. a layer whose gates average to 0 cannot be rebased
        st.error(f"{e} Showing the gates without rebasing.")
        g, rebase = truth_gates(current, mode, alpha), "none"
    show_figure(F.score_heatmap(current, view=view, mode=mode, alpha=alpha, rebase=rebase),
                key="ts_heatmap")
    s = gate_summary(g)
    if s["n_negative"]:
        st.warning(f"{s['n_negative']} negative gates (min {s['gate_min']:.3f}): they flip those "
                   "heads' sign (faithful to the repo's contrast mode; not clipped).")
    with st.expander("Gate preview and probe diagnostics"):
        show_figure(F.gate_preview(g), key="ts_gates")
        if current.fold_accuracy.shape[0] > 1:
            show_figure(F.probe_diagnostics(current), key="ts_diag")
        st.dataframe(current.to_frame().sort_values("rank").head(20).round(4), hide_index=True,
                     key="ts_table")


def lineage(maps: dict) -> None:
    """Section 2: correlation matrix and bars between maps, per-layer curves and a pair's scatter
    with its null."""
    if len(maps) < 2:
        st.info("Lineage views need at least two maps (the released maps, or score two models).")
        return
    stat = st.radio("Statistic", LINEAGE_STATS, horizontal=True, key="ts_stat")
    mat = correlation_matrix(maps, stat)
    c1, c2 = st.columns(2)
    with c1:
        show_figure(F.lineage_matrix(mat, statistic=stat), key="ts_matrix")
    with c2:
        ref = st.selectbox("Reference", list(maps), key="ts_ref")
        clip = st.checkbox("Clip negatives at 0 (repo display option)", key="ts_clip")
        show_figure(F.lineage_bars(mat.dropna(how="all"), ref, clip_negative=clip), key="ts_bars")
    same_shape = [(a, b) for a, b in RELEASED_PAIRS if a in maps and b in maps]
    same_shape += [(a, b) for i, a in enumerate(maps) for b in list(maps)[i + 1:]
                   if a.startswith("model:") and maps[a].scores.shape == maps[b].scores.shape]
    if not same_shape:
        return
    curves = {f"{a}↔{b}": per_layer_correlation(maps[a], maps[b]) for a, b in same_shape}
    show_figure(F.per_layer_curves(curves), key="ts_perlayer")
    pair = st.selectbox("Pair", same_shape, format_func=lambda p: f"{p[0]} ↔ {p[1]}", key="ts_pair")
    a, b = maps[pair[0]], maps[pair[1]]
    st_ = lineage_correlation(a, b, n_permutations=500, return_null=True)
    c1, c2 = st.columns(2)
    with c1:
        show_figure(F.pair_scatter(a, b, name_a=pair[0], name_b=pair[1], stats=st_),
                    key="ts_scatter")
    with c2:
        show_figure(F.null_histogram(st_["null"], st_["pearson"], st_["perm_p"]), key="ts_null")
    st.dataframe(pd.DataFrame([{k: v for k, v in st_.items() if k != "null"}]).round(4),
                 hide_index=True, key="ts_pairstats")


def evidence(current, em_cur) -> None:
    """Section 3: attention mass onto the evidence tokens against each head's score."""
    if current is None or em_cur is None:
        st.info("Evidence attention (mass from the scored token onto e_q and v_ctx in the context) "
                "needs a model scored on CtxMem above.")
        return
    groups, rho = evidence_summary(current, em_cur)
    c1, c2 = st.columns(2)
    with c1:
        show_figure(F.evidence_scatter(current, em_cur, rho=rho), key="ts_evidence")
    with c2:
        show_figure(F.evidence_group_bars(groups), key="ts_evgroups")


def gating_section(picked, organism: bool, current, source: str) -> None:
    """Section 4: the loaded model gated by its own map (the real-model protocol on world facts; an
    organism: CtxMem, toy-chat with toy-base's map as in the paper), as a job; or a saved sweep,
    labelled with the model it gated; and on an organism scored above, a quick live sweep."""
    name = picked.name
    gate_on = ({} if name == "zoo:toy-chat" else {"score_source": "self"} if organism
               else known_facts_setting(name))
    saved, _, _ = loaded_model_job(
        "truth-gating-sweep", "sweep" if organism else "facts_gating", "ts_sweep", picked=picked,
        model=picked.load(stop=False), label="Run the gating sweep", saved_key="ts_sweep_run",
        settings=model_settings("truth-gating-sweep", picked, "target", **gate_on))
    if saved is not None and hasattr(saved, "table"):
        show_figure(F.gating_sweep(saved.table), key="ts_sweep")
        st.dataframe(saved.table.round(4), hide_index=True, key="ts_sweep_table")
    elif saved is not None:
        # world facts: the gate chosen on tune facts, read on eval facts and shuffled maps
        st.caption(f"{saved.score_source} map gating {saved.model}: {saved.mode} α "
                   f"{saved.alpha:g} chosen on the tune facts; p = {saved.p:.3f} against "
                   f"{len(saved.null)} within-layer shuffled maps.")
        st.dataframe(saved.eval.round(4), hide_index=True, key="ts_sweep_eval")
        st.dataframe(saved.tune.round(4), hide_index=True, key="ts_sweep_tune")
    if current is None or source != CTXMEM or not organism:   # CtxMem prompts: organisms only
        return
    with st.expander("Quick live sweep on this model (its own scores)"):
        n_eval = st.number_input("counterfactual prompts", 8, 512, 64, step=8, key="ts_sweep_n")
        if st.button("Run quick sweep", key="ts_sweep_go"):
            from interplab.probes.truth import ctxmem_counterfactual_set

            m = picked.load()
            evals = ctxmem_counterfactual_set(int(n_eval),
                                              fmt=st.session_state.get("ts_fmt", "raw"))
            bar = st.progress(0.0)
            df = gating_sweep(m, evals, current, alphas=(0.0, 0.5, 2.0, 6.0),
                              score_source="self", progress=lambda d, t: bar.progress(d / t))
            show_figure(F.gating_sweep(df), key="ts_live_sweep")


def try_gating(picked, all_maps: dict) -> None:
    """Section 5: generate with and without gating. Gates are per (layer, head) of the model that
    generates: only maps of that shape are offered, and the page says which were left out and why
    (a 32 x 32 released map cannot gate a 4-layer, 4-head organism)."""
    model, name = picked.load(stop=False), picked.name
    if model is None:
        st.info("Load a model in the sidebar to generate with gating.")
        return
    want = (model.n_layers, model.n_heads)
    fits = {k: v for k, v in all_maps.items() if tuple(v.scores.shape) == want}
    left_out = sorted({f"{tuple(v.scores.shape)[0]}×{tuple(v.scores.shape)[1]}"
                       for k, v in all_maps.items() if k not in fits})
    if left_out:
        st.caption(f"`{name}` has {want[0]} layers × {want[1]} heads, so only "
                   f"{want[0]}×{want[1]} score maps can gate it; maps of shape "
                   f"{', '.join(left_out)} are not offered.")
    if not fits:
        st.info(f"No score map fits `{name}` yet: choose *Score a model (CtxMem)* in section 1 and "
                "press *Compute Truth Scores* to score it, then come back here.")
        return
    t_map = st.selectbox("Score map", list(fits), index=len(fits) - 1, key="ts_try_map")
    prompt = st.text_area("Prompt", "ctx e1 v5 e7 v2 e3 v9 q e7 ans", key="ts_prompt")
    c1, c2, c3, c4, c5 = st.columns(5)
    t_mode = c1.selectbox("mode", ["contrast", "normalize"], key="ts_try_mode")
    t_alpha = c2.number_input("α", 0.0, 20.0, 2.0, step=0.1, key="ts_try_alpha")
    t_site = c3.selectbox("site", list(GATE_SITES), key="ts_try_site")
    t_new = c4.number_input("new tokens", 1, 64, 4, key="ts_try_new")
    t_rebase = c5.selectbox("rebase", list(GATE_REBASES), key="ts_try_rebase")
    if not st.button("Generate", key="ts_try_go"):
        return
    try:
        g = truth_gates(fits[t_map], t_mode, t_alpha, n_layers=want[0], n_heads=want[1],
                        rebase=t_rebase)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            gate = HeadGate(g, site=t_site)
        plain = model.generate(prompt, max_new_tokens=int(t_new))
        gated = model.generate(prompt, max_new_tokens=int(t_new), edits=[gate])
        a, b = st.columns(2)
        a.markdown("**Without gating**")
        a.code(plain.text[0] or "(empty)")
        b.markdown(f"**With gating** ({t_map}, {t_mode}, α={t_alpha:g}, site {t_site})")
        b.code(gated.text[0] or "(empty)")
        st.caption(f"gates min {g.min():.3f}, max {g.max():.3f}; site {t_site}")
    except InterplabError as e:
        st.error(f"{e}")


def validation() -> None:
    """Section 6: a saved `validate-truth-scores` run's recovery of the planted heads and its
    control."""
    val = saved_result("validate-truth-scores", "validation", "ts_val_run",
                       label="Saved validation run")
    if val is None:
        return
    st.dataframe(val.recovery_table().round(4), hide_index=True, key="ts_val_table")
    (st.success if val.passed() else st.error)("every target met on every seed" if val.passed()
                                               else "some target missed: see the table")
    c1, c2 = st.columns(2)
    with c1:
        show_figure(F.planted_recovery_bars(val.base, val.planted_heads, title="Planted organism"),
                    key="ts_val_base")
    with c2:
        show_figure(F.planted_recovery_bars(val.shuffled, val.planted_heads,
                                            title="Control: shuffled labels"),
                    key="ts_val_shuffled")


def world_facts(picked, organism: bool, scored: dict) -> None:
    """Section 7: the world-facts map of the loaded model as a job, or a saved one (an organism:
    saved runs only, each labelled with its model); the loaded model's map then feeds sections
    1-5."""
    name = picked.name
    settings = None
    if not organism:
        settings = model_settings("truth-scores", picked,
                                  **({"data": "world-facts"} | known_facts_setting(name)))
    facts, facts_model, _ = loaded_model_job(
        "truth-scores", "facts_map", "ts_facts", picked=picked,
        model=None if organism else picked.load(stop=False), settings=settings,
        label="Compute the world-facts map", saved_label="Saved world-facts run",
        saved_key="ts_facts_run", launch=not organism)
    if facts is not None and not organism and facts_model == name and name not in scored:
        scored[name] = (facts.scores, None)
        st.rerun()
    if facts is not None:
        facts_view(facts)


def facts_view(facts) -> None:
    summ, top = facts.summary(), facts.top_head()
    c1, c2, c3, c4 = st.columns(4)
    c1.metric("facts / texts", f"{summ['n_facts']} / {summ['n_texts']}")
    c2.metric("significant heads (maxT)", f"{summ['n_sig_maxt']} / {summ['n_heads']}")
    c3.metric("significant heads (BH)", summ["n_sig_bh"])
    c4.metric(f"top head L{top['layer']}H{top['head']}", f"{top['S']:.3f}",
              help=f"95% interval {top['lo']:.3f}-{top['hi']:.3f} over {top['n']} "
                   + ("facts (bootstrap, the fact is the unit)" if top.get("unit") == "fact" else
                      "held-out texts (Wilson; this run predates fact-level intervals)"))
    if facts.has_balanced():   # runs since issue 46: the balanced metric beside S
        eff, best = summ["effects"], summ["best_held_out"]
        c1, c2, c3, c4 = st.columns(4)
        c1.metric("S's chance level (majority rate)", f"{summ['majority_rate']:.3f}",
                  help="S is accuracy at the data's class ratio: always answering 'wrong' scores "
                       "this")
        c2.metric("mean AUROC (chance 0.5)", f"{summ['mean_auroc']:.3f}")
        c3.metric("significant on AUROC (maxT)", f"{summ['n_sig_maxt_auroc']} / {summ['n_heads']}",
                  help=f"{eff['auroc']['n_sig_auroc_lo_margin']} of them with a fact-bootstrap "
                       f"lower bound ≥ {0.5 + eff['auroc']['auroc_margin']:.2f}; on S "
                       f"{eff['S']['n_sig']} significant, {eff['S']['n_sig_S_margin']} ≥ "
                       f"majority + {eff['S']['S_margin']:.2f}")
        c4.metric(f"best head, held out: L{best['layer']}H{best['head']}", f"{best['value']:.3f}",
                  help=f"AUROC on {best['n_score']} facts it was not chosen on, 95% interval "
                       f"{best['lo']:.3f}-{best['hi']:.3f}")
    st.caption(f"{facts.model}: null maps {summ['n_null']} (their best head's S, median "
               f"{summ['null_max_median']:.3f}; a head must beat "
               f"{summ['null_max_threshold']:.3f}); fold-seed stability: r ≥ "
               f"{summ['stability']['r_min']:.3f}.")
    c1, c2 = st.columns(2)
    with c1:
        show_figure(F.score_heatmap(facts.scores,
                                    title=f"Truth Scores on world facts: {facts.model}"),
                    key="ts_facts_heatmap")
    with c2:
        show_figure(F.significant_heads_per_layer(facts.per_layer()), key="ts_facts_layers")
    c1, c2 = st.columns(2)
    with c1:
        null_best = facts.null_maps.reshape(facts.n_null, -1).max(1)
        show_figure(F.null_histogram(null_best, top["S"], top["p_maxt"],
                                     statistic="max S over heads",
                                     title="Label-permutation null: each null map's best head"),
                    key="ts_facts_null")
    with c2:
        show_figure(F.evidence_scatter(facts.scores, facts.evidence_mass,
                                       rho=facts.rho_evidence()), key="ts_facts_evidence")
    sig = facts.to_frame()
    st.dataframe(sig[sig["sig_maxt"]].sort_values("score", ascending=False).round(4),
                 hide_index=True, key="ts_facts_table")


def facts_gating() -> None:
    """Section 8: a saved world-facts gating run: the chosen gate, its tune/eval/fluency tables and
    its null."""
    fg = saved_result("truth-gating-sweep", "facts_gating", "ts_fg_run",
                      label="Saved world-facts gating run",
                      hint=" --set target=real:smollm2-135m-instruct")
    if fg is None:
        return
    summ = fg.summary()
    c1, c2, c3 = st.columns(3)
    c1.metric("map → gated model", f"{fg.score_source} → {fg.model}")
    c2.metric("chosen on the tune split",
              f"{fg.mode} α {fg.alpha:g}" if fg.gated else "nothing eligible")
    if fg.gated:
        c3.metric("p against shuffled maps", f"{fg.p:.3f}",
                  help=f"{summ['n_maps']} within-layer shuffles")
        if fg.choice.get("within_noise"):
            st.warning(f"On the tune split the chosen gate is within noise of no gate "
                       f"({fg.choice['diff']:+.3f} [{fg.choice['lo']:+.3f}, "
                       f"{fg.choice['hi']:+.3f}]): the choice is nominal.")
    st.dataframe(fg.tune.round(4), hide_index=True, key="ts_fg_tune")
    st.dataframe(fg.eval.round(4), hide_index=True, key="ts_fg_eval")
    st.dataframe(fg.fluency.round(4), hide_index=True, key="ts_fg_fluency")
    if fg.gated:
        g = fg.eval[fg.eval["readout"] == "forced_choice"].set_index("condition")["rate"]
        show_figure(F.null_histogram(fg.null, float(g["gated"]), fg.p,
                                     statistic="context rate (forced choice)",
                                     title="Gated vs within-layer shuffled maps (eval split)"),
                    key="ts_fg_null")
