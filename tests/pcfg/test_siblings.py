"""The dependent-siblings grammar (interplab.grammar.siblings): a proper dyadic PCFG whose exact and truncated
next-token distributions interplab computes (checked against brute-force enumeration of derivations and NLTK), and
whose truncated predictors of different k differ at the output, unlike the shipped uniform-binary grammar."""
import itertools

import pytest
import torch
from nltk.parse.pchart import InsideChartParser

from interplab.core.errors import ConfigError
from interplab.grammar import (PCFG, dependent_siblings, dyadic_sizes, log_prob, next_token_logprobs, root_size,
                               sample_eval_set, truncated_next_token_logprobs)
from interplab.train.grammar_eval import kl_rows
from interplab.zoo.recipes.pcfg import SIB_SPEC, UB_SPEC, make_grammar
from tests.pcfg._brute import enumerate_derivations, prefix_probs, string_probs

torch.set_num_threads(1)


def _small():
    return dependent_siblings(L=3, q=2, k_lex=1, inherit=0.8, couple=0.7)


def test_structure_and_errors():
    g = make_grammar(SIB_SPEC)
    assert g.N == 1 + 4 * 4 and g.V == 8
    assert root_size(g) == 4 and sorted(set(dyadic_sizes(g).tolist())) == [0, 1, 2, 3, 4]
    toks, _ = g.sample(50, seed=0)
    assert (g.lengths_of(toks) == 16).all()
    g2 = PCFG.from_dict(g.to_dict())  # what grammar.json stores
    assert torch.allclose(g2.binary, g.binary) and torch.allclose(g2.lexical, g.lexical)
    # without lexical noise each preterminal emits only its own type's terminals
    assert ((g.lexical > 0).sum(1)[g.levels == 4] == 2).all()
    for bad in ({"inherit": 1.2}, {"couple": -0.1}, {"lex_noise": 2.0}, {"L": 0}, {"q": 1, "lex_noise": 0.1}):
        with pytest.raises(ConfigError):
            dependent_siblings(**bad)


def test_string_and_next_token_probabilities_equal_brute_force():
    """Exact string, prefix and next-token probabilities against an independent enumeration of all derivations."""
    g = _small()
    sp = string_probs(enumerate_derivations(g, max_len=8))
    assert abs(sum(sp.values()) - 1) < 1e-12 and set(map(len, sp)) == {8}
    pp = prefix_probs(sp)
    strings = sorted(sp)
    toks = torch.tensor(strings)
    lens = torch.full((len(strings),), 8)
    assert torch.allclose(log_prob(g, toks, lens).exp(), torch.tensor([sp[s] for s in strings], dtype=torch.float64),
                          rtol=1e-10, atol=1e-15)
    nt = next_token_logprobs(g, toks, lens).exp()
    for b in range(0, len(strings), 7):
        s = strings[b]
        for p in range(9):
            for v in range(g.V):
                assert abs(float(nt[b, p, v]) - pp.get(s[:p] + (v,), 0.0) / pp[s[:p]]) < 1e-12
            assert abs(float(nt[b, p, g.V]) - sp.get(s[:p], 0.0) / pp[s[:p]]) < 1e-12


def test_truncated_predictor_equals_brute_force_conditional():
    """p_trunc,k(v | w≤p) = P(w_{p+1} = v | w_{s+1..p}), s = p − (p mod 2^(k+1)), from the enumerated language."""
    g = _small()
    sp = string_probs(enumerate_derivations(g, max_len=8))
    allw = torch.tensor(sorted(sp))
    P = torch.tensor([sp[tuple(w.tolist())] for w in allw], dtype=torch.float64)
    toks, _ = g.sample(4, seed=1)
    for k in (-1, 0, 1, 2):
        t = truncated_next_token_logprobs(g, toks, None, k).exp()
        for b in range(4):
            for p in range(8):
                s = p - p % 2 ** (k + 1)
                m = (allw[:, s:p] == toks[b, s:p]).all(1)
                num = torch.stack([(P * (m & (allw[:, p] == v))).sum() for v in range(g.V)])
                assert torch.allclose(t[b, p, :g.V], num / num.sum(), atol=1e-12), (k, b, p)


def test_inside_equals_nltk():
    g = dependent_siblings(L=2, q=2, k_lex=2, inherit=0.7, couple=0.8, lex_noise=0.1)
    ng = g.to_nltk()
    toks, _ = g.sample(4, seed=3)
    sents = [s.split() for s in g.decode(toks)]
    ref = torch.tensor([sum(t.prob() for t in InsideChartParser(ng).parse(s)) for s in sents], dtype=torch.float64)
    assert torch.allclose(log_prob(g, toks, None).exp(), ref, rtol=1e-10, atol=0)


def _gaps(g, n=200, seed=777):
    """Mean per-position KL(p_G ‖ p_trunc,k) for k = -1..Lg-1 on n samples (as pcfg-construction's kl_exact_trunc)."""
    toks, lens, _ = sample_eval_set(g, n, seed, 2 ** root_size(g))
    ex = next_token_logprobs(g, toks, lens)
    valid = torch.isfinite(ex).any(-1)
    return [float(kl_rows(ex, truncated_next_token_logprobs(g, toks, lens, k))[valid].mean())
            for k in range(-1, root_size(g))]


def test_truncation_gap_large_on_siblings_small_on_uniform_binary():
    sib, ub = _gaps(make_grammar(SIB_SPEC)), _gaps(make_grammar(UB_SPEC))
    # k = Lg - 1 = 3 is exact on both
    assert abs(sib[4]) < 1e-10 and abs(ub[4]) < 1e-10
    # new grammar: every truncation level loses a measurable amount, more the more it forgets
    assert all(a > 1.5 * b for a, b in zip(sib[:4], sib[1:4])), sib
    assert sib[3] > 0.02 and sib[2] > 0.05, sib
    # shipped uniform-binary grammar: beyond k = 0 the levels are indistinguishable at the output
    assert ub[2] < 0.005 and ub[3] < 0.001, ub
    assert sib[2] > 10 * ub[2] and sib[3] > 10 * ub[3]


def test_independent_choices_make_truncation_free():
    """inherit = couple = 1/q: every type is drawn afresh, tokens are i.i.d., and forgetting costs nothing — the
    gap comes from the sibling dependence, not from the truncation code."""
    g = dependent_siblings(L=3, q=4, k_lex=2, inherit=0.25, couple=0.25)
    assert max(abs(x) for x in _gaps(g, n=50)) < 1e-10


def test_construction_smoke_on_pcfg_sib_L4(tmp_path):
    """Fast configuration of `pcfg-construction` on the dependent-siblings organism: the output separates the
    truncation levels (its final layer is nearest the exact predictor, and each smaller k is further away)."""
    import json

    import pandas as pd

    from interplab.experiments.registry import run_experiment

    p = run_experiment("pcfg-construction", {"models": "zoo:pcfg-sib-L4", "n_sequences": 32, "n_seeds": 1},
                       root=tmp_path)
    kl = pd.read_csv(next(p.rglob("truncated_kl.csv")))
    summ = json.loads(next(p.rglob("summary.json")).read_text())["zoo:pcfg-sib-L4"]
    assert (kl.lens_err < 1e-4).all()
    fin = [summ["final_kl_by_k"][str(k)] for k in range(-1, 4)]
    cost = [summ["kl_exact_trunc_by_k"][str(k)] for k in range(-1, 4)]
    assert all(a > b for a, b in zip(fin, fin[1:])), fin
    assert all(a > b for a, b in zip(cost[:4], cost[1:4])) and abs(cost[4]) < 1e-10, cost
    assert fin[4] < 0.5 * cost[3]  # nearer the exact predictor than p_trunc,2 is
