"""FAST SAEs on a real chat model (issue 28 §3): the offline chat set, massive-position handling (training,
evaluation, splicing), harvest-once providers, the shared clean forward, the SmolLM2 defaults and a real-model smoke."""
from __future__ import annotations

import copy

import pytest
import torch

from interplab.core.errors import ConfigError

SITE = "resid_post.1"
SMOL = "real:smollm2-135m-instruct"


def test_offline_chat_set_is_big_enough_split_and_deterministic():
    from interplab.data.chat_corpus import chat_corpus, plain_texts

    c = chat_corpus(0)
    assert len(c.train) + len(c.eval) >= 1000 and len(c.eval) >= 100
    counts = c.counts()
    assert min(counts.values()) > 50, counts  # both kinds in both splits
    answers = lambda ds: {m["content"] for d in ds for m in d if m["role"] == "assistant"}
    assert not answers(c.train) & answers(c.eval)  # no held-out answer is trained on
    for d in c.train[:200] + c.eval[:50]:
        assert [m["role"] for m in d] in (["user", "assistant"], ["user", "assistant"] * 2)
        assert all(m["content"].strip() for m in d)
    assert chat_corpus(0).train[:5] == c.train[:5] and chat_corpus(1).train[:5] != c.train[:5]
    # BT(P)'s raw text is the training split's paragraphs, none of them a held-out answer
    assert not set(plain_texts()) & answers(c.eval)


def test_offline_chat_data_counts_and_typed_error():
    from interplab.sae.data import OFFLINE_CHAT, load_sae_data, offline_chat_data

    d = load_sae_data(None, OFFLINE_CHAT, 10, 5, 7, seed=0)
    assert (len(d.train), len(d.eval), len(d.texts)) == (10, 5, 7)
    assert "offline chat" in d.source and all(isinstance(t, str) for t in d.texts)
    with pytest.raises(ConfigError, match="too small for n_train=99999"):
        offline_chat_data(99999, 5, 5)


def test_massive_mask_per_sequence_and_with_padding():
    from interplab.core.scale import massive_mask

    x = torch.ones(2, 6, 4)
    x[0, 0] *= 500.0          # a sink at the first position of row 0
    assert massive_mask(x).tolist() == [[True] + [False] * 5, [False] * 6]
    # left padding whose positions are sinks too: without the real mask the median is a sink's norm
    y = torch.ones(1, 6, 4) * 500.0
    y[0, 4:] = 1.0            # positions 0-2 padding, 3 the real sink, 4-5 ordinary
    real = torch.tensor([[False, False, False, True, True, True]])
    assert not massive_mask(y)[0, 3]
    assert massive_mask(y, real=real)[0].tolist() == [True, True, True, True, False, False]
    with pytest.raises(ValueError):
        massive_mask(x, 1.0)


def test_cached_provider_serves_one_harvest_and_drops_planted_massive_rows(llama, dialogues):
    from interplab.sae.providers import CachedProvider, fast_provider

    inner = fast_provider(llama, dialogues, site=SITE, shuffle=False, exclude_massive=10.0)
    cp = CachedProvider(inner).harvest()
    forwards = inner.forwards
    for ch in cp._cache:       # plant a sink at each sample's first position
        ch.acts[0] *= 1e3
    served = list(cp.iter_chunks())
    again = list(cp.reseeded(7).iter_chunks(epochs=2))
    assert inner.forwards == forwards  # reseeded copies and later epochs run no model
    assert len(served) == len(dialogues) and len(again) == 2 * len(dialogues)
    for ch in served:
        assert (ch.position > 0).all()  # exactly the planted rows are gone
        assert len(ch.position) == len(inner.samples[int(ch.sample[0])]) - 1
    assert [int(c.sample[0]) for c in served] != [int(c.sample[0]) for c in again[:len(served)]]
    assert cp.describe()["cached"] and cp.mode == "fast" and cp.samples is inner.samples


def test_training_records_exclude_massive_and_checks_the_provider(llama, dialogues, tmp_path):
    from interplab.sae import load_sae, train_sae
    from interplab.sae.providers import fast_provider
    from interplab.sae.sites import sae_exclude_massive

    out = train_sae(llama, dialogues, site=SITE, architecture="topk", k=4, steps=3, batch_tokens=16,
                    out_dir=tmp_path / "s", exclude_massive=10.0)
    assert sae_exclude_massive(load_sae(out)) == 10.0
    with pytest.raises(ConfigError, match="exclude_massive"):
        train_sae(llama, fast_provider(llama, dialogues, site=SITE), site=SITE, architecture="topk", k=4, steps=3,
                  batch_tokens=16, out_dir=tmp_path / "t", exclude_massive=10.0)
    with pytest.raises(ConfigError, match="exclude_massive"):
        train_sae(llama, dialogues, site=SITE, steps=3, out_dir=tmp_path / "u", exclude_massive=0.5)


def test_splice_keeps_massive_positions_of_an_sae_trained_without_them(identity_sae):
    from interplab.sae.steering import SAESplice

    zero = copy.deepcopy(identity_sae)   # reconstructs everything as 0
    with torch.no_grad():
        zero.W_dec.zero_()
    x = torch.randn(1, 5, 64)
    x[0, 0] *= 1e3
    keep = SAESplice(zero, SITE, exclude_massive=10.0).apply(SITE, x, None)
    assert torch.equal(keep[0, 0], x[0, 0]) and keep[0, 1:].abs().max() == 0
    plain = SAESplice(zero, SITE).apply(SITE, x, None)  # metadata says nothing: every position replaced
    assert plain.abs().max() == 0
    assert "exclude_massive=10" in repr(SAESplice(zero, SITE, exclude_massive=10.0))


def test_shared_reference_gives_the_same_numbers_with_one_forward_per_sae(llama, dialogues, identity_sae):
    from interplab.sae.evals import evaluate_sae, evaluate_sae_packed

    other = copy.deepcopy(identity_sae)
    with torch.no_grad():
        other.W_dec.mul_(0.5)
    for fn, kw in ((evaluate_sae, {}), (evaluate_sae_packed, {"context_size": 16})):
        ref: dict = {}
        first = fn(llama, identity_sae, dialogues, site=SITE, positions="both", reference=ref, **kw)
        calls = []
        orig = llama.run
        llama.run = lambda *a, **k: calls.append(1) or orig(*a, **k)
        try:
            cached = fn(llama, other, dialogues, site=SITE, positions="both", reference=ref, **kw)
        finally:
            llama.run = orig
        fresh = fn(llama, other, dialogues, site=SITE, positions="both", **kw)
        n_batches = len(ref)
        assert n_batches >= 1
        assert first["delta_loss_pct"] == pytest.approx(0.0, abs=1e-6)  # identity SAE
        for k in ("ce_clean", "ce_sae", "ce_zero_ablation", "kl_sae", "ce_sae_response", "kl_sae_response"):
            assert cached[k] == pytest.approx(fresh[k], rel=1e-9, abs=1e-12), k
        assert cached["kl_sae"] > first["kl_sae"] + 1e-6  # the other SAE was really spliced in
        # one spliced forward per batch, plus the reconstruction harvest (not the clean / zero forwards again)
        assert len(calls) <= 2 * n_batches


def test_real_model_defaults_apply_only_to_smollm2():
    from interplab.experiments.registry import model_defaults

    d = model_defaults("sae-pareto", {"model": SMOL})
    assert d["data"] == "offline-chat" and d["exclude_massive"] == "10" and d["cache_activations"] == "true"
    assert d["ks"] == "32" and d["seeds"] == "0,1" and d["site"] == "resid_post.15"
    assert model_defaults("sae-pareto", {"model": "zoo:toy-chat"}) == {}
    assert model_defaults("sae-train", {"model": SMOL})["exclude_massive"] == "10"


def test_sae_train_runs_on_the_real_model(tmp_path):
    """Smoke: a few FAST TopK steps on SmolLM2 by name with the documented defaults (offline chat, layer 15, first
    position left out); the metadata says so and the evaluation spliced without the sink."""
    from interplab.experiments.registry import run_experiment
    from interplab.models import real
    from interplab.results.runs import load_run
    from interplab.sae import load_sae

    if not real.is_installed(real.real_model(SMOL)):
        pytest.fail(f"{SMOL} is not installed; `bash scripts/setup.sh install` installs the real models")
    path = run_experiment("sae-train", {"model": SMOL, "steps": "4", "n_train": "6", "n_eval": "3",
                                        "batch_tokens": "64"}, root=tmp_path)
    run = load_run(path)
    m = run.result("run").metrics
    assert m["exclude_massive"] == 10.0 and m["n_massive_excluded"] == 3  # one sink per evaluated dialogue
    assert m["l0"] <= 32 + 1e-9 and m["ce_sae"] > m["ce_clean"] - 1.0
    sae = load_sae(path / run.result("run").sae_path)
    assert sae.cfg.d_sae == 8 * 576 and sae.cfg.metadata.hook_name == "blocks.15.hook_resid_post"
    assert "offline chat" in sae.cfg.metadata.dataset_path


def test_steering_null_draws_a_live_feature_other_than_the_top_one(llama, dialogues, tmp_path):
    from interplab.sae import train_sae
    from interplab.sae.compare import special_token_steering
    from interplab.sae.data import SAEData
    from interplab.sae.features import feature_statistics

    sae = train_sae(llama, dialogues, site=SITE, architecture="topk", k=4, steps=5, batch_tokens=32,
                    out_dir=tmp_path / "s")
    data = SAEData(dialogues, dialogues, [], None, eval_answers=[None, "w1"] + [None] * (len(dialogues) - 2))
    stats = feature_statistics(llama, sae, dialogues, k=2, site=SITE)
    kw = dict(site=SITE, stats=stats, alphas_rel=(0.0, 1.0), n_prompts=2, max_new_tokens=3)
    top = special_token_steering(llama, sae, data, feature=-1, **kw)
    null = special_token_steering(llama, sae, data, feature=-2, null_seed=0, **kw)
    again = special_token_steering(llama, sae, data, feature=-2, null_seed=0, **kw)
    assert null.feature != top.feature and null.feature == again.feature
    assert stats.density[null.feature] > 0
    kept = null.table["answer_kept"]
    assert kept.isna().sum() == 2 and set(kept.dropna()) <= {0.0, 1.0}  # only the prompt with an answer is scored
    with pytest.raises(ConfigError):
        special_token_steering(llama, sae, data, feature=-3, **kw)
