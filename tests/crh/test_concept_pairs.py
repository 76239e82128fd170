"""Offline CRH concept pairs (issue 28 §1, interplab.data.concept_pairs) and the real-model pieces of the study: the
chat-template steering prompts, the fluency score and the elicitation tables."""
from __future__ import annotations

import re

import numpy as np
import pytest

from interplab.data.concept_pairs import (FRAMES, concept_lexicon, neutral_words, offline_concept_pairs,
                                          resolve_concepts)
from interplab.probes.crh import TokenSetJudge


def test_lexicon_covers_twenty_paper_concepts_with_their_own_words():
    from interplab.data.adapters.crh_concepts import paper_concepts

    lex = concept_lexicon()
    assert len(lex) >= 20
    ids = {r["concept_id"] for r in paper_concepts()}
    generic = {"such", "data", "terms", "related", "elements", "references", "concepts", "the", "and"}
    for key, c in lex.items():
        assert c.concept_id in ids, key
        assert len(c.words) >= 5, key
        assert not generic & {w.lower() for w in c.words}, (key, generic & set(c.words))
        assert len(set(c.words)) == len(c.words), key


def test_neutral_words_are_no_concepts_word():
    banned = {w.lower() for c in concept_lexicon().values() for w in c.words}
    nw = neutral_words()
    assert len(nw) >= 50
    assert not banned & {w.lower() for w in nw}


def test_pairs_differ_only_in_the_slot_words_and_the_judge_sees_the_concept_only_with_it():
    rows = offline_concept_pairs(n_pairs=30, seed=0)
    lex = concept_lexicon()
    assert len({r["concept"] for r in rows}) == len(lex)
    for key in lex:
        mine = [r for r in rows if r["concept"] == key]
        assert len(mine) == 30 and len({r["question"] for r in mine}) >= 25   # >= 25 distinct pairs per concept
        judge = TokenSetJudge(lex[key].words, gibberish=None)
        for r in mine:
            assert judge([r["resp_with_concept"]])[0] == 2, r
            assert judge([r["resp_no_concept"]])[0] == 1, r
            a, b = r["resp_no_concept"], r["resp_with_concept"]
            frame = next(f for f in FRAMES if re.fullmatch(r".* " + re.escape(f).replace(r"\{a\}", ".+?")
                                                           .replace(r"\{b\}", ".+?").replace(r"\{c\}", ".+?"), b))
            head = frame.split("{")[0]
            assert a.split(head)[0] == b.split(head)[0]          # same question answer before the aside
            assert head in a                                     # the same frame in both arms


def test_pairs_are_deterministic_and_seeded():
    a = offline_concept_pairs(["wetland", 484], n_pairs=5, seed=3)
    assert a == offline_concept_pairs(["wetland", 484], n_pairs=5, seed=3)
    assert a != offline_concept_pairs(["wetland", 484], n_pairs=5, seed=4)
    assert {r["concept"] for r in a} == {"wetland", "temperature"}


def test_unknown_concept_names_the_keys():
    from interplab.core.errors import ConfigError

    with pytest.raises(ConfigError, match="wetland"):
        resolve_concepts(["no-such-concept"])


def test_the_judge_words_are_held_out_from_the_words_that_build_the_pairs():
    """Issue 46: every concept keeps words of its own for the judge, in other word families than the
    build words; the with-concept text names build words only, so the judge sees nothing in either
    arm of a pair."""
    from interplab.data.concept_pairs import split_words, word_families

    lex = concept_lexicon()
    rows = offline_concept_pairs(n_pairs=30, seed=0)
    for key, c in lex.items():
        sp = split_words(c.words)
        assert sp.judge and sp.build and set(sp.build) | set(sp.judge) == set(c.words), key
        for fam in word_families(c.words):                  # a family lies wholly on one side
            assert set(fam) <= set(sp.build) or set(fam) <= set(sp.judge), (key, fam)
        mine = [r for r in rows if r["concept"] == key]
        assert {r["concept_words"] for r in mine} == {"|".join(sp.judge)}
        judge = TokenSetJudge(sp.judge, gibberish=None)
        build = TokenSetJudge(sp.build, gibberish=None)
        for r in mine:
            assert judge([r["resp_no_concept"], r["resp_with_concept"]]).tolist() == [1, 1], r
            assert build([r["resp_with_concept"]])[0] == 2, r
    # inflections, spellings and containment are one family; unrelated words are not
    assert word_families(["root", "roots", "trophy", "trophies", "kilometers", "kilometres", "log",
                          "logarithm", "script", "<script>", "marsh", "bog"]) == [
        ("root", "roots"), ("trophy", "trophies"), ("kilometers", "kilometres"),
        ("log", "logarithm"), ("script", "<script>"), ("marsh",), ("bog",)]
    # the issue-28 pairs: every word builds and judges
    old = offline_concept_pairs(["wetland"], n_pairs=3, seed=0, held_out_judge=False)
    assert old[0]["concept_words"] == "|".join(lex["wetland"].words)


def test_one_family_of_words_cannot_be_split():
    from interplab.core.errors import ConfigError
    from interplab.data.concept_pairs import split_words

    with pytest.raises(ConfigError, match="one family"):
        split_words(["loop", "loops", "looping"])


@pytest.fixture(scope="module")
def chat_ckpt(tmp_path_factory):
    """A random Llama checkpoint with a byte-level BPE trained on the pair texts (a word-level test
    tokenizer would read every English word as <unk>, so both arms of a pair would be the same ids)
    and the ChatML template."""
    import torch
    from transformers import AutoModelForCausalLM

    from interplab.data.bpe import train_bpe
    from interplab.testing import make_config

    rows = offline_concept_pairs(n_pairs=10, seed=0)
    tok = train_bpe([t for r in rows for t in (r["question"], r["resp_no_concept"], r["resp_with_concept"])],
                    vocab_size=400)
    path = tmp_path_factory.mktemp("bpe_chat")
    torch.manual_seed(0)
    cfg = make_config("llama", n_layers=2, vocab=len(tok), n_ctx=256)
    cfg.initializer_range = 0.2
    AutoModelForCausalLM.from_config(cfg).save_pretrained(str(path))
    tok.save_pretrained(str(path))
    return path


@pytest.fixture(scope="module")
def chat_model(chat_ckpt):
    """The checkpoint declared a chat model, as SmolLM2-Instruct's manifest does."""
    import interplab

    m = interplab.load_model(str(chat_ckpt))
    m.chat_default = True
    return m


def test_user_pairs_on_a_chat_model_steer_from_the_templated_user_turn(chat_model):
    from interplab.probes.crh.real_data import user_concept_data

    m = chat_model
    rows = offline_concept_pairs(["wetland"], n_pairs=6, seed=0)
    (data,) = user_concept_data(rows, n_test=2, seed=0, model=m)
    for p, (no, _) in zip(data.test_prompts, data.test_pairs):
        assert isinstance(p, list)                               # ids: steer_generate runs with chat=False
        gen = m.apply_chat_template([{"role": "user", "content": "x"}], add_generation_prompt=True)
        tail = gen[-3:]                                          # the template's generation prompt ends the ids
        assert p[-3:] == tail
        assert no[: len(p) - 3] == p[:-3]                        # the pair text starts with the same user turn


def test_continuation_nll_equals_a_direct_forward(chat_model):
    import torch

    from interplab.probes.crh.steering import continuation_nll, reply_nll

    m = chat_model
    tok = m.tokenizer
    prompts = [[5, 6, 7, 8], [9, 10]]
    texts = [tok.decode([11, 12, 13]), ""]
    got = continuation_nll(m, prompts, texts)
    assert np.isnan(got[1])
    cont = tok.encode(texts[0], add_special_tokens=False)
    ids = torch.tensor([prompts[0] + cont])
    with torch.no_grad():
        logp = torch.log_softmax(m.run([prompts[0] + cont], chat=False).logits.float(), -1)[0]
    want = -np.mean([float(logp[len(prompts[0]) - 1 + i, t]) for i, t in enumerate(cont)])
    assert got[0] == pytest.approx(want, rel=1e-5)
    assert ids.shape[1] == len(prompts[0]) + len(cont)
    r = reply_nll(m, texts)
    assert np.isfinite(r[0]) and np.isnan(r[1])


def test_elicitation_tables_from_a_small_study(chat_model):
    from interplab.probes.crh import run_concept_study
    from interplab.probes.crh.elicitation import elicitation_frame, elicitation_summary, fluency_threshold
    from interplab.probes.crh.real_data import user_concept_data
    from interplab.probes.crh.study import ConceptStudyConfig

    m = chat_model
    data = user_concept_data(offline_concept_pairs(["wetland", "temperature"], n_pairs=6, seed=0), n_test=2,
                             seed=0, model=m)
    cfg = ConceptStudyConfig(layers=[0], steer_layer=0, n_p=2, n_strengths=2, n_bins=3, max_new_tokens=3,
                             n_perm=5, position="mean", strength_unit="resid", penalty_lmax=1.0,
                             baseline_lmax=1.0, fluency=True)
    study = run_concept_study(m, data, cfg, log=lambda *_: None)
    c = study.concepts["wetland"]
    assert c.unit > 0 and c.null_labels.shape == (2,)
    assert c.nll["sector"].shape == c.sector.labels.shape and c.nll["baselines"].shape == c.baselines.labels.shape
    thr = fluency_threshold(study)
    el = elicitation_frame(study)
    assert el.attrs["fluency_threshold"] == thr
    assert set(el["method"]) == {"unsteered", "diffmean", "pca", "probe", "penalty p=0", "sector", "sector best"}
    assert (el["fluent_concept_rate"] <= el["concept_rate"] + 1e-12).all()
    assert (el.loc[el["method"] == "unsteered", "step"] == 0).all()
    su = elicitation_summary(el, B=200)
    row = su[(su["method"] == "diffmean") & (su["step"] == 1)].iloc[0]
    assert row["concept_rate_lo"] <= row["concept_rate"] <= row["concept_rate_hi"]
    assert row["n_concepts"] == 2
    # a threshold below every reply's NLL makes no reply fluent: the fluent rate is then 0 everywhere
    assert (elicitation_frame(study, threshold=-1.0)["fluent_concept_rate"] == 0).all()


def test_study_config_rejects_unknown_read_position():
    from interplab.core.errors import ConfigError
    from interplab.probes.crh.study import ConceptStudyConfig

    with pytest.raises(ConfigError, match="position"):
        ConceptStudyConfig(position="first").validate()
    with pytest.raises(ConfigError, match="strength_unit"):
        ConceptStudyConfig(strength_unit="norm").validate()
    with pytest.raises(ConfigError, match="n_bins"):
        ConceptStudyConfig(n_bins=2).validate()


def test_control_pairs_differ_without_any_concept():
    from interplab.data.concept_pairs import CONTROL, control_pairs

    rows = control_pairs(30, seed=0)
    assert len(rows) == 30 and {r["concept"] for r in rows} == {CONTROL}
    pseudo = set(rows[0]["concept_words"].split("|"))
    assert len(pseudo) == 8 and {r["concept_words"] for r in rows} == {rows[0]["concept_words"]}
    pseudo_judge = TokenSetJudge(pseudo, gibberish=None)
    assert pseudo_judge([r["resp_with_concept"] for r in rows]).tolist() == [2] * 30   # its words, like a concept's
    assert pseudo_judge([r["resp_no_concept"] for r in rows]).tolist() == [1] * 30
    judges = [TokenSetJudge(c.words, gibberish=None) for c in concept_lexicon().values()]
    for r in rows:
        assert r["resp_no_concept"] != r["resp_with_concept"]
        for j in judges:
            a, b = j([r["resp_no_concept"], r["resp_with_concept"]]).tolist()
            assert a == b                        # the slot words add no real concept (a shared fact may name one)


def test_sector_holdout_finds_a_planted_sector_and_not_a_flat_one():
    """A sector map whose bin 2 elicits on every prompt gives a positive held-out gain; a map where each prompt has its
    own random best bin gives none on average (the test can fail both ways)."""
    from types import SimpleNamespace

    from interplab.probes.crh.elicitation import sector_holdout
    from interplab.probes.crh.sectors import SectorMap, sector_angles

    rng = np.random.default_rng(0)

    def study(shared: bool):
        concepts = {}
        for i in range(20):
            lab = np.ones((6, 8, 4), np.int64)
            for s in range(6):
                b = 2 if shared else int(rng.integers(8))
                lab[s, b, 1:] = 2
            concepts[f"c{i}"] = SimpleNamespace(sector=SectorMap(labels=lab, strengths=np.arange(1.0, 5.0),
                                                                 bin_angles=sector_angles(8), gamma_deg=45.0))
        return SimpleNamespace(concepts=concepts)

    df, s = sector_holdout(study(True), B=500)
    assert s["heldout_gain_lo"] > 0.5 and (df["best_bin_deg"] == 90.0).all()
    _, s = sector_holdout(study(False), B=500)
    assert s["heldout_gain_lo"] < 0 < s["heldout_gain_hi"] or abs(s["heldout_gain"]) < 0.1


def test_choose_read_picks_the_best_setting_on_the_selection_concepts_only(chat_model):
    from interplab.probes.crh.real_data import user_concept_data
    from interplab.probes.crh.selection import choose_read, split_concepts

    data = user_concept_data(
        offline_concept_pairs(["wetland", "temperature", "price"], n_pairs=6, seed=0),
        n_test=2, seed=0, model=chat_model)
    sel, scored = split_concepts(data, 1, seed=0)
    assert (sel, scored) == split_concepts(data, 1, seed=0) and len(sel) == 1 and len(scored) == 2
    assert not {c.name for c in sel} & {c.name for c in scored}
    ch = choose_read(chat_model, sel, positions=("last", "mean"), layers=(0, 1), lmax=1.0,
                     n_strengths=2, max_new_tokens=3, scored=[c.name for c in scored],
                     log=lambda *_: None)
    t = ch.table()
    steered = t[t["step"] > 0]
    assert len(steered) == 2 * 2 * 2 and ch.held_out and set(ch.replies["concept"]) == {sel[0].name}
    best = steered["fluent_concept_rate"].max()
    first = steered[steered["fluent_concept_rate"] == best].iloc[0]   # ties: the earlier candidate
    assert (ch.position, ch.layer, ch.step) == (first["position"], first["layer"], first["step"])
    from interplab.core.errors import ConfigError

    with pytest.raises(ConfigError, match="n_select"):
        split_concepts(data, 3)


def test_crh_concepts_saves_its_verdicts_and_the_held_out_choice(chat_ckpt, tmp_path):
    """The experiment end to end on the tiny checkpoint: one concept chooses the settings, two are
    scored, each with a pseudo-concept control; the run saves its validity report (every verdict
    inconclusive here: 2 concepts are too few for an interval)."""
    import json

    from interplab.experiments.registry import run_experiment
    from interplab.results import load_run

    path = run_experiment("crh-concepts", {
        "model": str(chat_ckpt), "concepts": "wetland,temperature,price", "n_train": "4",
        "n_test": "2", "layers": "0,1", "select_layers": "0,1", "n_strengths": "2", "n_p": "2",
        "n_bins": "3", "max_new_tokens": "3", "n_perm": "5", "select_concepts": "1"},
        root=tmp_path)
    run = load_run(path)
    report, ch = run.validity(), run.result("read_choice")
    assert set(report.outcomes.values()) == {"inconclusive"} and len(report.outcomes) == 6
    assert ch.held_out and len(ch.scored) == 2
    study = run.result("study")
    assert set(study.concepts) == set(ch.scored) and study.position == ch.position
    assert all("control" in c.baselines.methods and c.control for c in study.concepts.values())
    ctl = study.concepts[ch.scored[0]].baselines
    np.testing.assert_allclose(ctl.norms[ctl.methods.index("control")],
                               ctl.norms[ctl.methods.index("diffmean")])
    s = json.loads((path / "json" / "summary.json").read_text())
    assert s["read_choice"]["held_out"] and s["steer_layer"] == ch.layer
    assert (path / "tables" / "control_stats.csv").exists()
    assert (path / "tables" / "read_selection.csv").exists()
