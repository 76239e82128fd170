"""PCFG parse probes (spec pcfg_parse.md): exact grammar next-token distributions, layer-wise probes of parse
quantities."""
from interplab.methods import MethodSpec, PageSpec

METHOD = MethodSpec(
    name="pcfg",
    title="PCFG",
    summary="exact PCFG next-token distributions, transformers trained on PCFGs, layer-wise parse probes",
    package="interplab.probes.pcfg",
    experiment_modules=("interplab.experiments.pcfg",),
    experiments=("pcfg-depth", "pcfg-probes", "pcfg-attention", "pcfg-construction",
                 "pcfg-depth-sweep", "pcfg-verdicts"),
    figures="interplab.figures.pcfg",
    pages=(PageSpec(
        "pages/5_PCFG.py", "PCFG",
        "Exact next-token distributions of a probabilistic context-free grammar (inside and prefix probabilities) "
        "next to the model's, and layer-wise probes that read parse quantities out of the residual stream.",
        first_button="Evaluate KL by position", buttons=("pcfg_eval_btn", "pcfg_probe_btn", "pcfg_cm_btn"),
        reopens=("pcfg-",)),),
    elsewhere=("interplab.grammar", "interplab.train.grammar_eval", "interplab.zoo.recipes.pcfg"),
    doc="docs/pcfg.md",
    tests="tests/pcfg",
)
