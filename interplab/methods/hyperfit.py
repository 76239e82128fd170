"""Hyperfitting layer geometry (spec hyperfit_geometry.md): per-layer effective dimension, temperature controls,
rank reordering, Late-Stage LoRA."""
from interplab.methods import DataSpec, MethodSpec, PageSpec

SMOL = "base=real:smollm2-135m-instruct"

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
    # the documented SmolLM2 runs (docs/hyperfit.md "On a real model"): Late-Stage LoRA (last 5 of
    # 30 blocks, r 16, lr 3e-3, which reaches the 0.05-nat stop in ~22 epochs) on 16 pydoc windows;
    # 135M-parameter generation costs ~1 s per prompt-setting on one core, so the table uses 64
    # prompts (one window from each of 64 held-out paragraphs after the 32 that choose T* and the
    # static delta), 3 sampling seeds and four injection strengths; its weights are float32, so the
    # controls measure every arm unrounded (a float16 rounding would move the untouched blocks)
    model_defaults={
        "hyperfit-train": {SMOL: ("method=lora", "lora_layers=last:5", "n_sequences=16", "lr=3e-3",
                                  "max_epochs=100")},
        "hyperfit-controls": {SMOL: ("method=lora", "arm_lora_layers=last:5", "n_sequences=16", "lr=3e-3",
                                     "ft_lr=3e-3", "max_epochs=100", "shuffled_max_epochs=40", "reuse=",
                                     "n_texts=100", "save_dtype=float32")},
        "hyperfit-ksweep": {SMOL: ("ks=1,5,30", "n_sequences=16", "lr=3e-3", "max_epochs=100", "budget_s=600",
                                   "n_prompts=100")},
        "hyperfit-eval": {SMOL: ("n_prompts=64", "seeds=3", "alphas=0.01,0.1,0.5,2",
                                 "sample_t1=false", "pool_targets=true", "tf_texts=32",
                                 "batch_size=32")},
        "hyperfit-ranks": {SMOL: ("n_prompts=100", "tf_texts=32", "batch_size=25")},
        "hyperfit-geometry": {SMOL: ("n_texts=100",)}},
)
