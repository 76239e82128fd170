"""DecodeShare (spec decodeshare.md): the task-shared subspace of decode-time states, removed only while decoding."""
from interplab.methods import DataSpec, MethodSpec, PageSpec

# decode_tasks.DEFAULT_REAL_TASKS, written out so the spec imports no data module
REAL_DEFAULT = "capital,language,mc_capital,first_letter,plural,antonym"

METHOD = MethodSpec(
    name="decodeshare",
    title="DecodeShare",
    summary="the task-shared subspace of KV-cached decode states, decode-only removal against prefill and random "
            "controls",
    package="interplab.probes.decodeshare",
    experiment_modules=("interplab.experiments.decodeshare", "interplab.experiments.validation"),
    experiments=("decodeshare", "decodeshare-layers", "decodeshare-tasks", "validate-decodeshare"),
    figures="interplab.figures.decodeshare",
    pages=(PageSpec(
        "pages/3_DecodeShare.py", "DecodeShare",
        "The task-shared subspace of decode-time (KV-cached) states: estimate it across tasks, project it out only "
        "while decoding, and compare against prefill-only and random-subspace controls; overlap with steering "
        "directions.",
        buttons=("ds_run", "ds_pb_run"), reopens=("decodeshare",)),),
    elsewhere=("interplab.interventions.patchback", "interplab.zoo.validation.decodeshare", "interplab.data.multitask",
               "interplab.data.adapters.decodeshare_pool", "interplab.data.decode_tasks"),
    validation_organism="interplab.zoo.validation.decodeshare:build_planted_decode_organism",
    validation_label="planted decode subspace",
    doc="docs/decodeshare.md",
    tests="tests/decodeshare",
    data=DataSpec(("task", "prompt", "answer"), ("choices", "split"), experiment="decodeshare"),
    smoke={"decodeshare": ("model={m}", "dtype={dtype}", "tasks=copy,inc", "alphas=1.0", "steer_scales=1.0",
                           "n_calib=4", "n_eval=2", "calib_max_new_tokens=4", "eval_max_new_tokens=3",
                           "null_perm_B=10", "null_rot_B=2", "n_boot=50", "batch_size=4")},
    atlas="interplab.probes.decodeshare.atlas_part:PART",
    # the documented SmolLM2 runs (docs/decodeshare.md "On a real model"): the built-in real-model tasks it answers
    # at >= 60 % (results/decodeshare-tasks-smollm2), steering between the two noun tasks, the matched-energy alpha
    # sweep over the spec's strengths up to 1 (above 1 is a reflection), scored by generation only (forced choice
    # costs twice a generation pass, about a minute per condition on one CPU thread), a rotation null of 100
    # draws (p can reach 0.01); the estimator x locus grid is left to --set parts=...
    model_defaults={
        "decodeshare": {"model=real:smollm2-135m-instruct": (
            "data=real-tasks", f"tasks={REAL_DEFAULT}", "n_calib=32", "n_eval=40", "parts=table,loto,alpha,steer",
            "metrics=gen", "alphas=0.25,0.5,0.75,1", "null_rot_B=100", "steer_from=first_letter",
            "steer_to=plural")},
        "decodeshare-layers": {"model=real:smollm2-135m-instruct": (
            "data=real-tasks", f"tasks={REAL_DEFAULT}", "n_calib=32")},
        "decodeshare-tasks": {"model=real:smollm2-135m-instruct": ("n_eval=40",)}},
)
