"""FAST SAE training (spec fast_sae.md): finetuning-aligned per-sample SAE training vs block training on SAELens."""
from interplab.methods import DataSpec, MethodSpec, PageSpec

METHOD = MethodSpec(
    name="sae",
    title="SAE Training",
    summary="FAST per-sample SAE training vs block training on SAELens, GSNR, a feature browser, SAE steering",
    package="interplab.sae",
    experiment_modules=("interplab.experiments.sae", "interplab.experiments.sae_pareto"),
    experiments=("sae-train", "sae-steer-sweep", "sae-fast-vs-block", "sae-synthetic", "sae-pareto"),
    figures="interplab.figures.sae",
    pages=(PageSpec(
        "pages/7_SAE_Training.py", "SAE Training",
        "Train sparse autoencoders on a layer's activations with SAELens, per-sample (finetuning-aligned) versus "
        "block-wise, with gradient signal-to-noise and reconstruction / sparsity evaluations.",
        buttons=("sae_train_btn",), reopens=("sae-",)),
        PageSpec(
        "pages/8_Feature_Browser.py", "Feature Browser",
        "Browse a trained SAE's features: top-activating contexts, activation histograms, the tokens each feature "
        "promotes, and steering the model with a feature.",
        first_button="Compute feature statistics", buttons=("fb_compute", "fb_generate"))),
    elsewhere=("interplab.interventions.sae", "interplab.data.adapters.chat_messages"),
    doc="docs/sae.md",
    tests="tests/sae",
    data=DataSpec(("messages",), ("user", "assistant", "system", "split"), experiment="sae-train",
                  describe="messages (JSONL) or user, assistant (CSV)"),
    smoke={"sae-train": ("model={m}", "site=resid_post.1", "steps=5", "n_train=16", "n_eval=8", "batch_tokens=32",
                         "context_size=16")},
)
