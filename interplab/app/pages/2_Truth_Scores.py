"""Truth Scores page: per-head context-truthfulness probes, inheritance across model lineages, TruthProbe gating.

Sources: the authors' released maps (no model needed), or a model scored live on CtxMem verification prompts.
Views: L x H heatmap (raw / per-layer normalised / gates) with hover, lineage matrix + bars + per-layer curves +
pair scatter with the within-layer null, score-vs-evidence scatter, gating sweep (saved runs or a quick live sweep)
and a "try it" box generating with and without gating side by side. A thin view over interplab.probes;
the sections live in interplab.app.views.truth_scores."""
from __future__ import annotations

import streamlit as st

st.set_page_config(page_title="interplab · Truth Scores", page_icon=":microscope:", layout="wide")

from interplab.app.data_box import your_data  # noqa: E402
from interplab.app.model_jobs import is_organism  # noqa: E402
from interplab.app.runs_view import show_reopened_run  # noqa: E402
from interplab.app.views import truth_scores as V  # noqa: E402
from interplab.app.widgets import page_model  # noqa: E402

st.title("Truth Scores · lineage inheritance · TruthProbe gating")
show_reopened_run(("truth-",))        # a saved run reopened from the Runs page (its results and figures)
st.caption("S(l,h) = 5-fold cross-validated accuracy of a logistic probe on head (l,h)'s output z (before W_O) at "
           "the last prompt token, separating context-supported (gold) from hallucinated answers. It measures "
           "decodability of the dataset label, not a causal role. Gating scales every head by g(l,h) at every "
           "position, prefill and decode.")

picked = page_model("ts", picker="ts_model")   # loaded only when a section needs it
organism = is_organism(picked)            # CtxMem is the organisms' language; any other model reads world facts
your_data("truth", key="ts_data",
          overrides={"model": picked.name, "backend": picked.backend, "figure_formats": ""})

released = V.released_maps()
scored: dict = st.session_state.setdefault("ts_scored", {})

st.header("1 · Score map")
current, em_cur, source = V.score_source(picked, organism, released, scored)
if current is not None:
    V.score_map_view(current)

st.header("2 · Lineage")
V.lineage({**released, **{f"model:{k}": v[0] for k, v in scored.items()}})

st.header("3 · Evidence attention")
V.evidence(current, em_cur)

st.header("4 · Gating sweep")
V.gating_section(picked, organism, current, source)

st.header("5 · Try it: generate with and without gating")
V.try_gating(picked, {**{f"released:{k}": v for k, v in released.items()},
                      **{f"model:{k}": v[0] for k, v in scored.items()}})

st.header("6 · Validation: planted evidence heads")
st.caption("An organism built by construction (zoo.validation.truth_scores) whose designated heads, and only those, "
           "carry the verdict. `interplab run validate-truth-scores` runs the unchanged method on it and scores "
           "recovery against the planted heads, with shuffled-label and other-heads negative controls.")
V.validation()

st.header("7 · On a real model: counterfactual world facts")
st.caption("Known public facts (capitals, currencies, languages, ...) with a context that states another object of "
           "the relation and a true same-relation sentence about another subject, answered with the context's "
           "value (label 1), the model's memory (label 0) or that in-context distractor (label 0), in the "
           "model's chat format; folds keep a fact's texts together. Each head is tested against "
           "label-permutation null maps; maxT controls the family-wise error over all heads, BH the false "
           "discovery rate (docs/truth_scores.md, *On a real model*).")
V.world_facts(picked, organism, scored)

st.header("8 · On a real model: TruthProbe gating on world facts")
st.caption("The map (the model's own, or another model's with the same head grid: a base map gating its "
           "descendant) gates the model on held-out facts; the gate mode and α are chosen on tune facts, inside the "
           "paper's α ranges and only among settings whose tune replies pass the degeneracy checks. The verdicts "
           "and every check behind them come with the run. Run it with `interplab run truth-gating-sweep --set "
           "target=real:smollm2-135m-instruct` (docs/truth_scores.md, *On a real model*).")
V.facts_gating()
