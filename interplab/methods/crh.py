"""CRH cylinders (spec crh.md): central axis, normal plane and sensitive sectors of concept difference vectors."""
from interplab.methods import DataSpec, MethodSpec, PageSpec

METHOD = MethodSpec(
    name="crh",
    title="CRH",
    summary="concept cylinders: central axis, normal plane, sensitive sectors; penalty and sector steering",
    package="interplab.probes.crh",
    experiment_modules=("interplab.experiments.crh", "interplab.experiments.validation"),
    experiments=("crh-toy", "crh-concepts", "crh-synthetic", "crh-spiral", "validate-crh", "validate-crh-shapes"),
    figures="interplab.figures.crh",
    pages=(PageSpec(
        "pages/4_CRH.py", "CRH",
        "Concept cylinders: the central axis, normal plane and sensitive sectors of concept difference vectors, "
        "and what a cylinder penalty or sector steering does to the model's output.",
        reopens=("crh-",)),),
    elsewhere=("interplab.zoo.validation.crh", "interplab.data.concepts", "interplab.data.adapters.crh_concepts",
               "interplab.data.concept_pairs"),
    validation_organism="interplab.zoo.validation.crh:build_planted_crh_organism",
    validation_label="planted CRH cylinder",
    doc="docs/crh.md",
    tests="tests/crh",
    data=DataSpec(("concept", "question", "resp_no_concept", "resp_with_concept"), ("qid", "cid", "concept_words"),
                  experiment="crh-toy"),
    smoke={"crh-toy": ("model={m}", "concepts=animal,color,food", "n_train=8", "n_test=4", "n_strengths=2", "n_p=3",
                       "n_bins=4", "n_perm=10", "max_new_tokens=4", "max_rows=32")},
    atlas="interplab.probes.crh.atlas_part:PART",
)
