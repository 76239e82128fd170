"""CRH page: cylinder geometry of concept difference vectors, sector and penalty steering.

Two sources: a planted cylinder (synthetic, spec §7A; no model needed) or a model's concepts (toy-chat concepts, the
paper's concepts as offline pairs on a real chat model, or your own with/without pairs; the saved `crh-concepts` study
of SmolLM2 opens in an expander). Views: the 3-D cylinder, the polar sector map (population + per sample), penalty
heatmaps, the Implication-3 pairwise scatter and a steering "try it" box. A thin view over
interplab.probes.crh; the sections live in interplab.app.views.crh."""
from __future__ import annotations

import streamlit as st

st.set_page_config(page_title="interplab · CRH", page_icon=":microscope:", layout="wide")

from interplab.app.data_box import your_data  # noqa: E402
from interplab.app.model_jobs import is_organism  # noqa: E402
from interplab.app.views import crh as V  # noqa: E402
from interplab.app.widgets import page_model, saved_result  # noqa: E402
from interplab.core.errors import InterplabError  # noqa: E402
from interplab.probes import crh  # noqa: E402

st.title("CRH · cylindrical concept geometry")
st.caption("Difference vectors (with concept − without) split into a central axis û and a normal part; the plane "
           "of the top-2 normal directions is estimable, the sensitive sector of a sample is not (CRH). Each fitted "
           "view is a 2-D slice of a (d−1)-dim normal space: read the top-2 explained variance in the titles.")

with st.expander("Validation: a planted cylinder and sector detector (`validate-crh`)"):
    st.caption("An organism built by construction (zoo.validation.crh) puts the concept diffs on a known cylinder "
               "and emits the concept iff κ·⟨x̂,u⟩·‖Px̂‖·g(β) > 1 with g(β) = max(0, cos(β − ψ)). The experiment "
               "runs the unchanged pipeline (concept_diffs, fit_cylinder, sector/penalty scans with a TokenSetJudge, "
               "Implications 1–3) and scores axis, plane, sector centre and sector-map recovery, against a "
               "sector-blind organism and a rotated-plane control (both must fail).")
    V.validation()

picked = page_model("crh")
source = st.radio("Source", ["Planted cylinder (synthetic, no model)", "Model concepts"], horizontal=True,
                  key="crh_source", index=int(picked.try_load()[0] is not None))   # the model's, when it loads
if source.startswith("Planted"):
    V.planted()
    st.stop()

# ----------------------------------------------------------------------------------------------- model
your_data("crh", key="crh_data", overrides={"model": picked.name})
model = picked.load()
organism = is_organism(picked)
with st.expander("The real-model study: 25 paper concepts (`crh-concepts`)", expanded=not organism):
    st.caption("Offline (without, with) pairs of 25 of the paper's concepts (interplab.data.concept_pairs): "
               "5 concepts choose the read position, block and strength, the other 20 are scored — cylinder "
               "statistics at every layer against paired pseudo-concepts, and steering at the chosen block: "
               "sectors, the penalty direction and the diffmean (CAA) / PCA / probe baselines against a "
               "matched-norm pseudo-concept control and the unsteered replies, each reply judged for the "
               "concept's held-out words (not those that built the vector) and scored for fluency (its NLL "
               "under the unsteered model). The verdicts and their checks are above. docs/crh.md, \"On a real "
               "model\".")
    V.concepts_study(picked, model, organism)

concept = V.concept_source(picked, model)
try:
    d_train, d_test = V.diffs(model, concept.data, key=concept.key, layer=concept.layer,
                              position=concept.position)
    cyl = crh.fit_cylinder(d_train, meta={"layer": concept.layer})
except InterplabError as exc:
    st.error(f"Cannot read difference vectors: {exc}")
    st.stop()

judge = crh.TokenSetJudge(concept.data.words)
if concept.offline:
    from interplab.probes.crh.study import residual_unit  # noqa: E402

    unit = residual_unit(model, concept.data.test_prompts, concept.layer)
    unit_name = "residual norm"
else:
    unit, unit_name = cyl.axis_norm, "‖a‖"
V.steering_scans(model, concept, cyl, d_test, judge, unit, unit_name)

st.subheader("Try it: steer one prompt")
V.try_steer(model, concept, cyl, judge, unit)

# ----------------------------------------------------------------------------------------------- spiral probe
st.subheader("Spiral probe")
st.caption("Two prompts differing in one token: norm-constrained steering vectors at resid_pre.L optimised for each "
           "budget w·dist (the `crh-spiral` experiment), a helix fit to the trajectory, and two controls fitted the "
           "same way: the straight LRH line w·dist·Δ̂ and the trajectory flattened onto its top-2 PCs.")
with st.expander("Saved spiral probe (`crh-spiral`): its verdict and helix fits"):
    # the committed SmolLM2 run (temperature | wetland) and the user's own runs, with their verdicts
    saved_sp = saved_result("crh-spiral", "spiral", "crh_sp_run", label="Saved crh-spiral run",
                            prefer_model=picked.name)
    if saved_sp is not None:
        V.spiral_views(saved_sp, key="crh_sp_saved")
V.spiral(model, concept.key)
