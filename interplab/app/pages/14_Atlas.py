"""Atlas page: one model's methods and lenses on shared axes — Truth Scores, per-head patching and DLA on
layer x head; PR next to where patching matters on layers; SAE features, the decode-shared subspace and CRH axes
as directions — and how much they agree (interplab.probes.lenses.atlas; docs/lenses.md "Atlas")."""
from __future__ import annotations

import streamlit as st

st.set_page_config(page_title="interplab · Atlas", page_icon=":microscope:", layout="wide")

from interplab.app.compute import cached_compute  # noqa: E402
from interplab.app.model_jobs import SIZES, is_organism, model_settings  # noqa: E402
from interplab.app.widgets import job_panel, page_model, show_figure, validity_panel  # noqa: E402
from interplab.experiments.atlas import result_name  # noqa: E402
from interplab.core.errors import InterplabError  # noqa: E402
from interplab.methods import methods  # noqa: E402
from interplab.figures.atlas import (atlas_agreement_figure, atlas_head_map, atlas_layer_figure,  # noqa: E402
                                     atlas_overlap_figure)
from interplab.probes.lenses.atlas import HEAD_LABELS, AtlasConfig, atlas  # noqa: E402
from interplab.probes.lenses.atlas_validity import atlas_verdicts  # noqa: E402
from interplab.probes.validity import ValidityReport  # noqa: E402

st.title("Atlas")
st.caption("Where do the methods agree? Truth Scores, activation patching and direct logit attribution on the same "
           "layer x head axes; the participation ratio next to where patching matters; SAE features, the "
           "decode-shared subspace and CRH concept axes compared as directions. Methods that do not apply to a "
           "model say why.")

picked = page_model("at")
name = picked.name
VALIDATION = {m.name: f"validation: {m.validation_label}" for m in methods() if m.validation_organism}
target = st.radio("Atlas of", ["model", *VALIDATION], horizontal=True, key="at_target",
                  format_func=lambda k: f"the sidebar model ({name})" if k == "model" else VALIDATION[k],
                  help="The validation organisms have mechanisms planted by construction (interplab.zoo.validation): "
                       "the atlas should point at them.")


@cached_compute("Building the validation organism...", max_entries=8, resource=True)
def _organism(*, kind: str) -> str:
    from interplab.zoo.validation import validation_organism

    return str(validation_organism(kind))


@cached_compute("Running every method...")
def _atlas(model, ref, *, cfg: AtlasConfig):
    """The atlas of one (model, settings, reference): computed once per combination, not on every click."""
    return atlas(model, cfg, reference=ref)


# a validation organism is a second model, loaded as the sidebar's is (like the PR reference below)
on = picked if target == "model" else picked.like(_organism(kind=target))
model, model_key = on.load(), on.key
if st.session_state.get("at_model_key") != model_key:
    st.session_state["at_model_key"] = model_key
    st.session_state.pop("at_result", None)

with st.expander("Options (the defaults run in seconds on the toy organisms)"):
    c1, c2, c3, c4 = st.columns(4)
    with c1:
        n_items = st.number_input("Truth-Score items", 16, 2000, value=128, step=16, key="at_items")
        solver = st.selectbox("Probe solver", ["lbfgs", "adamw"], key="at_solver",
                              help="lbfgs: fast optimum of the same logistic loss; adamw: the authors' recipe (slow)")
    with c2:
        directions = st.checkbox("Direction methods", value=True, key="at_dirs",
                                 help="SAE features, decode-shared subspace, CRH axes")
        concept = st.selectbox("CRH concept", ["animal", "color", "food", "weather", "music", "place"],
                               key="at_concept")
    with c3:
        layer_opt = st.selectbox("Direction layer", ["auto"] + list(range(model.n_layers)), key="at_layer",
                                 help="resid_post.L read by the direction methods (auto: planted site, else the "
                                      "shipped SAE's layer, else the middle layer)")
    with c4:
        reference = st.text_input("PR reference model", value="", key="at_reference",
                                  help="optional: a second model (e.g. a hyperfitted descendant) whose per-layer PR "
                                       "minus this model's is shown; loading it takes extra time")

if target == "model" and not is_organism(picked):
    # a real model's atlas is minutes (results/atlas-smollm2: 426 s): the `atlas` experiment as a job
    run = job_panel("atlas", model_settings(
        "atlas", picked, field="models", n_truth_items=int(n_items), truth_solver=solver, concept=concept,
        directions=directions, direction_layer=-1 if layer_opt == "auto" else int(layer_opt),
        reference=reference.strip() or None, figure_formats=""), "at", model=model, model_key=model_key,
        label="Build atlas", button_key="at_run", size_fn=SIZES["atlas"])
    if run is not None:
        st.session_state["at_result"] = run.result(result_name(name))
elif st.button("Build atlas", key="at_run", type="primary"):
    try:
        ref, ref_key = None, None
        if reference.strip():
            ref_model = picked.like(reference.strip())
            ref, ref_key = ref_model.load(), ref_model.key
        cfg = AtlasConfig(n_truth_items=int(n_items), truth_solver=solver, concept=concept, directions=directions,
                          direction_layer=None if layer_opt == "auto" else int(layer_opt))
        st.session_state["at_result"] = _atlas(model, ref, key=(model_key, ref_key), cfg=cfg)
    except InterplabError as exc:
        st.error(f"Cannot build the atlas: {exc}")
if "at_result" not in st.session_state:
    st.info("Press **Build atlas**.")
    st.stop()

a = st.session_state["at_result"]
st.markdown(f"Pair: clean vs corrupt, metric logit(`{a.answer}`) − logit(`{a.wrong}`) · directions at `{a.site}` · "
            + " · ".join(f"{k} {v:.1f}s" for k, v in a.timings.items()))
for method, reason in a.unavailable.items():
    st.info(f"**{method}** not available: {reason}")

if len(a.planted):
    st.subheader("Planted truth")
    ok = bool(a.planted["passed"].all())
    (st.success if ok else st.warning)(
        "The atlas points at the planted mechanism." if ok else "Some planted-truth checks fail (table below).")
    st.dataframe(a.planted.round(4), hide_index=True, key="at_planted")

st.subheader("Layer x head")
cols = st.columns(max(1, len(a.head_maps)))
for col, m in zip(cols, a.head_maps):
    with col:
        show_figure(atlas_head_map(a, m), key=f"at_head_{m}", filename=f"atlas_{m}")
        st.caption(f"top heads by {HEAD_LABELS[m]}: " + ", ".join(f"L{ly}H{h}" for ly, h in a.top_heads(m, 5)))
head_rows = a.agreement[a.agreement["axis"] == "layer x head"]
if head_rows["rho"].notna().any():
    show_figure(atlas_agreement_figure(a), key="at_agree", filename="atlas_agreement")
st.dataframe(a.agreement.round(4), hide_index=True, key="at_agreement")
st.caption("Verdicts: agreement with depth partialled out (heads permuted within their layer; "
           "layer profiles against phase-randomised surrogates), Holm-corrected over the pairs; "
           "raw ρ counts a shared trend with depth as agreement.")
validity_panel(ValidityReport.of(atlas_verdicts(a)), key="at_validity")

st.subheader("Layers")
if a.layer_maps:
    show_figure(atlas_layer_figure(a), key="at_layers", filename="atlas_layers")

st.subheader(f"Directions at {a.site}")
if len(a.overlaps):
    show_figure(atlas_overlap_figure(a), key="at_overlaps", filename="atlas_overlaps")
    st.dataframe(a.overlaps.round(4), hide_index=True, key="at_overlap_table")
elif a.directions:
    st.info("Only one direction set here (" + ", ".join(a.directions) + "); overlaps need two.")
else:
    st.info("No direction method applies to this model (see the notes above).")
