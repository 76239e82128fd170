"""DecodeShare page: the task-shared subspace of decode-time states, decode-only projection and its controls.

A thin view over `interplab.probes.decodeshare` and `interplab.interventions.projection` (the same calls a script
makes)."""
from __future__ import annotations

import pandas as pd
import streamlit as st

st.set_page_config(page_title="interplab · DecodeShare", page_icon=":microscope:", layout="wide")

from interplab.app.model_jobs import is_organism, loaded_model_job, model_settings  # noqa: E402
from interplab.app.widgets import (  # noqa: E402
    page_model, parse_list, saved_result, show_figure, validity_panel,
)
from interplab.core.errors import InterplabError  # noqa: E402
from interplab.figures.decodeshare import (  # noqa: E402
    ablation_figure, alpha_sweep_figure, h3_grid_figure, principal_angle_figure, sensitivity_figure,
    variance_share_heatmap,
)
from interplab.interventions.projection import SubspaceProjection  # noqa: E402
from interplab.probes.decodeshare import (  # noqa: E402
    ALL_TASKS, DecodeShareConfig, calibration_states, estimate_subspaces, multitask_sets, patchback_bases,
    resolve_format, run_study, sensitivity_sweep, study_patchback,
)
from interplab.probes.decodeshare.verdicts import study_verdicts  # noqa: E402
from interplab.probes.validity import ValidityReport  # noqa: E402

st.title("DecodeShare")
st.caption("Residual states at generated tokens (KV-cached decode steps) share a small subspace across tasks "
           "(one pooled PCA + a per-task count of variance shares >= tau). Remove it on decode steps only and "
           "compare with prefill-estimated, random and budget-matched controls. Method: Shao et al., ICML 2026; "
           "docs: docs/decodeshare.md. Defaults are the `decodeshare` experiment's (middle layer, paper mode, "
           "tau x k = 1).")

picked = page_model("ds", page="decodeshare", suggested="toy-chat", fits=lambda n: n.startswith("toy-"))
name, backend, device, dtype = picked.name, picked.backend, picked.device, picked.dtype
organism = is_organism(picked)           # the organisms' toy tasks; any other model runs the built-in chat tasks

with st.expander("Validation: a planted shared decode-time subspace (`validate-decodeshare`)"):
    # saved runs only, so this shows whatever model is picked below (the organism is built by the experiment)
    st.caption("An organism built by construction (zoo.validation.decodeshare) plants a 2-dim shared decode-time "
               "subspace below the top variance directions; the experiment runs the unchanged estimator and "
               "decode-only removal against alpha-/k-/energy-matched-Haar/top-variance controls and the "
               "prefill-estimated subspace (negative control).")
    from interplab.figures.decodeshare import validation_bars

    val = saved_result("validate-decodeshare", "validation", "ds_val_run", label="Saved validation run",
                       hint=" (about 30 s on CPU)")
    if val is not None:
        st.dataframe(val.recovery_table(), hide_index=True, key="ds_val_table")
        show_figure(validation_bars(val.per_seed), key="ds_val_bars")

with st.expander("On a real model: built-in chat tasks (`data=real-tasks`)", expanded=not organism):
    # the loaded real model's study as a job (tens of CPU minutes), or a saved run labelled with its model
    st.caption("Eight chat tasks built offline from public facts and word lists (capital, language, mc_capital, "
               "first_letter, plural, antonym, yes_no, addition; interplab.data.decode_tasks), replies parsed for "
               "the answer they name. `decodeshare-tasks` screens which the model answers; the study runs on those "
               "at >= 60 %. The screen: `interplab run decodeshare-tasks --set model=...` (docs/decodeshare.md, "
               "*On a real model*).")
    from interplab.figures.decodeshare import steering_figure

    screen = saved_result("decodeshare-tasks", "screen", "ds_real_screen", label="Saved task screen",
                          hint=" --set model=real:smollm2-135m-instruct", loaded=name)
    if screen is not None:
        st.dataframe(screen.table[["task", "metric", "acc", "lo", "hi", "n", "passes"]].round(3), hide_index=True,
                     key="ds_real_screen_table")
    if organism:
        real_study = saved_result("decodeshare", "study", "ds_real_study", label="Saved study", loaded=name)
    else:
        real_study, _, _ = loaded_model_job("decodeshare", "study", "ds_real", picked=picked,
                                            model=picked.load(stop=False), settings=model_settings(
                                                "decodeshare", picked, data="real-tasks"),
                                            label="Run the DecodeShare study", saved_label="Saved study",
                                            saved_key="ds_real_study")
    if real_study is not None:
        inf = real_study.info
        c = st.columns(4)
        c[0].metric("layer", inf["layer"])
        c[1].metric("|S| decode / k", f"{inf['k_s']} / {inf['k']}")
        c[2].metric("|S| prefill", inf["k_s_prefill"])
        c[3].metric("p (permutation null)", f"{inf['p_perm']:.3g}")
        real_metrics = list(real_study.config.metrics)
        if real_study.table is not None:
            cols = st.columns(len(real_metrics))
            for col, m in zip(cols, real_metrics):
                with col:
                    show_figure(ablation_figure(real_study.table, metric=m, title={
                        "gen": "Generation (exact match)", "fc": "Forced choice"}[m]), key=f"ds_real_{m}")
            st.caption("Shared removal minus each control at alpha = 1, paired over the same examples (all tasks "
                       "pooled):")
            st.dataframe(real_study.shared_vs_controls.round(3), hide_index=True, key="ds_real_vs")
        if real_study.sweep_controls is not None:
            st.caption("The matched-energy alpha sweep: at each strength of the shared removal, the alpha- and "
                       "k-matched controls asked to remove the same energy (target) and what they achieve; a "
                       "control off its target (±10 %) or needing alpha_C > 1 (a reflection) is not evaluated. "
                       "The verdicts above read every alpha evaluated, Holm-corrected.")
            show_figure(alpha_sweep_figure(real_study.alpha_sweep, metric=real_metrics[-1]), key="ds_real_sweep")
            st.dataframe(real_study.sweep_controls.drop(columns=["note"]).round(3), hide_index=True,
                         key="ds_real_sweep_controls")
        if real_study.steering is not None:
            si = real_study.steering.info
            var = (f", drawn with the decode states' covariance: {si['sh_v_var_mean']:.3f}, p "
                   f"{si['p_sh_v_vs_var']:.2g}" if "sh_v_var_mean" in si else "")
            st.caption(f"Steering {si['from']} -> {si['to']}: share of the task vector in the shared subspace "
                       f"{si['sh_v']:.3f} (random subspaces of the same size: Haar {si['sh_v_haar_mean']:.3f}"
                       f"{var}).")
            show_figure(steering_figure(real_study.steering.table), key="ds_real_steer")


with st.expander("Your data (CSV / JSONL / Parquet file)"):
    from interplab.app.data_box import data_box, run_with_data  # noqa: E402

    run_with_data("decodeshare", data_box("decodeshare", key="ds_data"), key="ds_data",
                  overrides={"model": name, "backend": backend, "parts": "table"})

model = picked.load()
model_key = picked.key

vocab = model.tokenizer.get_vocab()
if not all(w in vocab for w in ("sep", "copy", "s0")):
    st.info("The interactive sections below need a multitask-decode organism (`zoo:toy-chat` or `zoo:toy-base`): "
            f"their prompts use the toy vocabulary (`copy s3 s1 sep`), which `{name}` does not have. On it, run "
            "the built-in chat tasks in *On a real model* above, or your own tasks from a file (task, prompt, "
            "answer) in *Your data* above.")
    st.stop()

with st.sidebar:
    st.subheader("DecodeShare")
    layer = int(st.number_input("Layer (resid_post)", 0, model.n_layers - 1, model.n_layers // 2, key="ds_layer"))
    tasks = st.multiselect("Tasks", list(ALL_TASKS), default=list(ALL_TASKS), key="ds_tasks")
    fmt = st.selectbox("Prompt format", ["auto", "raw", "chat"], key="ds_fmt")
    n_calib = int(st.slider("Calibration prompts per task", 4, 128, 32, key="ds_ncalib"))
    max_new = int(st.slider("Decode steps", 2, 32, 12, key="ds_maxnew"))
    mode = st.selectbox("Estimator", ["paper", "repo"], key="ds_mode",
                        help="paper = Algorithm 1 (raw, task-centred, balanced); repo = the reference code "
                             "(z-scored PCA, strict threshold, back-mapped columns)")
    rho = float(st.slider("rho (kept variance)", 0.5, 0.999, 0.95, key="ds_rho"))
    # tau x k = 1 by default (as the `decodeshare` experiment): the literal tau = 1e-3 marks every component of a
    # toy model as shared (|S| = k), which leaves the non-shared controls nothing to sample from.
    thr = st.radio("Threshold", ["tau", "tau x k"], index=1, horizontal=True, key="ds_thr",
                   help="tau x k: the paper's dimensionless threshold (tau = 1e-3 at k ~ 3000 is ~3); at toy scale "
                        "tau = 1e-3 counts nearly every component as used by every task")
    if thr == "tau":
        tau = float(st.select_slider("tau", [1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1], 1e-3, key="ds_tau"))
        tau_k = None
    else:
        tau = 1e-3
        tau_k = float(st.slider("tau x k", 0.1, 5.0, 1.0, key="ds_tauk"))
    m_all = st.checkbox("m = all tasks", True, key="ds_mall")
    m = None if m_all else int(st.number_input("m", 1, max(1, len(tasks)), max(1, len(tasks) - 1), key="ds_m"))

if len(tasks) < 2:
    st.info("Pick at least two tasks.")
    st.stop()
fmt_used = resolve_format(name, fmt)


@st.cache_data(max_entries=8, show_spinner="Generating and collecting decode/prefill states...")
def _states(key: tuple, layer: int, tasks: tuple, n_calib: int, max_new: int, fmt: str, _model=None):
    return calibration_states(_model, tasks, layer=layer, n_calib=n_calib, max_new_tokens=max_new, fmt=fmt)


try:
    calib = _states(model_key, layer, tuple(tasks), n_calib, max_new, fmt_used, _model=model)
    dec, pre = calib.decode, calib.prefill
    est = estimate_subspaces(calib, rho=rho, tau=tau, tau_k=tau_k, m=m, mode=mode)
    ss, ss_pre = est.decode, est.prefill
except InterplabError as e:
    st.error(str(e))
    st.stop()

st.subheader("Shared decode subspace")
c = st.columns(5)
c[0].metric("d_model", ss.d)
c[1].metric("k (pooled PCs)", ss.k)
c[2].metric("|S| decode", ss.k_s)
c[3].metric("|S| prefill", ss_pre.k_s)
c[4].metric("tau used", f"{ss.tau:.2g}")
st.caption(f"{sum(ss.n_rows.values())} decode states ({', '.join(f'{t}: {n}' for t, n in ss.n_rows.items())}) vs "
           f"{sum(len(v) for v in pre.values())} prefill states; format {fmt_used}; Lemma A.3 bound |S| <= "
           f"{ss.bound:.3g}.")
show_figure(variance_share_heatmap(ss), key="ds_shares")

left, right = st.columns(2)
with left:
    kw = dict(mode=mode, m=m)
    sweep = sensitivity_sweep(dec, rho=rho, tau=ss.tau, **kw)
    show_figure(sensitivity_figure(sweep, title="|S| and k vs tau and rho"), key="ds_sens")
with right:
    angles = est.angles()
    if any(len(a) for a in angles.values()):
        show_figure(principal_angle_figure(angles, title="Principal angles: decode vs prefill shared subspaces"),
                    key="ds_angles")
    else:
        st.info("One of the shared sets is empty, so there are no principal angles to show.")

st.subheader("Generation with and without the projection")
if ss.k_s == 0:
    st.info("|S| = 0 at these settings; lower tau (or tau x k) or m to get a basis to remove.")
else:
    evals = multitask_sets(model, list(tasks), 8, seed=1, split="test", fmt=fmt_used)
    g1, g2, g3 = st.columns([1, 1, 1])
    task = g1.selectbox("Task", list(tasks), key="ds_gen_task")
    idx = int(g2.number_input("Example", 0, 7, 0, key="ds_gen_idx"))
    alpha = float(g3.slider("alpha", 0.0, 2.0, 1.0, 0.25, key="ds_gen_alpha"))
    boundary = st.checkbox("Boundary variant (also edit the last prompt token)", False, key="ds_gen_boundary")
    s = evals[task]
    prompt = s.prompts[idx]
    tok = model.tokenizer
    edit = SubspaceProjection(layer, ss.basis, alpha, boundary=boundary)
    base = model.generate([prompt], max_new_tokens=max_new + 4)
    edited = model.generate([prompt], max_new_tokens=max_new + 4, edits=[edit])
    st.markdown(f"**Prompt:** `{tok.decode(prompt)}`  \n**Answer:** `{tok.decode(s.answers[idx])}`")
    a, b = st.columns(2)
    a.markdown("**Baseline**")
    a.code(tok.decode(base.new_tokens[0]))
    b.markdown(f"**Shared subspace removed (k = {ss.k_s}, alpha = {alpha}, {edit.n_edited} positions edited)**")
    b.code(tok.decode(edited.new_tokens[0]))

st.subheader("Ablation and controls")
st.caption("Baseline vs shared-removed vs prefill-estimated vs Haar-random vs variance-matched vs alpha-/k-matched "
           "energy controls, forced choice and generation, 95% bootstrap CIs; the estimator x locus grid; the alpha "
           "sweep. Larger runs: `interplab run decodeshare --set model=...`.")
e1, e2, e3 = st.columns(3)
n_eval = int(e1.slider("Eval examples per task", 4, 64, 12, key="ds_neval"))
alphas = e2.text_input("alphas", "0,0.5,1,1.5", key="ds_alphas")
parts = e3.multiselect("Sections", ["table", "h3", "alpha"], default=["table"], key="ds_parts")
if st.button("Run ablation", key="ds_run", disabled=ss.k_s == 0 or not parts):
    bar = st.progress(0.0, text="starting")
    steps = {"n": 0}

    def _progress(msg: str):
        steps["n"] += 1
        bar.progress(min(0.99, steps["n"] / 30), text=msg)

    try:
        cfg = DecodeShareConfig(model=name, backend=backend, dtype=dtype, format=fmt_used, tasks=list(tasks),
                                layer=layer, n_calib=n_calib, n_eval=n_eval, calib_max_new_tokens=max_new,
                                eval_max_new_tokens=max_new + 2, rho=rho, tau=tau, tau_k=tau_k or 0.0,
                                m=m or 0, mode=mode, null_perm_B=200, null_rot_B=0,
                                alphas=parse_list(alphas, "alphas"), n_boot=500,
                                parts=list(parts))
        st.session_state["ds_result"] = (model_key, run_study(model, cfg, progress=_progress))
    except InterplabError as e:
        st.error(str(e))
    bar.empty()

res = st.session_state.get("ds_result")
if res is not None and res[0] == model_key:
    out = res[1]
    if out.error:
        st.warning(out.error)
    # what this run's numbers can support, with each failed check as a warning (the saved runs show the same)
    validity_panel(ValidityReport.of(study_verdicts(out)), key="ds_live_validity")
    metric = st.radio("Metric", ["gen", "fc"], horizontal=True, key="ds_metric",
                      format_func=lambda x: {"gen": "generation exact match", "fc": "forced choice"}[x])
    if out.table is not None:
        show_figure(ablation_figure(out.table, metric=metric), key="ds_ablation")
        cond = pd.DataFrame([{"condition": k, **v} for k, v in out.info.get("conditions", {}).items()])
        st.dataframe(cond, hide_index=True, key="ds_conditions")
    if out.h3 is not None:
        show_figure(h3_grid_figure(out.h3, metric=metric), key="ds_h3")
    if out.alpha_sweep is not None:
        show_figure(alpha_sweep_figure(out.alpha_sweep, metric=metric), key="ds_alpha")
        st.dataframe(out.sweep_controls.drop(columns=["note"]).round(3), hide_index=True, key="ds_sweep_controls")

st.subheader("Patchback")
st.caption("On the examples the decode-only removal of the shared subspace flips (baseline correct, ablated "
           "wrong), patch the removed component back from a donor on the chosen decode-step windows: same example "
           "(identity check), a transfer donor (another baseline-correct example of the task), and the same-example "
           "donor through the variance-matched non-shared and Haar bases. Rescue rate = fraction of flips undone, "
           "95% bootstrap CIs (the `decodeshare` experiment's `patchback` part).")
p1, p2, p3 = st.columns(3)
pb_windows = p1.multiselect("Decode-step windows", ["0", "0,1", "all"], default=["0", "all"], key="ds_pb_windows")
pb_extra = p2.text_input("Extra window (decode steps, e.g. 1,2)", "", key="ds_pb_extra")
pb_controls = p3.checkbox("Non-shared and Haar controls", True, key="ds_pb_controls")
if st.button("Run patchback", key="ds_pb_run", disabled=ss.k_s == 0):
    windows = list(pb_windows) + ([pb_extra.strip()] if pb_extra.strip() else [])
    pb_bar = st.progress(0.0, text="starting")
    pb_steps = {"n": 0}

    def _pb_progress(msg: str):
        pb_steps["n"] += 1
        pb_bar.progress(min(0.99, pb_steps["n"] / 12), text=msg)

    try:
        evals_pb = multitask_sets(model, list(tasks), n_eval, seed=1, split="test", fmt=fmt_used)
        bases = patchback_bases(ss, ss_pre, dec, controls=pb_controls, prefill_states=pre)
        pb = study_patchback(model, evals_pb, bases, layer=layer, windows=windows,
                             max_new_tokens=max_new + 2, seed=0, n_boot=500, progress=_pb_progress)
        st.session_state["ds_pb_result"] = (model_key, pb)
    except InterplabError as e:
        st.session_state.pop("ds_pb_result", None)
        st.error(f"Patchback failed: {e}")
    pb_bar.empty()

pb_res = st.session_state.get("ds_pb_result")
if pb_res is not None and pb_res[0] == model_key:
    pb = pb_res[1]
    from interplab.figures.decodeshare import patchback_figure

    info = pb.info
    st.caption(" · ".join(f"{k}: {v:.3g}" if isinstance(v, float) else f"{k}: {v}" for k, v in info.items()
                          if not isinstance(v, (dict, list, tuple)))[:600])
    if len(pb.table) and int(pb.table["n_flip"].max()) > 0:
        show_figure(patchback_figure(pb.table), key="ds_patchback")
    else:
        st.info("The removal flipped no example at these settings: nothing to rescue (more eval examples, a "
                "larger |S| or another layer).")
    st.dataframe(pb.table, hide_index=True, key="ds_pb_table")
