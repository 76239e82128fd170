"""The shipped organisms (interplab/zoo/weights/<name>/): present, small, valid, loadable by plain transformers and
by both hook-layer backends, and their model-card accuracies re-measured on a fresh held-out sample."""
from __future__ import annotations

import importlib
import json
import math

import pytest
import torch

SHIPPED = ("toy-base", "toy-chat", "toy-base-s2", "text-base")
TOY = ("toy-base", "toy-chat", "toy-base-s2")
WEIGHTS = importlib.import_module("interplab.zoo.resolve").SHIPPED_DIR


def card(name):
    return json.loads((WEIGHTS / name / "card.json").read_text())


@pytest.fixture(scope="module")
def hf():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = (AutoModelForCausalLM.from_pretrained(WEIGHTS / name).eval(),
                           AutoTokenizer.from_pretrained(WEIGHTS / name))
        return cache[name]
    return get


def test_all_shipped_present_valid_and_small():
    from interplab.models.checkpoints import validate_checkpoint
    from interplab.zoo import resolve

    total = 0
    for name in SHIPPED:
        d = WEIGHTS / name
        validate_checkpoint(d)  # incl. sha256 of the weights
        assert resolve(name) == d
        assert (d / "MODEL_CARD.md").is_file() and (d / "card.json").is_file()
        total += sum(p.stat().st_size for p in d.rglob("*") if p.is_file())
    assert total <= 30e6, f"shipped weights are {total / 1e6:.1f} MB > 30 MB"


@pytest.mark.parametrize("name", SHIPPED)
def test_loads_with_plain_transformers(name, hf):
    model, tok = hf(name)
    cfg = model.config
    assert cfg.num_key_value_heads < cfg.num_attention_heads  # GQA
    n = sum(p.numel() for p in model.parameters())
    assert n == card(name)["n_params"]
    assert n <= (1.5e6 if name in TOY else 3e6)
    assert tok.chat_template and "<|im_start|>" in tok.get_vocab()
    ids = tok("the", return_tensors="pt").input_ids if name == "text-base" else \
        tok("copy s1 s2 sep", return_tensors="pt").input_ids
    with torch.no_grad():
        assert torch.isfinite(model(input_ids=ids).logits).all()


@pytest.mark.parametrize("backend", ["bridge", "nnsight"])
@pytest.mark.parametrize("name", ["toy-chat", "text-base"])
def test_loads_through_both_backends(name, backend, hf):
    import interplab

    m = interplab.load_model(f"zoo:{name}", backend=backend, device="cpu", dtype="float32")
    model, tok = hf(name)
    text = "ctx e1 v2 e3 v4 q e3 ans" if name != "text-base" else "The for statement is used"
    ids = tok(text, return_tensors="pt").input_ids
    out = m.run(ids, capture=["resid_post.0"])
    with torch.no_grad():
        ref = model(input_ids=ids).logits
    assert out.logits.shape == ref.shape
    assert torch.allclose(out.logits.float(), ref, atol=1e-4)
    assert m.n_kv_heads < m.n_heads


def _floor(p, n):  # 3-sigma binomial tolerance of an accuracy re-measured on n examples
    return 3 * math.sqrt(max(p * (1 - p), 0.02) / n)


@pytest.mark.parametrize("name", TOY)
def test_toy_accuracies_match_card(name, hf):
    from interplab.zoo import get_recipe
    from interplab.zoo.recipes.toy import EVAL_SEED, toy_evaluate

    model, tok = hf(name)
    c = card(name)
    n = 128
    got = toy_evaluate(model, tok, get_recipe(name), n=n, seed=EVAL_SEED + 31)  # a different held-out sample
    for metric, target in c["thresholds"].items():
        on_card = c["metrics"][metric]
        # consistent with the card
        assert abs(got[metric] - on_card) <= _floor(on_card, n) + 0.02, (metric, got[metric], on_card)
        # and where the card claims the target, the target holds on the fresh sample
        if on_card >= target:
            assert got[metric] >= target - _floor(target, n), (metric, got[metric], target)


def test_text_base_greedy_repeats(hf):
    from interplab.zoo import get_recipe
    from interplab.zoo.recipes.text import text_evaluate

    model, tok = hf("text-base")
    got = text_evaluate(model, tok, get_recipe("text-base"), n=6)
    assert got["ttr_greedy"] < 0.5
    assert card("text-base")["metrics"]["ttr_greedy"] < 0.5
    assert got["heldout_loss"] < 0.9 * math.log(len(tok))  # learned something beyond uniform


@pytest.mark.parametrize("name,fmt", [("toy-base", "raw"), ("toy-chat", "chat")])
def test_teacher_forced_exact_match_equals_greedy_generate(name, fmt, hf):
    from interplab.data.toy_tasks import TOY_TASKS, toy_task_fns
    from interplab.data.examples import encode, sample_examples
    from interplab.data.toy_vocab import toy_vocab
    from interplab.train.evaluate import exact_match, greedy_generate_answer

    model, _ = hf(name)
    V = toy_vocab()
    fns = toy_task_fns()
    exs = [ex for t in TOY_TASKS for ex in sample_examples(fns[t], 3, seed=7, split="test")]
    em = exact_match(model, exs, V, fmt)
    gen = [list(encode(ex, V, fmt).ids[encode(ex, V, fmt).prompt_len:]) == greedy_generate_answer(model, ex, V, fmt)
           for ex in exs]
    assert em.tolist() == gen
