"""FAST SAE training (spec fast_sae.md): finetuning-aligned per-sample SAE training vs block training on SAELens."""
from interplab.methods import DataSpec, MethodSpec, PageSpec

SMOL = "model=real:smollm2-135m-instruct"
# the documented SmolLM2 runs (docs/sae.md "On a real model"): the built-in offline chat set, the middle block's
# residual (15 of 30), 8x TopK SAEs; each sequence's first position (SmolLM2's attention sink, ~2.5e4 against ~2e2)
# is left out of training, evaluation and splicing (exclude_massive=10, the `core.scale` rule); each arm's
# activations are harvested once (a 135M forward costs far more than an SAE step), one dialogue per forward (on CPU
# unpadded forwards are 4x faster than padded micro-batches of 32)
_SMOL_SAE = ("data=offline-chat", "site=resid_post.15", "expansion=8", "exclude_massive=10", "batch_tokens=256",
             "lr=1e-3", "context_size=128", "micro_batch=1")

METHOD = MethodSpec(
    name="sae",
    title="SAE Training",
    summary="FAST per-sample SAE training vs block training on SAELens, GSNR, a feature browser, SAE steering",
    package="interplab.sae",
    experiment_modules=("interplab.experiments.sae", "interplab.experiments.sae_pareto",
                        "interplab.experiments.sae_eval"),
    experiments=("sae-train", "sae-steer-sweep", "sae-fast-vs-block", "sae-synthetic", "sae-pareto",
                 "sae-eval", "sae-verdicts"),
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
    elsewhere=("interplab.interventions.sae", "interplab.data.adapters.chat_messages", "interplab.data.chat_corpus"),
    doc="docs/sae.md",
    tests="tests/sae",
    data=DataSpec(("messages",), ("user", "assistant", "system", "split"), experiment="sae-train",
                  describe="messages (JSONL) or user, assistant (CSV)"),
    smoke={"sae-train": ("model={m}", "site=resid_post.1", "steps=5", "n_train=16", "n_eval=8", "batch_tokens=32",
                         "context_size=16")},
    model_defaults={
        "sae-pareto": {SMOL: _SMOL_SAE + ("ks=32", "l1_coefficients=", "seeds=0,1", "steps=1500", "n_train=1400",
                                          "n_text=1100", "n_eval=64", "cache_activations=true")},
        "sae-train": {SMOL: _SMOL_SAE + ("architecture=topk", "k=32", "steps=1500", "n_train=1400", "n_eval=64")},
        "sae-steer-sweep": {SMOL: ("data=offline-chat", "n_prompts=32", "n_eval=64", "max_new_tokens=24",
                                   "alphas=0,0.25,0.5,1,2,4")},
        # the sae-pareto run's held-out dialogues (its data seed 42), one dialogue per forward
        "sae-eval": {SMOL: ("data=offline-chat", "n_eval=64", "seed=42", "micro_batch=1")}},
)
