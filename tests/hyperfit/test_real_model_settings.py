"""Issue 28 §2: what the SmolLM2 hyperfitting runs need beyond the organism runs: LoRA-parametrised control arms,
several reused seeds, a chosen k list in the sweep, a pooled-seed row in the table, descendant checks on targets,
the real-model defaults, and a smoke run of hyperfit-train on the real model."""
import pytest
import torch

from interplab.core.errors import ConfigError

SMOL = "real:smollm2-135m-instruct"


def test_real_model_defaults_apply_only_to_smollm2():
    from interplab.experiments.registry import model_defaults

    d = model_defaults("hyperfit-train", {"base": SMOL})
    assert d["method"] == "lora" and d["lora_layers"] == "last:5" and d["n_sequences"] == "16"
    assert model_defaults("hyperfit-train", {"base": SMOL, "lr": "1e-4"}).get("lr") is None  # the user's wins
    assert model_defaults("hyperfit-train", {"base": "zoo:text-base"}) == {}
    c = model_defaults("hyperfit-controls", {"base": SMOL})
    assert c["method"] == "lora" and c["reuse"] == ""   # the organism's reused zoo:text-hyperfit is not SmolLM2's
    assert c["save_dtype"] == "float32"  # SmolLM2 is float32: rounding the arms only would move untouched blocks
    assert model_defaults("hyperfit-eval", {"base": SMOL})["pool_targets"] == "true"


def test_finetune_with_lora_trains_only_the_adapted_blocks(hf_pair):
    from interplab.models.loading import load_hf_model
    from interplab.train.hyperfit import expected_lora_params
    from interplab.train.hyperfit_controls import FinetuneConfig, finetune_early_stopping, weight_change

    a, _, texts = hf_pair
    seqs = [a.tokenizer(t)["input_ids"] for t in texts[:4]]
    val = [a.tokenizer(t)["input_ids"] for t in texts[4:]]
    res = finetune_early_stopping(a, seqs, val, steps=4, config=FinetuneConfig(
        lr=5e-2, batch_size=2, patience=1, seq_len=32, lora_layers="last:1", lora_r=4, lora_alpha=8.0))
    base = load_hf_model(a.path, device="cpu", dtype=torch.float32)
    assert res.trainable_params == expected_lora_params(base, [1], 4)
    for model in (res.model, res.final_model):
        assert not hasattr(model, "peft_config")  # merged back into a plain HF model
        d = weight_change(base, model).set_index("group")["delta_fro"]
        assert d["block.1"] > 0 and d["block.0"] == 0.0


@pytest.fixture(scope="module")
def lora_controls(tmp_path_factory):
    from interplab.experiments.registry import run_experiment

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("hf_lora_controls")
    return run_experiment("hyperfit-controls", {
        "method": "lora", "arm_lora_layers": "last:1", "lr": "1e-2", "ft_lr": "1e-2", "seeds": "0",
        "n_sequences": "4", "seq_len": "16", "n_heldout": "2", "max_epochs": "2", "shuffled_max_epochs": "1",
        "n_texts": "4", "max_tokens": "24", "reuse": "", "ft_patience": "1", "save_dtype": "float32"}, root=root)


def test_lora_arms_change_only_the_last_block(lora_controls):
    import interplab.probes.hyperfit  # noqa: F401 - registers the result class
    from interplab.results.runs import load_run

    res = load_run(lora_controls).result("controls")
    assert res.config.method == "lora"
    w = res.weights
    blocks = sorted(g for g in set(w["group"]) if g.startswith("block."))
    last = blocks[-1]
    for arm in ("hyperfit", "finetune", "finetune-steps", "shuffled"):
        d = w[w["arm"] == arm].set_index("group")["delta_fro"]
        assert d[last] > 0 or arm == "finetune", arm  # early stopping may keep the step-0 weights
        assert d[[b for b in blocks if b != last]].max() == 0.0, arm
    r = res.runs.set_index("arm")
    assert r.loc["hyperfit", "trainable_params"] == r.loc["finetune", "trainable_params"] < 1e5


def test_reuse_takes_several_seeds_and_checks_each(tmp_path):
    from interplab.experiments.hyperfit import HyperfitControlsConfig, _check_reuse
    from interplab.experiments.registry import run_experiment
    from interplab.models.loading import load_model

    cfg = HyperfitControlsConfig(reuse="zoo:text-hyperfit, zoo:text-hyperfit")
    assert cfg.reuse_names == ["zoo:text-hyperfit", "zoo:text-hyperfit"]
    m = load_model("zoo:text-hyperfit")
    _check_reuse(m, cfg, 0)  # the zoo descendant is the recipe's hyperfit arm, seed 0
    with pytest.raises(ConfigError, match="seed"):
        _check_reuse(m, cfg, 1)  # ... but not seed 1
    with pytest.raises(ConfigError, match="method"):
        _check_reuse(m, HyperfitControlsConfig(method="lora"), 0)
    with pytest.raises(ConfigError, match="at most one per seed"):
        run_experiment("hyperfit-controls", {"seeds": "0", "reuse": "zoo:text-hyperfit,zoo:text-hyperfit"},
                       root=tmp_path)


def test_target_names_and_descendant_check(tmp_path):
    from interplab.experiments.hyperfit import HyperfitModels, _check_descendants, _target_name
    from interplab.models.loading import load_model

    assert _target_name("/x/runs/hyperfit-train/seed0/checkpoint") == "seed0"
    assert _target_name("/x/runs/hyperfit-train/seed0/checkpoint/") == "seed0"
    assert _target_name("zoo:text-hyperfit") == "text-hyperfit"
    base = load_model("zoo:text-base")
    _check_descendants(base, {"h": load_model("zoo:text-hyperfit")}, HyperfitModels())
    with pytest.raises(ConfigError, match="hyperfit-train"):
        _check_descendants(base, {"toy": load_model("zoo:toy-base")}, HyperfitModels())


def test_pooled_targets_row_is_the_t_interval_over_targets():
    import numpy as np

    from interplab.models.loading import load_model
    from interplab.probes.hyperfit import EvalConfig, evaluate_settings, heldout_texts
    from interplab.probes.stats import intervals

    base = load_model("zoo:text-base")
    targets = {"a": load_model("zoo:text-hyperfit"), "b": load_model("zoo:text-late-lora")}
    res = evaluate_settings(base, targets, heldout_texts(8), EvalConfig(
        n_prompts=3, new_tokens=8, context_tokens=8, tf_texts=2, seeds=2, alphas=[0.1], sample_t1=False,
        pool_targets=True, batch_size=3))
    t = res.table.set_index("setting")
    ttr = [t.loc["a", "ttr"], t.loc["b", "ttr"]]
    row = t.loc["targets pooled"]
    assert row["kind"] == "target-pooled" and row["n_seeds"] == 2
    assert row["ttr"] == pytest.approx(np.mean(ttr))
    ci = intervals(ttr, method="t")
    assert (row["ttr_lo"], row["ttr_hi"]) == pytest.approx((ci["lo"], ci["hi"]))


def test_ksweep_runs_the_chosen_ks_with_a_ttr_interval(tmp_path):
    from interplab.experiments.registry import run_experiment
    from interplab.results.runs import load_run

    with pytest.raises(ConfigError, match="ks must be"):
        run_experiment("hyperfit-ksweep", {"ks": "0", "n_sequences": "2"}, root=tmp_path)
    path = run_experiment("hyperfit-ksweep", {
        "ks": "1,4", "n_sequences": "2", "max_epochs": "1", "n_prompts": "3", "new_tokens": "8",
        "context_tokens": "8", "tf_texts": "2", "batch_size": "3"}, root=tmp_path)
    f = load_run(path).result("k_sweep").frame
    assert list(zip(f["placement"], f["k"])) == [("late", 1), ("late", 4), ("early", 1)]
    assert ((f["ttr_lo"] <= f["ttr"]) & (f["ttr"] <= f["ttr_hi"])).all()


def test_hyperfit_train_runs_on_the_real_model(tmp_path):
    """Smoke: Late-Stage LoRA on SmolLM2 by name, one step; the defaults of the documented run are recorded."""
    import interplab
    from interplab.experiments.registry import run_experiment
    from interplab.models import real
    from interplab.results.runs import load_run

    if not real.is_installed(real.real_model(SMOL)):
        pytest.fail(f"{SMOL} is not installed; `bash scripts/setup.sh install` installs the real models")
    path = run_experiment("hyperfit-train", {"base": SMOL, "n_sequences": "2", "batch_size": "2",
                                             "max_epochs": "1", "lora_layers": "last:1"}, root=tmp_path)
    run = load_run(path)
    res = run.result("hyperfit")
    assert res.config.method == "lora" and res.lora_layers == [29] and res.epochs == 1
    assert run.config["lr"] == pytest.approx(3e-3)  # from the documented SmolLM2 defaults
    m = interplab.load_model(str(path / res.checkpoint))
    assert m.n_layers == 30 and m.d_vocab > 40000
    # ... and the descendant goes straight into the geometry experiment, named after its run folder
    geo = run_experiment("hyperfit-geometry", {"base": SMOL, "targets": str(path / res.checkpoint), "n_texts": "4",
                                               "n_prompts": "2", "new_tokens": "4", "max_tokens": "32"},
                         root=tmp_path)
    g = load_run(geo).table("geometry")
    last = g[(g["site"] == "resid_post") & (g["layer"] == 29) & (g["tokens"] == "teacher_forced") & ~g["bos"]]
    first = g[(g["site"] == "resid_post") & (g["layer"] == 0) & (g["tokens"] == "teacher_forced") & ~g["bos"]]
    assert set(g["target"]) == {path.name}
    assert float(first["delta_pr"].iloc[0]) == pytest.approx(0.0, abs=1e-6)  # block 0 has no adapter
    assert float(last["cos"].iloc[0]) < 1.0  # the adapted last block moved
