"""Registry, resolution order, clear errors for unknown/unbuilt/corrupt organisms, never retraining over a checkpoint,
custom recipes, and the `interplab zoo` CLI."""
from __future__ import annotations

import json

import pytest

from interplab.core.errors import CheckpointError, ModelNotFoundError, ResultsError
import importlib

from interplab.zoo import registry
from interplab.zoo.registry import Recipe, get_recipe, known_names, list_organisms, register

resolve_mod = importlib.import_module("interplab.zoo.resolve")  # the module (interplab.zoo.resolve is the function)


@pytest.fixture()
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("INTERPLAB_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(importlib.import_module("interplab.models.zoo_dirs"), "SHIPPED_DIR", tmp_path / "shipped")  # isolate from the shipped weights
    return tmp_path


def _tiny_build(recipe, ctx):
    from interplab.data.toy_vocab import build_toy_tokenizer
    from interplab.train.arch import ArchConfig, build_model, count_params
    from interplab.train.checkpoint import save_checkpoint

    tok = build_toy_tokenizer()
    model = build_model(ArchConfig(n_layers=1, d_model=16, d_mlp=32, n_heads=2, n_kv_heads=1, d_head=8), tok, 0)
    save_checkpoint(model, tok, ctx.out_dir, overwrite=True)
    return {"train": {"losses": [1.0, 0.5], "log": [], "seconds": 0.1, "steps_done": ctx.steps},
            "metrics": {"acc/x": 1.0}, "n_params": count_params(model)}


@pytest.fixture()
def custom_recipe():
    r = register(Recipe(name="test-custom", description="a custom build function", family="test",
                        build=_tiny_build, steps=2, thresholds={"acc/x": 0.5}))
    yield r
    registry._REGISTRY.pop("test-custom", None)


def test_known_organisms_and_fields():
    names = set(known_names())
    assert {"toy-base", "toy-chat", "toy-base-s2", "text-base"} <= names
    rs = {r.name: r for r in list_organisms()}
    assert rs["toy-chat"].parent == "toy-base" and rs["toy-base"].parent is None
    assert rs["toy-base-s2"].seed != rs["toy-base"].seed and rs["toy-base-s2"].arch == rs["toy-base"].arch
    assert rs["toy-base"].arch.n_kv_heads < rs["toy-base"].arch.n_heads and rs["toy-base"].arch.d_head == 32
    for r in rs.values():
        json.dumps(r.summary(), default=str)
        assert isinstance(r.available, bool)
    assert get_recipe("zoo:toy-chat") is rs["toy-chat"]


def test_unknown_name_lists_known(home):
    with pytest.raises(ModelNotFoundError, match="toy-chat"):
        resolve_mod.resolve("no-such-organism")


def test_unbuilt_says_how_to_build(home, custom_recipe):
    with pytest.raises(ModelNotFoundError, match="interplab zoo train test-custom"):
        resolve_mod.resolve("test-custom")
    assert not custom_recipe.available


def test_custom_build_resolve_order_and_corruption(home, custom_recipe):
    from interplab.zoo.build import train_organism

    p = train_organism("test-custom", progress=False)
    assert p == home / "home" / "zoo" / "test-custom"
    assert resolve_mod.resolve("zoo:test-custom") == p and custom_recipe.available
    card = json.loads((p / "card.json").read_text())
    assert card["metrics"] == {"acc/x": 1.0} and (p / "MODEL_CARD.md").is_file()
    # never retrained over: an existing checkpoint needs --force
    with pytest.raises(ResultsError, match="force"):
        train_organism("test-custom", progress=False)
    # shipped weights win over the user zoo
    import shutil

    shutil.copytree(p, home / "shipped" / "test-custom")
    assert resolve_mod.resolve("test-custom") == home / "shipped" / "test-custom"
    shutil.rmtree(home / "shipped" / "test-custom")
    # corrupt / missing weights: a clear CheckpointError, and the directory is left alone
    w = p / "model.safetensors"
    w.write_bytes(w.read_bytes()[:100])
    with pytest.raises(CheckpointError, match="corrupt"):
        resolve_mod.resolve("test-custom")
    with pytest.raises(ResultsError):
        train_organism("test-custom", progress=False)
    assert w.stat().st_size == 100
    w.unlink()
    with pytest.raises(CheckpointError, match="missing"):
        resolve_mod.resolve("test-custom")
    # an explicit --force rebuild repairs it
    train_organism("test-custom", progress=False, force=True)
    assert resolve_mod.resolve("test-custom") == p


def test_zoo_records_names_not_paths(home, tmp_path):
    from interplab.models.zoo_dirs import zoo_name_of
    from interplab.train.finetune import _parent_name

    (home / "home" / "zoo" / "a").mkdir(parents=True)
    (home / "shipped" / "b").mkdir(parents=True)
    assert zoo_name_of(home / "home" / "zoo" / "a") == "zoo:a"
    assert zoo_name_of(home / "shipped" / "b") == "zoo:b"
    assert zoo_name_of(tmp_path / "elsewhere" / "a") is None
    assert _parent_name(home / "shipped" / "b") == "zoo:b" and _parent_name("zoo:c") == "zoo:c"
    assert _parent_name(str(tmp_path / "x")) == str(tmp_path / "x") and _parent_name(object()) is None


def test_cli(home, custom_recipe, capsys):
    from interplab.zoo.cli import main

    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "toy-chat" in out and "test-custom" in out
    assert main(["info", "test-custom"]) == 0
    assert "interplab zoo train test-custom" in capsys.readouterr().out
    out_dir = home / "elsewhere"
    assert main(["zoo", "train", "test-custom", "--steps", "3", "--out", str(out_dir), "--no-progress"]) == 0
    assert (out_dir / "model.safetensors").is_file()
    assert main(["train", "test-custom", "--out", str(out_dir), "--no-progress"]) == 2  # exists, no --force
    assert "force" in capsys.readouterr().err
    assert main(["info", "nope"]) == 2


def test_broken_recipe_module_does_not_break_the_zoo(monkeypatch):
    import pkgutil

    real = pkgutil.iter_modules

    def with_broken(path):
        yield from real(path)
        yield pkgutil.ModuleInfo(None, "zz_broken_for_test", False)

    monkeypatch.setattr(registry.pkgutil, "iter_modules", with_broken)
    monkeypatch.setattr(registry, "_LOADED", False)
    try:
        with pytest.warns(RuntimeWarning, match="zz_broken_for_test"):
            names = known_names()
        assert "toy-chat" in names
        with pytest.raises(ModelNotFoundError, match="zz_broken_for_test"):
            get_recipe("no-such-organism")
    finally:
        registry._BROKEN.pop("zz_broken_for_test", None)
