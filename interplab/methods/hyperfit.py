"""Hyperfitting layer geometry (spec hyperfit_geometry.md): per-layer effective dimension, temperature controls,
rank reordering, Late-Stage LoRA."""
from interplab.methods import DataSpec, MethodSpec, PageSpec

METHOD = MethodSpec(
    name="hyperfit",
    title="Hyperfitting",
    summary="hyperfitting: per-layer participation ratio (Terminal Expansion), entropy-matched temperature, rank "
            "reordering, Late-Stage LoRA",
    package="interplab.probes.hyperfit",
    experiment_modules=("interplab.experiments.hyperfit",),
    experiments=("hyperfit-eval", "hyperfit-geometry", "hyperfit-ranks", "hyperfit-ksweep", "hyperfit-train",
                 "hyperfit-controls"),
    figures="interplab.figures.geometry",
    pages=(PageSpec(
        "pages/6_Hyperfitting.py", "Hyperfitting",
        "Per-layer participation ratio of the residual stream (does the last layer expand?), an entropy-matched "
        "temperature control, rank reordering, and late-stage LoRA fine-tuning of the final layers.",
        first_button="Compute rank reordering, temperature control and generations", buttons=("geo_more",),
        reopens=("hyperfit-",)),),
    elsewhere=("interplab.train.hyperfit", "interplab.train.hyperfit_controls", "interplab.zoo.recipes.hyperfit"),
    doc="docs/hyperfit.md",
    tests="tests/hyperfit",
    data=DataSpec(("text",), ("split",), experiment="hyperfit-geometry"),
    smoke={"hyperfit-geometry": ("base={m}", "targets={m}", "n_prompts=4", "context_tokens=8", "new_tokens=8",
                                 "n_texts=8", "batch_size=4", "max_tokens=16")},
    atlas="interplab.probes.hyperfit.atlas_part:PART",
)
