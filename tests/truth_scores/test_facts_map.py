"""Truth Scores on counterfactual world facts (issue 27 §1): grouped folds, the pair-swap null, maxT / BH, a planted
head found and a null found empty, the experiment end to end on a random checkpoint with a BPE tokenizer, and the
model-family defaults that make it the real-model run."""
import numpy as np
import pandas as pd
import pytest

from interplab.core.errors import ConfigError, InputError
from interplab.probes.stats import bh_qvalues
from interplab.probes.truth.facts_map import (FactsTruthMap, facts_map_from_activations, group_folds,
                                              group_permutations)
from interplab.probes.truth.scores import TruthScoresConfig

FAST = TruthScoresConfig(solver="lbfgs", dtype="float64", folds=4)


def _pairs(n_pairs: int, L=3, H=4, D=8, planted=None, strength=2.0, seed=0):
    rng = np.random.default_rng(seed)
    y = np.tile([1, 0], n_pairs)
    groups = np.repeat(np.arange(n_pairs), 2)
    X = rng.normal(size=(2 * n_pairs, L, H, D))
    if planted is not None:
        X[:, planted[0], planted[1], 0] += strength * (y - 0.5)
    return X, y, groups


def test_group_folds_keep_pairs_together_and_cover_all():
    groups = np.repeat(np.arange(23), 2)
    folds = group_folds(groups, 5, seed=3)
    test = np.concatenate([te for _, te in folds])
    assert sorted(test.tolist()) == list(range(46))
    for tr, te in folds:
        assert not set(groups[tr]) & set(groups[te])
    with pytest.raises(InputError, match="at least 5 facts"):
        group_folds(np.repeat(np.arange(3), 2), 5)


def test_group_permutations_keep_one_positive_per_fact():
    y = np.tile([1, 0], 50)
    groups = np.repeat(np.arange(50), 2)
    sw = group_permutations(y, groups, 200, seed=1)
    assert sw.shape == (200, 100)
    assert (sw.reshape(200, 50, 2).sum(2) == 1).all()          # every pair keeps one 1 and one 0
    flipped = (sw != y[None]).reshape(200, 50, 2)[:, :, 0].mean()
    assert 0.45 < flipped < 0.55
    # triplets in shuffled row order: the positive lands on each member about a third of the time
    rng = np.random.default_rng(0)
    order = rng.permutation(90)
    y3, g3 = np.tile([1, 0, 0], 30)[order], np.repeat(np.arange(30), 3)[order]
    sw3 = group_permutations(y3, g3, 300, seed=2)
    for g in range(30):
        members = np.flatnonzero(g3 == g)
        assert (sw3[:, members].sum(1) == 1).all()
        assert 0.22 < sw3[:, members[0]].mean() < 0.45


def test_bh_qvalues_against_the_definition():
    p = np.array([0.01, 0.04, 0.03, 0.2, 0.5])
    # sorted 0.01, 0.03, 0.04, 0.2, 0.5 -> p*m/rank 0.05, 0.075, 0.0667, 0.25, 0.5 -> running min from the top
    assert bh_qvalues(p) == pytest.approx([0.05, 0.0666667, 0.0666667, 0.25, 0.5], rel=1e-5)
    assert bh_qvalues(p.reshape(5, 1)).shape == (5, 1)


def test_planted_head_is_found_and_survives_max_t():
    X, y, g = _pairs(80, planted=(1, 2))
    fm = facts_map_from_activations(X, y, g, config=FAST, n_null=39, fold_seeds=(1,))
    assert isinstance(fm, FactsTruthMap)
    top = fm.top_head()
    assert (top["layer"], top["head"]) == (1, 2) and top["S"] > 0.8 and top["lo"] > 0.5
    sig = fm.significant("maxt")
    assert sig[1, 2] and sig.sum() <= 2
    per = fm.per_layer()
    assert per.loc[1, "n_sig_maxt"] >= 1 and per["n_sig_maxt"].sum() == sig.sum()
    summ = fm.summary()
    assert summ["n_sig_maxt"] == sig.sum() and summ["top_head"]["layer"] == 1
    assert summ["null_mean_S"] == pytest.approx(0.5, abs=0.05)
    df = fm.to_frame()
    assert len(df) == 12 and {"p_perm", "p_maxt", "q_bh", "sig_maxt", "evidence_mass"} <= set(df.columns)


def test_no_planted_head_finds_nothing_family_wise():
    X, y, g = _pairs(80, seed=5)
    fm = facts_map_from_activations(X, y, g, config=FAST, n_null=39, fold_seeds=())
    assert fm.significant("maxt").sum() <= 1                      # 5 % family-wise; one seed
    assert (fm.p_perm <= 0.05).mean() <= 0.25
    assert fm.scores.scores.max() < 0.7


def test_bad_inputs_raise_typed_errors():
    X, y, g = _pairs(10)
    with pytest.raises(InputError, match="n_null"):
        facts_map_from_activations(X, y, g, config=FAST, n_null=0)
    with pytest.raises(InputError, match="alpha"):
        facts_map_from_activations(X, y, g, config=FAST, n_null=2, alpha=1.5)
    fm = facts_map_from_activations(X, y, g, config=FAST, n_null=2, fold_seeds=())
    with pytest.raises(InputError, match="rule"):
        fm.significant("bonferroni")


# --------------------------------------------------------------------------------------------- model-facing
@pytest.fixture(scope="module")
def bpe_ckpt(tmp_path_factory):
    """A random 2-layer llama whose byte-level BPE tokenizer was trained on the fact sentences (the facts tokenize
    into real sub-words, as on a real model)."""
    from interplab.data.bpe import train_bpe
    from interplab.data.world_facts import RELATIONS, fact_sentence, load_facts, question_for
    from interplab.train.arch import ArchConfig, build_model
    from interplab.train.checkpoint import save_checkpoint

    facts = load_facts()
    texts = [fact_sentence(r, s, o) + " " + question_for(r, s) for r, s, o in facts.itertuples(index=False)]
    tok = train_bpe(texts * 2 + ["Answer with the answer only. Context: Question:"] * 4, vocab_size=600)
    arch = ArchConfig(family="llama", n_layers=2, d_model=32, d_mlp=64, n_heads=4, n_kv_heads=2, d_head=8, n_ctx=160)
    assert set(RELATIONS) == set(facts["relation"])
    return save_checkpoint(build_model(arch, tok, seed=0), tok, tmp_path_factory.mktemp("facts_bpe") / "m")


def test_fact_rows_point_at_the_context_value(bpe_ckpt):
    import interplab
    from interplab.data.world_facts import counterfactual_items, load_facts
    from interplab.probes.truth.facts_map import fact_probe_rows

    model = interplab.load_model(str(bpe_ckpt), device="cpu")
    items = counterfactual_items(load_facts())[:6]
    rows = fact_probe_rows(model, items)
    assert len(rows) == 12 and sorted(r["label"] for r in rows) == [0] * 6 + [1] * 6
    by_index = {it["index"]: it for it in items}
    for r in rows:
        ev = model.tokenizer.decode([r["text"][i] for i in r["evidence"]]).strip()
        assert ev == by_index[r["index"]]["context_value"]
        answer = by_index[r["index"]]["context_value" if r["label"] else "memory_value"]
        assert model.tokenizer.decode(r["text"]).endswith(answer)
        text = model.tokenizer.decode(r["text"])
        assert text.startswith("<|im_start|>") and "<|im_end|> <|im_start|> assistant" in text  # the chat format


def test_world_facts_experiment_end_to_end(tmp_path, bpe_ckpt):
    from interplab.experiments.registry import run_experiment
    from interplab.results import load_run

    path = run_experiment("truth-scores", {"model": str(bpe_ckpt), "data": "world-facts", "known": "all",
                                           "n_facts": "16", "n_null": "3", "folds": "2", "epochs": "5",
                                           "figure_formats": ""}, root=tmp_path)
    run = load_run(path)
    fm = run.result("facts_map")
    assert isinstance(fm, FactsTruthMap) and fm.scores.scores.shape == (2, 4) and fm.n_null == 3
    assert fm.evidence_mass.max() > 0 and len(fm.rows) == 48          # context, memory, distractor per fact
    summ = run.json("summary")
    assert summ["data"] == "world-facts" and summ["n_facts"] == 16 and summ["n_heads"] == 8
    assert summ["candidates"] == ["context", "distractor", "memory"]
    assert len(pd.read_csv(path / "tables" / "scores.csv")) == 8
    pairs = run_experiment("truth-scores", {"model": str(bpe_ckpt), "data": "world-facts", "known": "all",
                                            "n_facts": "16", "n_null": "2", "folds": "2", "epochs": "5",
                                            "distractors": "false", "figure_formats": ""}, root=tmp_path)
    assert len(load_run(pairs).result("facts_map").rows) == 32
    with pytest.raises(ConfigError, match="no shipped closed-book filter"):
        run_experiment("truth-scores", {"model": str(bpe_ckpt), "data": "world-facts", "n_null": "2"},
                       root=tmp_path)
    with pytest.raises(ConfigError, match="known must be one of"):
        run_experiment("truth-scores", {"model": str(bpe_ckpt), "data": "world-facts", "known": "some"},
                       root=tmp_path)


# --------------------------------------------------------------------------------------------- model defaults
def test_real_model_defaults_apply_under_the_users_settings():
    from interplab.experiments.registry import model_defaults

    smol = {"model": "real:smollm2-135m-instruct"}
    assert model_defaults("truth-scores", smol) == {"data": "world-facts", "fmt": "chat"}
    assert model_defaults("truth-scores", {**smol, "data": "mine.csv"}) == {"fmt": "chat"}
    assert model_defaults("truth-scores", {"model": "zoo:toy-base"}) == {}
    assert model_defaults("truth-scores", {"model": "real:gemma-3-270m"})["known"] == "smollm2-135m-instruct"
    assert model_defaults("truth-lineage", smol) == {}


def test_model_defaults_are_validated():
    import dataclasses

    from interplab.methods import get_method

    spec = get_method("truth")
    with pytest.raises(ConfigError, match="model_defaults"):
        dataclasses.replace(spec, model_defaults={"not-mine": {"model=x": ("a=1",)}}).validate()
    with pytest.raises(ConfigError, match="malformed"):
        dataclasses.replace(spec, model_defaults={"truth-scores": {"model=x": ("oops",)}}).validate()


def test_shipped_known_filter_aligns_with_the_facts():
    from interplab.data.world_facts import load_facts, load_known, shipped_known

    assert "smollm2-135m-instruct" in shipped_known()
    facts = load_facts()
    known = load_known("real:smollm2-135m-instruct", facts)
    assert len(known) == len(facts) and known.dtype == bool and 300 <= known.sum() < len(facts)
    with pytest.raises(ConfigError, match="no shipped closed-book filter"):
        load_known("real:gemma-3-270m", facts)


# --------------------------------------------------------------------------------------------- gating
def test_split_items_is_disjoint_and_seeded():
    from interplab.probes.truth.facts_gating import split_items

    items = [{"index": i} for i in range(50)]
    p, t, e = split_items(items, seed=3)
    ids = [it["index"] for part in (p, t, e) for it in part]
    assert sorted(ids) == list(range(50)) and (len(p), len(t), len(e)) == (20, 10, 20)
    assert split_items(items, seed=3)[0] == p and split_items(items, seed=4)[0] != p
    with pytest.raises(ConfigError, match="fractions"):
        split_items(items, (0.5, 0.5))
    with pytest.raises(InputError, match="too few"):
        split_items(items[:4])


def test_forced_choice_reads_the_two_values_first_tokens(bpe_ckpt):
    import interplab
    import torch

    from interplab.data.world_facts import counterfactual_items, load_facts
    from interplab.probes.truth.facts_gating import forced_choice, forced_choice_items

    model = interplab.load_model(str(bpe_ckpt), device="cpu")
    items = counterfactual_items(load_facts())[:10]
    fc = forced_choice_items(model, items)
    prompts, c_ids, m_ids, kept = fc
    assert len(prompts) == len(kept) and (c_ids != m_ids).all()
    got = forced_choice(model, fc, batch_size=4)
    with torch.no_grad():
        logits = model.run(prompts, chat=False).logits[:, -1]
    ref = (logits[range(len(kept)), c_ids] > logits[range(len(kept)), m_ids]).numpy()
    assert (got == ref).all()


def test_world_facts_gating_experiment_end_to_end(tmp_path, bpe_ckpt):
    from interplab.experiments.registry import run_experiment
    from interplab.probes.truth.facts_gating import FactsGating
    from interplab.results import load_run

    path = run_experiment("truth-gating-sweep", {
        "target": str(bpe_ckpt), "score_source": "self", "data": "world-facts", "known": "all", "n_facts": "80",
        "n_maps": "3", "n_null_replies": "1", "folds": "2", "epochs": "5", "normalize_alphas": "0.1,0.3",
        "contrast_alphas": "6",
        "sites": "z", "max_new_tokens": "3", "figure_formats": ""}, root=tmp_path)
    run = load_run(path)
    res = run.result("facts_gating")
    assert isinstance(res, FactsGating)
    assert list(res.tune["mode"]) == ["ungated", "normalize", "normalize", "contrast"]
    assert res.tune["in_range"].all() and set(res.tune.columns) >= {"eligible", "failed", "nll_per_token",
                                                                    "distinct_token_rate", "top_reply_share"}
    tune_replies = res.replies[res.replies["split"] == "tune"]
    assert len(tune_replies) == 4 * res.n_split["tune"] and tune_replies["tokens"].notna().all()
    assert set(res.facts) == {"probe", "tune", "eval"} and not set(res.facts["tune"]) & set(res.facts["eval"])
    report = run.validity()
    assert report is not None and len(report.verdicts) == 2
    if res.gated:   # a random model's replies may fail the degeneracy checks for every setting
        assert res.mode in ("normalize", "contrast") and len(res.null) == 3 and 0 < res.p <= 1
        assert set(res.eval["condition"]) == {"ungated", "gated"} and (res.eval["lo"] <= res.eval["rate"]).all()
        assert set(res.replies[res.replies["split"] == "eval"]["condition"]) == {"ungated", "gated", "shuffled 1"}
    else:
        assert res.mode == "none" and len(res.null) == 0 and set(report.outcomes.values()) == {"inconclusive"}
    summ = run.json("summary")
    assert summ["select_by"] == "generated_context" and set(summ["verdicts"]) == set(report.outcomes)


def test_world_facts_gating_gated_path(bpe_ckpt, monkeypatch):
    """The gated path end to end on a random model (whose replies fail the degeneracy checks, so every setting is
    made eligible here: the checks themselves are tested in test_gating_validity): the null, the shuffled maps'
    replies, and verdicts that name the failed generation checks."""
    import interplab
    from interplab.data.world_facts import counterfactual_items, load_facts
    from interplab.probes.truth import facts_fluency
    from interplab.probes.truth.facts_gating import facts_gating, split_items
    from interplab.probes.truth.gating_verdicts import gating_verdicts
    from interplab.probes.truth.scores import TruthScoresConfig

    monkeypatch.setattr(facts_fluency, "generation_checks", lambda *a, **k: [])
    model = interplab.load_model(str(bpe_ckpt), device="cpu")
    probe, tune, ev = split_items(counterfactual_items(load_facts())[:60], seed=1)
    res = facts_gating(model, probe, tune, ev, probe_config=TruthScoresConfig(folds=2, epochs=5),
                       alphas={"contrast": [4.5, 7.5]}, n_maps=4, n_null_replies=2, max_new_tokens=3)
    assert res.gated and (res.mode, res.alpha) in {("contrast", 4.5), ("contrast", 7.5)}
    assert len(res.null) == 4 and res.p in {k / 5 for k in range(1, 6)}
    ev_rep = res.replies[res.replies["split"] == "eval"]
    assert list(ev_rep["condition"].unique()) == ["ungated", "gated", "shuffled 1", "shuffled 2"]
    assert len(ev_rep) == 4 * len(ev) and np.isfinite(ev_rep["nll"]).any()
    assert set(res.diff["readout"]) == {"generated_context", "generated_memory", "generated_distractor",
                                        "forced_choice"}
    assert set(res.fluency["condition"]) == {"ungated", "gated", "shuffled 1", "shuffled 2"}
    for v in gating_verdicts(res):
        assert v.outcome == "inconclusive" and any(c.kind == "repeated_reply" for c in v.failed)


def test_a_model_without_chat_template_reads_the_plain_message_with_its_bos(bpe_ckpt):
    """A base model (Gemma-3-270M has no template): "...?\\nAnswer: <value>" with the tokenizer's <bos>, and the
    evidence still covers the context's value."""
    import copy

    from transformers import AutoTokenizer

    from interplab.data.world_facts import counterfactual_items, generation_prompt, load_facts
    from interplab.probes.truth.facts_map import _encode

    tok = copy.deepcopy(AutoTokenizer.from_pretrained(str(bpe_ckpt)))
    tok.chat_template = None
    it = counterfactual_items(load_facts())[0]
    prompt = generation_prompt(it, tok)
    ids, ev = _encode(tok, prompt, it["memory_value"], it["context_value"])
    assert ids[0] == tok.bos_token_id and prompt.endswith("\nAnswer:")
    assert tok.decode(ids, skip_special_tokens=True).endswith("Answer: " + it["memory_value"])
    assert tok.decode([ids[i] for i in ev]).strip() == it["context_value"]


def test_world_facts_lineage_of_a_model_with_itself(tmp_path, bpe_ckpt):
    """truth-lineage data=world-facts: every role reads the same items, so a model against itself correlates 1 and
    keeps every weight."""
    from interplab.experiments.registry import run_experiment
    from interplab.results import load_run

    path = run_experiment("truth-lineage", {"base": str(bpe_ckpt), "descendant": str(bpe_ckpt), "control": "",
                                            "data": "world-facts", "known": "all", "n_facts": "24", "n_null": "2",
                                            "distractors": "false", "folds": "2", "epochs": "30",
                                            "n_permutations": "50",
                                            "figure_formats": ""}, root=tmp_path)
    res = load_run(path).result("lineage")
    row = res.lineage.iloc[0]
    assert np.ptp(res.base.scores.scores) > 0        # a constant map would make every correlation NaN
    assert row["pair"] == "base↔descendant" and row["pearson"] == pytest.approx(1.0)
    assert len(res.nulls["descendant"]) == 50 and 0 < row["perm_p"] <= 1   # (8 heads: the null is coarse)
    assert res.base.scores.provenance["n_null"] == 2 and len(res.base.evidence_mass) == 2
    assert res.weights_descendant["cos_OV"].min() == pytest.approx(1.0)
    with pytest.raises(ConfigError, match="truth-lineage data"):
        run_experiment("truth-lineage", {"base": str(bpe_ckpt), "descendant": str(bpe_ckpt), "control": "",
                                         "data": "facts"}, root=tmp_path)
