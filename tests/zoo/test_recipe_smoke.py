"""A 30-step smoke build of every recipe (smoke overrides keep each a few seconds) and recipe determinism."""
from __future__ import annotations

import json

import pytest

import importlib

resolve_mod = importlib.import_module("interplab.zoo.resolve")
from interplab.zoo.build import train_organism

SMOKE = {
    "toy-base": {"batch_size": 4, "eval_n": 8},
    "toy-base-s2": {"batch_size": 4, "eval_n": 8},
    "toy-chat": {"batch_size": 4, "eval_n": 8},
    "text-base": {"batch_size": 2, "eval_n": 2, "max_paragraphs": 60, "bpe_vocab": 300},
}


@pytest.fixture()
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("INTERPLAB_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(importlib.import_module("interplab.models.zoo_dirs"), "SHIPPED_DIR", tmp_path / "shipped")
    return tmp_path


def build(name, out, steps=30):
    p = train_organism(name, steps=steps, out=out, progress=False, overrides=SMOKE[name], force=True)
    return json.loads((p / "card.json").read_text())


@pytest.mark.slow
def test_smoke_build_every_recipe_deterministic(home):
    from transformers import AutoModelForCausalLM

    # toy-base goes into the (temporary) user zoo so toy-chat can resolve it as its parent
    cards = {"toy-base": build("toy-base", home / "home" / "zoo" / "toy-base")}
    for name in ("toy-chat", "toy-base-s2", "text-base"):
        cards[name] = build(name, home / name)
    for name, card in cards.items():
        assert card["train"]["steps_done"] == 30, name
        assert card["train"]["final_loss"] < card["train"]["first_losses"][0], name
        assert card["metrics"], name
    assert cards["toy-chat"]["extra"]["parent"] == "zoo:toy-base"
    m = AutoModelForCausalLM.from_pretrained(home / "toy-chat")
    assert m.config.num_key_value_heads < m.config.num_attention_heads
    # same recipe + seed -> identical first 20 losses (a second build of each from-scratch family)
    for name in ("toy-base", "text-base"):
        again = build(name, home / f"{name}-again")
        assert len(again["train"]["first_losses"]) == 20
        assert again["train"]["first_losses"] == cards[name]["train"]["first_losses"], name
    assert cards["toy-base-s2"]["train"]["first_losses"] != cards["toy-base"]["train"]["first_losses"]
