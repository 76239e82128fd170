"""The hyperfit zoo recipes build a descendant checkpoint (tiny random parent, one epoch) with a model card."""
from dataclasses import replace

import pytest


def test_recipes_registered():
    from interplab.zoo import get_recipe

    for name in ("text-hyperfit", "text-late-lora", "text-full-lora"):
        r = get_recipe(name)
        assert r.parent == "text-base" and r.family == "hyperfit"
    assert get_recipe("text-late-lora").train.lora_layers == "last:2"


@pytest.mark.slow
def test_build_descendant_from_random_parent(tmp_path):
    import json

    import interplab
    from interplab.testing import make_random_checkpoint
    from interplab.zoo.cards import write_card
    from interplab.zoo.recipes.hyperfit import build_hyperfit
    from interplab.zoo.registry import BuildContext, get_recipe

    parent = make_random_checkpoint("llama", tmp_path / "parent", n_layers=2, d_model=32, n_heads=4, n_kv_heads=2,
                                    vocab=64, n_ctx=256, seed=0)
    base = get_recipe("text-late-lora")
    recipe = replace(base, train=replace(base.train, lora_layers="last:1"))
    out = tmp_path / "child"
    ctx = BuildContext(out_dir=out, work_dir=tmp_path / "work", steps=1, parent_dir=parent, progress=False,
                       num_threads=1, overrides={"n_sequences": 8, "seq_len": 32, "eval_n": 4})
    report = build_hyperfit(recipe, ctx)
    report.update(build_seconds=1.0, steps=1)
    card = write_card(recipe, out, report)
    assert report["lora_layers"] == [1] and report["epochs"] == 1
    assert {"heldout_loss", "ttr_greedy", "final_train_loss"} <= set(card["metrics"])
    assert json.loads((out / "interplab_train.json").read_text())["save_dtype"] == "float16"
    m = interplab.load_model(str(out), device="cpu")
    assert str(m.dtype) == "torch.float32" and m.n_layers == 2
