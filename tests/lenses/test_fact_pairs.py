"""Fact pairs (interplab.data.fact_pairs) and the lens study over them (probes/lenses/facts.py, experiment
`lenses-facts`; issue 27 §3)."""
from __future__ import annotations

import csv
import json

import numpy as np
import pandas as pd
import pytest
import torch

from interplab.core.errors import DataError, ShapeError
from interplab.data.fact_pairs import fact_pairs, pairs_from_rows, prompt_prefix
from interplab.probes.lenses.facts import ROLES, FactLensConfig, FactLensStudy, fact_lens_study, position_roles

SMOLLM2 = "real:smollm2-135m-instruct"


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _real_tokenizer(name: str):
    from transformers import AutoTokenizer

    from interplab.models import real

    if not real.is_installed(real.real_model(name)):
        pytest.skip(f"{name} is not installed (`bash scripts/setup.sh install` installs the real models)")
    return AutoTokenizer.from_pretrained(str(real.checkpoint_for(name)))


def test_prompt_prefix_cuts_the_fact_sentence_before_its_object():
    assert prompt_prefix("capital", "France") == "The capital of France is"
    assert prompt_prefix("currency", "Japan") == "The currency of Japan is the"
    assert prompt_prefix("continent", "the Netherlands") == "The Netherlands is in"


def test_fact_pairs_on_smollm2_keep_the_rules_and_the_gold_comes_from_the_facts():
    from interplab.data.world_facts import load_facts, load_known

    tok = _real_tokenizer(SMOLLM2)
    facts = load_facts()
    known = load_known(SMOLLM2, facts)
    pairs = fact_pairs(tok, known=known, seed=0)
    assert len(pairs) >= 50
    gold = {(r, s): o for r, s, o in zip(facts["relation"], facts["subject"], facts["object"])}
    kept = {(r, s) for r, s, k in zip(facts["relation"], facts["subject"], known) if k}
    for p in pairs:
        assert len(p.clean_ids) == len(p.corrupt_ids) and p.clean_ids != p.corrupt_ids
        assert tok(p.answer, add_special_tokens=False)["input_ids"] == [p.answer_id]
        assert tok(p.wrong, add_special_tokens=False)["input_ids"] == [p.wrong_id]
        assert p.answer_id != p.wrong_id
        assert p.answer == " " + gold[p.relation, p.subject] and p.wrong == " " + gold[p.relation, p.corrupt_subject]
        assert (p.relation, p.subject) in kept and (p.relation, p.corrupt_subject) in kept
        assert p.clean == prompt_prefix(p.relation, p.subject)
        assert tok(p.clean + p.answer)["input_ids"] == p.clean_ids + [p.answer_id]   # the answer is the next token
    assert len({p.relation for p in pairs[:14]}) == 7                                    # a prefix mixes relations
    again = fact_pairs(tok, known=known, seed=0, n=50)
    assert [(p.clean, p.corrupt) for p in again] == [(p.clean, p.corrupt) for p in pairs[:50]]
    other = fact_pairs(tok, known=known, seed=1, n=50)
    assert [(p.clean, p.corrupt) for p in other] != [(p.clean, p.corrupt) for p in again]


def test_pairs_from_rows_drops_rows_that_break_the_rules(checkpoint_factory):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(checkpoint_factory("gpt2")))
    rows = [dict(clean="w1 w2 w3", corrupt="w1 w9 w3", answer="w5", wrong="w6"),
            dict(clean="w1 w2 w3", corrupt="w1 w2 w3 w4", answer="w5", wrong="w6"),    # unequal lengths
            dict(clean="w1 w2 w3", corrupt="w1 w9 w3", answer="w5 w7", wrong="w6"),    # two-token answer
            dict(clean="w1 w2 w3", corrupt="w1 w9 w3", answer="w5", wrong="w5")]       # answer == wrong
    pairs, dropped = pairs_from_rows(tok, rows)
    assert len(pairs) == 1 and dropped == 3 and pairs[0].answer == " w5"
    with pytest.raises(DataError, match="missing column"):
        pairs_from_rows(tok, [dict(clean="w1", corrupt="w2")])
    with pytest.raises(DataError, match="no row"):
        pairs_from_rows(tok, rows[1:])


def test_position_roles():
    r = position_roles([1, 5, 6, 7, 8, 9], [1, 5, 16, 17, 8, 9])
    assert [ROLES[i] for i in r] == ["prefix", "prefix", "subject", "subject_last", "after", "last"]
    assert [ROLES[i] for i in position_roles([3, 4, 5], [7, 4, 5])] == ["subject_last", "after", "last"]
    with pytest.raises(Exception, match="identical"):
        position_roles([1, 2], [1, 2])


# ---------------------------------------------------------------------------------------------- the study
def _toy_rows():
    """Pairs on the random checkpoints' word vocabulary: one swapped word (position 2 after <bos>), and one pair
    whose prompts differ in two words."""
    rows = [dict(clean=f"w1 w{a} w3 w4", corrupt=f"w1 w{b} w3 w4", answer=f"w{a + 20}", wrong=f"w{b + 20}")
            for a, b in [(2, 9), (5, 6), (7, 8), (11, 12), (13, 14), (15, 16)]]
    rows.append(dict(clean="w1 w2 w3 w4", corrupt="w1 w9 w10 w4", answer="w30", wrong="w31"))
    return rows


@pytest.mark.parametrize("backend", ["bridge", "nnsight"])
def test_fact_lens_study_on_a_random_gpt2(model_factory, backend):
    m = model_factory("gpt2", backend=backend, dtype=torch.float64, n_layers=3)
    pairs, _ = pairs_from_rows(m.tokenizer, _toy_rows())
    st = fact_lens_study(m, pairs, n_boot=200, n_splits=40, top_k=3, min_span=0.0, ig_steps=2, batch_size=7)
    n, L, H, P = len(pairs), m.n_layers, m.n_heads, 5
    assert st.answer_rank.shape == (n, L) and st.head_patch.shape == (n, L, H) and st.resid_patch.shape == (n, L, P)
    assert st.resid_attr.shape == (2, n, L, P) and st.dla.heads.shape == (n, L, H)
    assert list(st.pairs["n_tokens"]) == [P] * n
    # the planted fact of patching: the two runs differ only at the swapped word, so at layer 0 (the embeddings)
    # patching that one position turns the corrupt run into the clean one (normalised 1) and any other position
    # changes nothing (0); with two words swapped, neither position alone restores it (the check can fail)
    one = st.resid_patch[:6, 0]
    np.testing.assert_allclose(one[:, 2], 1.0, atol=1e-9)
    np.testing.assert_allclose(np.delete(one, 2, axis=1), 0.0, atol=1e-9)
    two = st.resid_patch[6, 0]
    assert abs(two[2] - 1) > 1e-3 and abs(two[3] - 1) > 1e-3 and abs(two[2] + two[3]) > 1e-3
    assert [ROLES[i] for i in st.roles[6]] == ["prefix", "prefix", "subject", "subject_last", "last"]
    # the logit lens's last layer is the model; DLA sums to the clean metric
    for i, p in enumerate(pairs):
        logits = m.run([p.clean_ids]).logits[0, -1].double()
        assert st.answer_rank[i, -1] == int((logits > logits[p.answer_id]).sum())
    np.testing.assert_allclose(st.dla.total, st.pairs["clean_metric"], atol=1e-8)
    assert ((st.attribution["spearman"].abs() <= 1 + 1e-12) | st.attribution["spearman"].isna()).all()
    assert set(st.attribution["method"]) == {"gradient", "ig"} and len(st.attribution) == 4 * n
    inc = st.included
    assert inc.sum() == (st.pairs["span"] >= 0).sum()
    # aggregates have the documented shapes and respect their definitions
    rm = st.role_map()
    assert len(rm) == L * len(ROLES)
    sub = rm[(rm.layer == 0) & (rm.role == "subject_last")].iloc[0]
    assert sub["lo"] <= sub["mean"] <= sub["hi"]
    top = st.top_heads("patching")
    assert len(top) == 3 and (top["boot_freq"].between(0, 1)).all()
    mean = np.nanmean(st.head_patch[inc], 0)
    assert abs(top["mean"].iloc[0]) == pytest.approx(np.abs(mean).max())
    assert st.top_k_frequency("dla").sum() == pytest.approx(3)
    assert st.to_frame().shape[0] == L * H
    json.dumps(st.summary())


def _synthetic(maps: np.ndarray, dla: np.ndarray, **cfg) -> FactLensStudy:
    """A study built from given per-pair head maps (no model), for the aggregation's own checks."""
    from interplab.probes.lenses.dla import DLAResult

    n, L, H = maps.shape
    P = 4
    pairs = pd.DataFrame({"clean_metric": np.full(n, 2.0), "corrupt_metric": np.zeros(n), "included": True,
                          "final_rank": 0, "relation": "r"})
    z = np.zeros((n, L))
    return FactLensStudy("synthetic", FactLensConfig(**cfg).validate(), pairs, z, z, np.tile(np.arange(P) % 5, (n, 1)),
                         np.zeros((n, L, P)), np.zeros((2, n, L, P)), maps, np.zeros((2, n, L, H)),
                         DLAResult(dla, np.zeros((n, L)), np.zeros((n, L)), np.zeros(n), np.zeros(n), np.zeros(n)),
                         pd.DataFrame({"site": ["attn_z"] * n, "method": ["gradient"] * n,
                                       "spearman": np.linspace(0.5, 0.9, n), "pearson": 0.9, "pair": np.arange(n)}))


def test_top_head_stability_finds_a_planted_head_and_not_noise():
    rng = np.random.default_rng(0)
    n, L, H = 40, 4, 6
    noise = rng.normal(0, 0.05, size=(n, L, H))
    planted = noise.copy()
    planted[:, 2, 3] += 0.6          # one head restores 0.6 in every pair
    planted[:, 1, 0] += 0.4
    st = _synthetic(planted, noise, top_k=2, n_boot=300, n_splits=50)
    freq = st.top_k_frequency("patching")
    assert freq[2, 3] == 1.0 and freq[1, 0] == 1.0 and freq.sum() == pytest.approx(2)
    assert st.split_half("patching")["overlap_mean"] == 1.0
    top = st.top_heads("patching")
    assert list(zip(top["layer"], top["head"])) == [(2, 3), (1, 0)] and (top["lo"] > 0.3).all()
    # noise alone: no head is stably in the top 2 and the halves disagree
    assert st.top_k_frequency("dla").max() < 0.9
    assert st.split_half("dla")["overlap_mean"] < 0.5
    ag = st.map_agreement()
    assert ag["overlap"] <= 0.5 and ag["chance_overlap"] == pytest.approx(2 / 24)
    s = st.attribution_summary().iloc[0]
    assert s["median"] == pytest.approx(0.7) and s["lo"] <= 0.7 <= s["hi"]
    with pytest.raises(ShapeError):
        _synthetic(planted[:, :, :5], noise)


def test_head_agreement_finds_a_map_that_names_the_same_heads_and_not_an_unrelated_one():
    rng = np.random.default_rng(1)
    n, L, H = 30, 5, 6
    truth = rng.normal(size=(L, H))
    planted = np.abs(truth)[None] + rng.normal(0, 0.3, size=(n, L, H))   # patching follows |truth|, noisily
    st = _synthetic(planted, rng.normal(0, 1, size=(n, L, H)), top_k=3, n_boot=300)
    ag = st.head_agreement({"truth": np.abs(truth), "unrelated": rng.normal(size=(L, H))}).set_index(["map_a", "map_b"])
    hit = ag.loc[("patching", "truth")]
    assert hit["rho"] > 0.8 and hit["rho_lo"] > 0.6 and hit["p_perm"] < 0.01 and hit["rho_lo"] <= hit["rho"] <= hit["rho_hi"]
    miss = ag.loc[("patching", "unrelated")]
    assert miss["rho_lo"] < 0 < miss["rho_hi"] and miss["p_perm"] > 0.01
    assert hit["chance_overlap"] == pytest.approx(3 / 30) and hit["n_pairs"] == n
    assert len(ag) == 6                                   # patching, dla, truth, unrelated: every pair once
    with pytest.raises(ShapeError):
        st.head_agreement({"truth": truth[:, :5]})


def test_lenses_facts_finds_the_shipped_truth_map_of_the_same_model_only():
    from interplab.core.errors import ConfigError
    from interplab.experiments.lenses_facts import FactLensExpConfig, truth_map

    m, src = truth_map(FactLensExpConfig(model="real:smollm2-135m-instruct"), (30, 9))
    assert m.shape == (30, 9) and src.startswith("results/truth-scores-smollm2/")
    assert truth_map(FactLensExpConfig(model="real:smollm2-135m-instruct", truth_map=""), (30, 9))[0] is None
    none, why = truth_map(FactLensExpConfig(model="zoo:toy-chat"), (4, 4))
    assert none is None and "no committed" in why
    with pytest.raises(ConfigError, match="heads"):
        truth_map(FactLensExpConfig(model="x", truth_map=src), (4, 4))
    with pytest.raises(ConfigError, match="no such run folder"):
        truth_map(FactLensExpConfig(model="x", truth_map="/nonexistent/run"), (4, 4))


def test_lenses_facts_experiment_on_a_random_gpt2(checkpoint_factory, tmp_path):
    from interplab.experiments import run_experiment
    from interplab.results import load_run

    f = tmp_path / "pairs.csv"
    rows = _toy_rows()
    with f.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    ckpt = checkpoint_factory("gpt2", n_layers=3)
    path = run_experiment("lenses-facts", {"model": str(ckpt), "pairs": str(f), "n_pairs": "5", "n_boot": "50",
                                           "n_splits": "10", "top_k": "3", "min_span": "0", "ig_steps": "2"},
                          root=tmp_path)
    st = load_run(path).result("study")
    assert st.head_patch.shape == (5, 3, 4) and st.n_pairs == 5
    np.testing.assert_allclose(st.resid_patch[:, 0, 2], 1.0, atol=1e-5)
    summary = json.loads((path / "json" / "summary.json").read_text())
    assert summary["n_pairs"] == 5 and summary["data"] == str(f)
    for t in ("pairs", "rank_per_layer", "heads", "attribution_per_pair", "attribution_summary"):
        assert (path / "tables" / f"{t}.csv").is_file(), t
    assert (path / "figures" / "answer_rank.html").is_file()
    assert summary["n_included"] == int(st.included.sum()) > 0
    if summary["n_included"]:
        assert (path / "figures" / "dla_heads.html").is_file()
        assert (path / "tables" / "resid_roles.csv").is_file() and (path / "tables" / "agreement.csv").is_file()
        assert (path / "figures" / "patching_heads.html").is_file()
        ag = pd.read_csv(path / "tables" / "map_agreement.csv")      # a random GPT-2 has no shipped truth map
        assert list(zip(ag["map_a"], ag["map_b"])) == [("patching", "dla")]


def test_fact_study_figures():
    from interplab.figures.lenses import answer_rank_figure, attribution_rho_figure, head_frequency_figure

    rng = np.random.default_rng(0)
    st = _synthetic(rng.normal(size=(8, 3, 4)), rng.normal(size=(8, 3, 4)), top_k=2, n_boot=50, n_splits=5)
    st.answer_rank[:] = [[100, 10, 0]] * 8
    fig = answer_rank_figure(st.rank_per_layer())
    np.testing.assert_allclose(fig.data[1].y, [101, 11, 1])       # 1 + median rank, on a log axis
    assert fig.layout.yaxis.type == "log"
    assert len(attribution_rho_figure(st.attribution).data) == 1
    hf = head_frequency_figure(st.top_k_frequency("dla"), k=2, n_kv_heads=2)
    assert np.asarray(hf.data[0].z).shape == (3, 4) and list(hf.data[0].x)[:2] == ["H0 (kv0)", "H1 (kv0)"]
    with pytest.raises(ShapeError):
        answer_rank_figure(pd.DataFrame({"layer": [0]}))
    with pytest.raises(ShapeError):
        head_frequency_figure(np.zeros(3), k=1)
