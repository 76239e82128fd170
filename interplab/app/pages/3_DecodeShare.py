"""DecodeShare page: the task-shared subspace of decode-time states, decode-only projection and its controls.

A thin view over `interplab.probes.decodeshare` and `interplab.interventions.projection` (the same calls a script
makes); the sections live in interplab.app.views.decodeshare."""
from __future__ import annotations

import streamlit as st

st.set_page_config(page_title="interplab · DecodeShare", page_icon=":microscope:", layout="wide")

from interplab.app.data_box import your_data  # noqa: E402
from interplab.app.model_jobs import is_organism  # noqa: E402
from interplab.app.views import decodeshare as V  # noqa: E402
from interplab.app.widgets import page_model  # noqa: E402
from interplab.core.errors import InterplabError  # noqa: E402
from interplab.probes.decodeshare import estimate_subspaces, resolve_format  # noqa: E402

st.title("DecodeShare")
st.caption("Residual states at generated tokens (KV-cached decode steps) share a small subspace across tasks "
           "(one pooled PCA + a per-task count of variance shares >= tau). Remove it on decode steps only and "
           "compare with prefill-estimated, random and budget-matched controls. Method: Shao et al., ICML 2026; "
           "docs: docs/decodeshare.md. Defaults are the `decodeshare` experiment's (middle layer, paper mode, "
           "tau x k = 1).")

picked = page_model("ds", page="decodeshare", suggested="toy-chat", fits=lambda n: n.startswith("toy-"))
organism = is_organism(picked)           # the organisms' toy tasks; any other model runs the built-in chat tasks

with st.expander("Validation: a planted shared decode-time subspace (`validate-decodeshare`)"):
    # saved runs only, so this shows whatever model is picked below (the organism is built by the experiment)
    st.caption("An organism built by construction (zoo.validation.decodeshare) plants a 2-dim shared decode-time "
               "subspace below the top variance directions; the experiment runs the unchanged estimator and "
               "decode-only removal against alpha-/k-/energy-matched-Haar/top-variance controls and the "
               "prefill-estimated subspace (negative control).")
    V.validation()

with st.expander("On a real model: built-in chat tasks (`data=real-tasks`)", expanded=not organism):
    st.caption("Eight chat tasks built offline from public facts and word lists (capital, language, mc_capital, "
               "first_letter, plural, antonym, yes_no, addition; interplab.data.decode_tasks), replies parsed for "
               "the answer they name. `decodeshare-tasks` screens which the model answers; the study runs on those "
               "at >= 60 %. The screen: `interplab run decodeshare-tasks --set model=...` (docs/decodeshare.md, "
               "*On a real model*).")
    V.real_model(picked, organism)

your_data("decodeshare", key="ds_data", overrides={"model": picked.name, "backend": picked.backend,
                                                    "parts": "table"})

model = picked.load()
vocab = model.tokenizer.get_vocab()
if not all(w in vocab for w in ("sep", "copy", "s0")):
    st.info("The interactive sections below need a multitask-decode organism (`zoo:toy-chat` or "
            "`zoo:toy-base`): their prompts use the toy vocabulary (`copy s3 s1 sep`), which "
            f"`{picked.name}` does not have. On it, run the built-in chat tasks in *On a real "
            "model* above, or your own tasks from a file (task, prompt, answer) in *Your data* "
            "above.")
    st.stop()

s = V.sidebar_settings(model)
if len(s.tasks) < 2:
    st.info("Pick at least two tasks.")
    st.stop()
fmt_used = resolve_format(picked.name, s.fmt)
try:
    calib = V.states(model, key=picked.key, layer=s.layer, tasks=s.tasks, n_calib=s.n_calib,
                     max_new=s.max_new, fmt=fmt_used)
    est = estimate_subspaces(calib, rho=s.rho, tau=s.tau, tau_k=s.tau_k, m=s.m, mode=s.mode)
except InterplabError as e:
    st.error(str(e))
    st.stop()

st.subheader("Shared decode subspace")
V.subspace(calib, est, s, fmt_used)

st.subheader("Generation with and without the projection")
V.generation(model, est.decode, s, fmt_used)

st.subheader("Ablation and controls")
st.caption("Baseline vs shared-removed vs prefill-estimated vs Haar-random vs variance-matched vs alpha-/k-matched "
           "energy controls, forced choice and generation, 95% bootstrap CIs; the estimator x locus grid; the alpha "
           "sweep. Larger runs: `interplab run decodeshare --set model=...`.")
n_eval = V.ablation(picked, model, est.decode, s, fmt_used)

st.subheader("Patchback")
st.caption("On the examples the decode-only removal of the shared subspace flips (baseline correct, ablated "
           "wrong), patch the removed component back from a donor on the chosen decode-step windows: same example "
           "(identity check), a transfer donor (another baseline-correct example of the task), and the same-example "
           "donor through the variance-matched non-shared and Haar bases. Rescue rate = fraction of flips undone, "
           "95% bootstrap CIs (the `decodeshare` experiment's `patchback` part).")
V.patchback(picked, model, calib, est, s, fmt_used, n_eval)
