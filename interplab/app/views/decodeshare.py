"""The DecodeShare page's sections (pages/3_DecodeShare.py): validation and real-model runs, the
estimator's sidebar settings, the shared decode subspace, generation with the projection, ablation
and patchback. Widget keys start with `ds_`."""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import streamlit as st

from interplab.app.compute import cached_compute
from interplab.app.model_jobs import loaded_model_job, model_settings
from interplab.app.widgets import parse_list, saved_result, show_figure, validity_panel
from interplab.core.errors import InterplabError
from interplab.figures.decodeshare import (ablation_figure, alpha_sweep_figure, h3_grid_figure,
                                           principal_angle_figure, sensitivity_figure,
                                           variance_share_heatmap)
from interplab.interventions.projection import SubspaceProjection
from interplab.probes.decodeshare import (ALL_TASKS, DecodeShareConfig, calibration_states,
                                          multitask_sets, patchback_bases, run_study,
                                          sensitivity_sweep, study_patchback)

METRIC_TITLES = {"gen": "Generation (exact match)", "fc": "Forced choice"}
METRIC_NAMES = {"gen": "generation exact match", "fc": "forced choice"}


def validation() -> None:
    """A saved `validate-decodeshare` run (the organism is built by the experiment)."""
    from interplab.figures.decodeshare import validation_bars

    val = saved_result("validate-decodeshare", "validation", "ds_val_run",
                       label="Saved validation run", hint=" (about 30 s on CPU)")
    if val is not None:
        st.dataframe(val.recovery_table(), hide_index=True, key="ds_val_table")
        show_figure(validation_bars(val.per_seed), key="ds_val_bars")


def real_model(picked, organism: bool) -> None:
    """The task screen and the study on the built-in chat tasks: the loaded real model's as a job
    (tens of CPU minutes), or a saved run labelled with its model (an organism: saved runs only)."""
    from interplab.figures.decodeshare import steering_figure

    screen = saved_result("decodeshare-tasks", "screen", "ds_real_screen",
                          label="Saved task screen", hint=" --set model=real:smollm2-135m-instruct",
                          loaded=picked.name)
    if screen is not None:
        cols = ["task", "metric", "acc", "lo", "hi", "n", "passes"]
        st.dataframe(screen.table[cols].round(3), hide_index=True, key="ds_real_screen_table")
    study, _, _ = loaded_model_job(
        "decodeshare", "study", "ds_real", picked=picked,
        model=None if organism else picked.load(stop=False),
        settings=None if organism else model_settings("decodeshare", picked, data="real-tasks"),
        label="Run the DecodeShare study", saved_label="Saved study", saved_key="ds_real_study",
        launch=not organism)
    if study is None:
        return
    inf = study.info
    c = st.columns(4)
    c[0].metric("layer", inf["layer"])
    c[1].metric("|S| decode / k", f"{inf['k_s']} / {inf['k']}")
    c[2].metric("|S| prefill", inf["k_s_prefill"])
    c[3].metric("p (permutation null)", f"{inf['p_perm']:.3g}")
    metrics = list(study.config.metrics)
    if study.table is not None:
        for col, m in zip(st.columns(len(metrics)), metrics):
            with col:
                show_figure(ablation_figure(study.table, metric=m, title=METRIC_TITLES[m]),
                            key=f"ds_real_{m}")
        st.caption("Shared removal minus each control at alpha = 1, paired over the same examples "
                   "(all tasks pooled):")
        st.dataframe(study.shared_vs_controls.round(3), hide_index=True, key="ds_real_vs")
    if study.sweep_controls is not None:
        st.caption("The matched-energy alpha sweep: at each strength of the shared removal, the "
                   "alpha- and k-matched controls asked to remove the same energy (target) and "
                   "what they achieve; a control off its target (±10 %) or needing alpha_C > 1 (a "
                   "reflection) is not evaluated. The verdicts above read every alpha evaluated, "
                   "Holm-corrected.")
        show_figure(alpha_sweep_figure(study.alpha_sweep, metric=metrics[-1]), key="ds_real_sweep")
        st.dataframe(study.sweep_controls.drop(columns=["note"]).round(3), hide_index=True,
                     key="ds_real_sweep_controls")
    if study.steering is not None:
        si = study.steering.info
        var = (f", drawn with the decode states' covariance: {si['sh_v_var_mean']:.3f}, p "
               f"{si['p_sh_v_vs_var']:.2g}" if "sh_v_var_mean" in si else "")
        st.caption(f"Steering {si['from']} -> {si['to']}: share of the task vector in the shared "
                   f"subspace {si['sh_v']:.3f} (random subspaces of the same size: Haar "
                   f"{si['sh_v_haar_mean']:.3f}{var}).")
        show_figure(steering_figure(study.steering.table), key="ds_real_steer")


@dataclass(frozen=True)
class Settings:
    """The interactive sections' estimator settings (the sidebar's DecodeShare box)."""

    layer: int
    tasks: tuple
    fmt: str
    n_calib: int
    max_new: int
    mode: str
    rho: float
    tau: float
    tau_k: float | None
    m: int | None


def sidebar_settings(model) -> Settings:
    with st.sidebar:
        st.subheader("DecodeShare")
        layer = int(st.number_input("Layer (resid_post)", 0, model.n_layers - 1,
                                    model.n_layers // 2, key="ds_layer"))
        tasks = st.multiselect("Tasks", list(ALL_TASKS), default=list(ALL_TASKS), key="ds_tasks")
        fmt = st.selectbox("Prompt format", ["auto", "raw", "chat"], key="ds_fmt")
        n_calib = int(st.slider("Calibration prompts per task", 4, 128, 32, key="ds_ncalib"))
        max_new = int(st.slider("Decode steps", 2, 32, 12, key="ds_maxnew"))
        mode = st.selectbox("Estimator", ["paper", "repo"], key="ds_mode",
                            help="paper = Algorithm 1 (raw, task-centred, balanced); repo = the "
                                 "reference code (z-scored PCA, strict threshold, back-mapped "
                                 "columns)")
        rho = float(st.slider("rho (kept variance)", 0.5, 0.999, 0.95, key="ds_rho"))
        # tau x k = 1 by default (as the `decodeshare` experiment): the literal tau = 1e-3 marks
        # every component of a toy model as shared (|S| = k), which leaves the non-shared controls
        # nothing to sample from.
        thr = st.radio("Threshold", ["tau", "tau x k"], index=1, horizontal=True, key="ds_thr",
                       help="tau x k: the paper's dimensionless threshold (tau = 1e-3 at k ~ 3000 "
                            "is ~3); at toy scale tau = 1e-3 counts nearly every component as "
                            "used by every task")
        if thr == "tau":
            tau = float(st.select_slider("tau", [1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1], 1e-3,
                                         key="ds_tau"))
            tau_k = None
        else:
            tau = 1e-3
            tau_k = float(st.slider("tau x k", 0.1, 5.0, 1.0, key="ds_tauk"))
        m_all = st.checkbox("m = all tasks", True, key="ds_mall")
        m = None if m_all else int(st.number_input("m", 1, max(1, len(tasks)),
                                                   max(1, len(tasks) - 1), key="ds_m"))
    return Settings(layer, tuple(tasks), fmt, n_calib, max_new, mode, rho, tau, tau_k, m)


@cached_compute("Generating and collecting decode/prefill states...")
def states(model, *, layer: int, tasks: tuple, n_calib: int, max_new: int, fmt: str):
    return calibration_states(model, tasks, layer=layer, n_calib=n_calib, max_new_tokens=max_new,
                              fmt=fmt)


def subspace(calib, est, s: Settings, fmt_used: str) -> None:
    """The shared decode subspace: its size against prefill's, variance shares, sensitivity and
    angles."""
    ss, ss_pre, pre = est.decode, est.prefill, calib.prefill
    c = st.columns(5)
    c[0].metric("d_model", ss.d)
    c[1].metric("k (pooled PCs)", ss.k)
    c[2].metric("|S| decode", ss.k_s)
    c[3].metric("|S| prefill", ss_pre.k_s)
    c[4].metric("tau used", f"{ss.tau:.2g}")
    rows = ", ".join(f"{t}: {n}" for t, n in ss.n_rows.items())
    st.caption(f"{sum(ss.n_rows.values())} decode states ({rows}) vs "
               f"{sum(len(v) for v in pre.values())} prefill states; format {fmt_used}; Lemma A.3 "
               f"bound |S| <= {ss.bound:.3g}.")
    show_figure(variance_share_heatmap(ss), key="ds_shares")
    left, right = st.columns(2)
    with left:
        sweep = sensitivity_sweep(calib.decode, rho=s.rho, tau=ss.tau, mode=s.mode, m=s.m)
        show_figure(sensitivity_figure(sweep, title="|S| and k vs tau and rho"), key="ds_sens")
    with right:
        angles = est.angles()
        if any(len(a) for a in angles.values()):
            show_figure(principal_angle_figure(angles, title="Principal angles: decode vs prefill "
                                                             "shared subspaces"), key="ds_angles")
        else:
            st.info("One of the shared sets is empty, so there are no principal angles to show.")


def generation(model, ss, s: Settings, fmt_used: str) -> None:
    """One evaluation example generated with and without the decode-only projection."""
    if ss.k_s == 0:
        st.info("|S| = 0 at these settings; lower tau (or tau x k) or m to get a basis to remove.")
        return
    evals = multitask_sets(model, list(s.tasks), 8, seed=1, split="test", fmt=fmt_used)
    g1, g2, g3 = st.columns([1, 1, 1])
    task = g1.selectbox("Task", list(s.tasks), key="ds_gen_task")
    idx = int(g2.number_input("Example", 0, 7, 0, key="ds_gen_idx"))
    alpha = float(g3.slider("alpha", 0.0, 2.0, 1.0, 0.25, key="ds_gen_alpha"))
    boundary = st.checkbox("Boundary variant (also edit the last prompt token)", False,
                           key="ds_gen_boundary")
    ex = evals[task]
    prompt, tok = ex.prompts[idx], model.tokenizer
    edit = SubspaceProjection(s.layer, ss.basis, alpha, boundary=boundary)
    base = model.generate([prompt], max_new_tokens=s.max_new + 4)
    edited = model.generate([prompt], max_new_tokens=s.max_new + 4, edits=[edit])
    st.markdown(f"**Prompt:** `{tok.decode(prompt)}`  \n"
                f"**Answer:** `{tok.decode(ex.answers[idx])}`")
    a, b = st.columns(2)
    a.markdown("**Baseline**")
    a.code(tok.decode(base.new_tokens[0]))
    b.markdown(f"**Shared subspace removed (k = {ss.k_s}, alpha = {alpha}, {edit.n_edited} "
               "positions edited)**")
    b.code(tok.decode(edited.new_tokens[0]))


def _step_bar(steps: int):
    """A progress bar advanced one step per message (the studies report named stages, not
    fractions)."""
    bar, done = st.progress(0.0, text="starting"), {"n": 0}

    def advance(msg: str):
        done["n"] += 1
        bar.progress(min(0.99, done["n"] / steps), text=msg)

    return bar, advance


def ablation(picked, model, ss, s: Settings, fmt_used: str) -> int:
    """The ablation study on request, and its last result on this model. Returns the eval examples
    per task."""
    from interplab.probes.decodeshare.verdicts import study_verdicts
    from interplab.probes.validity import ValidityReport

    e1, e2, e3 = st.columns(3)
    n_eval = int(e1.slider("Eval examples per task", 4, 64, 12, key="ds_neval"))
    alphas = e2.text_input("alphas", "0,0.5,1,1.5", key="ds_alphas")
    parts = e3.multiselect("Sections", ["table", "h3", "alpha"], default=["table"], key="ds_parts")
    if st.button("Run ablation", key="ds_run", disabled=ss.k_s == 0 or not parts):
        bar, advance = _step_bar(30)
        try:
            cfg = DecodeShareConfig(
                model=picked.name, backend=picked.backend, dtype=picked.dtype, format=fmt_used,
                tasks=list(s.tasks), layer=s.layer, n_calib=s.n_calib, n_eval=n_eval,
                calib_max_new_tokens=s.max_new, eval_max_new_tokens=s.max_new + 2, rho=s.rho,
                tau=s.tau, tau_k=s.tau_k or 0.0, m=s.m or 0, mode=s.mode, null_perm_B=200,
                null_rot_B=0, alphas=parse_list(alphas, "alphas"), n_boot=500, parts=list(parts))
            st.session_state["ds_result"] = (picked.key, run_study(model, cfg, progress=advance))
        except InterplabError as e:
            st.error(str(e))
        bar.empty()
    res = st.session_state.get("ds_result")
    if res is None or res[0] != picked.key:
        return n_eval
    out = res[1]
    if out.error:
        st.warning(out.error)
    # what this run's numbers can support, with each failed check as a warning (the saved runs
    # show the same)
    validity_panel(ValidityReport.of(study_verdicts(out)), key="ds_live_validity")
    metric = st.radio("Metric", ["gen", "fc"], horizontal=True, key="ds_metric",
                      format_func=lambda x: METRIC_NAMES[x])
    if out.table is not None:
        show_figure(ablation_figure(out.table, metric=metric), key="ds_ablation")
        conditions = out.info.get("conditions", {}).items()
        cond = pd.DataFrame([{"condition": k, **v} for k, v in conditions])
        st.dataframe(cond, hide_index=True, key="ds_conditions")
    if out.h3 is not None:
        show_figure(h3_grid_figure(out.h3, metric=metric), key="ds_h3")
    if out.alpha_sweep is not None:
        show_figure(alpha_sweep_figure(out.alpha_sweep, metric=metric), key="ds_alpha")
        st.dataframe(out.sweep_controls.drop(columns=["note"]).round(3), hide_index=True,
                     key="ds_sweep_controls")
    return n_eval


def patchback(picked, model, calib, est, s: Settings, fmt_used: str, n_eval: int) -> None:
    """Patchback on request (the `decodeshare` experiment's `patchback` part), and its last result
    on this model."""
    ss = est.decode
    p1, p2, p3 = st.columns(3)
    pb_windows = p1.multiselect("Decode-step windows", ["0", "0,1", "all"], default=["0", "all"],
                                key="ds_pb_windows")
    pb_extra = p2.text_input("Extra window (decode steps, e.g. 1,2)", "", key="ds_pb_extra")
    pb_controls = p3.checkbox("Non-shared and Haar controls", True, key="ds_pb_controls")
    if st.button("Run patchback", key="ds_pb_run", disabled=ss.k_s == 0):
        windows = list(pb_windows) + ([pb_extra.strip()] if pb_extra.strip() else [])
        bar, advance = _step_bar(12)
        try:
            evals = multitask_sets(model, list(s.tasks), n_eval, seed=1, split="test",
                                   fmt=fmt_used)
            bases = patchback_bases(ss, est.prefill, calib.decode, controls=pb_controls,
                                    prefill_states=calib.prefill)
            pb = study_patchback(model, evals, bases, layer=s.layer, windows=windows,
                                 max_new_tokens=s.max_new + 2, seed=0, n_boot=500, progress=advance)
            st.session_state["ds_pb_result"] = (picked.key, pb)
        except InterplabError as e:
            st.session_state.pop("ds_pb_result", None)
            st.error(f"Patchback failed: {e}")
        bar.empty()
    res = st.session_state.get("ds_pb_result")
    if res is None or res[0] != picked.key:
        return
    from interplab.figures.decodeshare import patchback_figure

    pb = res[1]
    st.caption(" · ".join(f"{k}: {v:.3g}" if isinstance(v, float) else f"{k}: {v}"
                          for k, v in pb.info.items()
                          if not isinstance(v, (dict, list, tuple)))[:600])
    if len(pb.table) and int(pb.table["n_flip"].max()) > 0:
        show_figure(patchback_figure(pb.table), key="ds_patchback")
    else:
        st.info("The removal flipped no example at these settings: nothing to rescue (more eval "
                "examples, a larger |S| or another layer).")
    st.dataframe(pb.table, hide_index=True, key="ds_pb_table")
