"""Truth Scores (spec truth_scores.md): per-head context-truthfulness probes, lineage, TruthProbe gating."""
from interplab.methods import DataSpec, MethodSpec, PageSpec

METHOD = MethodSpec(
    name="truth",
    title="Truth Scores",
    summary="per-head context-truthfulness probes, their inheritance across lineages, TruthProbe head gating",
    package="interplab.probes.truth",
    experiment_modules=("interplab.experiments.truth_scores", "interplab.experiments.validation"),
    experiments=("truth-scores", "truth-lineage", "truth-released-lineage", "truth-gating-sweep",
                 "validate-truth-scores"),
    figures="interplab.figures.truth_scores",
    pages=(PageSpec(
        "pages/2_Truth_Scores.py", "Truth Scores",
        "Per-head probes of context truthfulness: one logistic probe per (layer, head) trained in a single batched "
        "fit, the resulting score map, how the scores carry over between related models (inheritance across a "
        "lineage), and soft gating of the truthful heads during generation.",
        reopens=("truth-",)),),
    elsewhere=("interplab.interventions.head_gate", "interplab.zoo.validation.truth_scores", "interplab.data.ctxmem",
               "interplab.data.adapters.halueval"),
    validation_organism="interplab.zoo.validation.truth_scores:build_planted_truth_organism",
    validation_label="planted truth heads",
    doc="docs/truth_scores.md",
    tests="tests/truth_scores",
    data=DataSpec(("text", "label"), (), experiment="truth-scores"),
    smoke={"truth-scores": ("model={m}", "n_samples=16", "folds=2", "epochs=5", "ablation=false")},
    atlas="interplab.probes.truth.atlas_part:PART",
    # the documented real-model runs (docs/truth_scores.md, "On a real model"): CtxMem's vocabulary is the organisms'
    # own, so a real model reads the counterfactual world facts in its chat format
    model_defaults={"truth-scores": {
        "model=real:smollm2-135m-instruct": ("data=world-facts", "fmt=chat"),
        # no shipped filter for Gemma (a base model, no chat template: it reads the plain message): the facts
        # SmolLM2 knows, so both maps read the same facts
        "model=real:gemma-3-270m": ("data=world-facts", "known=smollm2-135m-instruct")},
        # the descendant is a fine-tune made here (docs/truth_scores.md "Lineage"); no released 135M relative
        # of another lineage has SmolLM2's head grid, so the control is the within-layer permutation null
        "truth-lineage": {
            "base=real:smollm2-135m-instruct": ("data=world-facts", "control=")},
        "truth-gating-sweep": {
            "target=real:smollm2-135m-instruct": ("data=world-facts", "score_source=self", "sites=z")}},
)
