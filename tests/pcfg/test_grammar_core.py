"""Grammar machinery: construction, validation, interop, sampling."""
import warnings

import numpy as np
import pytest
import torch

from interplab.core.errors import ConfigError, DataError, InputError, ShapeError
from interplab.grammar import (PCFG, LongSampleWarning, NonTightGrammarError, hand_grammar, layered, log_prob,
                               random_cnf, uniform_binary, EXAMPLES)


def test_hand_closure_matches_spec():
    g = hand_grammar()
    assert g.nonterminals == ["S", "Y", "Z"]
    E = g.closure()["E"]
    assert torch.allclose(E, torch.tensor([[1, 1, .5], [0, 1, .5], [0, 0, 1.]], dtype=torch.float64), atol=1e-15)


def test_validation_errors():
    R = torch.zeros(2, 2, 2, dtype=torch.float64)
    L = torch.tensor([[0.5, 0.4], [1.0, 0.0]], dtype=torch.float64)
    with pytest.raises(ConfigError, match="sum to 1"):
        PCFG(R, L, 0)
    with pytest.raises(ShapeError):
        PCFG(torch.zeros(2, 2, 3), L, 0)
    with pytest.raises(ConfigError, match=">= 0"):
        PCFG(R, torch.tensor([[1.5, -0.5], [1.0, 0.0]]), 0)
    # non-tight: S -> S S with p = 0.6 (expected children 1.2)
    R1 = torch.zeros(1, 1, 1, dtype=torch.float64)
    R1[0, 0, 0] = 0.6
    with pytest.raises(NonTightGrammarError, match="spectral radius"):
        PCFG(R1, torch.tensor([[0.4]]), 0)
    with pytest.raises(NonTightGrammarError):
        random_cnf(N=3, V=2, p_bin=0.7, seed=0)


def test_families_shapes_and_lengths():
    g = uniform_binary(L=3, K=2, q=3, V=5, seed=1)
    assert g.N == 1 + 3 * 3 and g.V == 5 and g.spectral_radius() == 0
    toks, trees = g.sample(50, seed=0, max_len=8)
    assert toks.shape == (50, 8) and all(t.length == 8 for t in trees)
    # every constituent is an aligned dyadic block
    for t in trees[:10]:
        for s, e, lab, d in t.spans:
            assert e - s == 2 ** (3 - d) and s % (e - s) == 0 and g.levels[lab] == d
    lay = layered(n_levels=2, q=2, V=3, seed=0)
    assert lay.auxiliary.any() and lay.spectral_radius() == 0
    toks, trees = lay.sample(200, seed=0, max_len=9)
    lens = lay.lengths_of(toks)
    assert int(lens.min()) >= 4 and int(lens.max()) <= 9
    rc = random_cnf(N=5, V=4, p_bin=0.3, n_binary=4, seed=2)
    assert int((rc.binary[0] > 0).sum()) == 4
    for name, f in EXAMPLES.items():
        assert f().N >= 1


def test_sample_tree_logprob_and_yield_consistent():
    g = random_cnf(N=4, V=3, p_bin=0.35, seed=3)
    toks, trees = g.sample(300, seed=1, max_len=200)
    lens = g.lengths_of(toks)
    R, L = g.binary.numpy(), g.lexical.numpy()
    for b, t in enumerate(trees[:100]):
        assert t.length == int(lens[b]) and not t.truncated
        children = {}
        for k, par in enumerate(t.parent):
            if par >= 0:
                children.setdefault(int(par), []).append(k)
        lp = 0.0
        for k, (s, e, lab, d) in enumerate(t.spans):
            ch = children.get(k, [])
            if not ch:
                assert e - s == 1
                lp += np.log(L[lab, toks[b, s]])
            else:
                (c1, c2) = ch
                assert t.spans[c1][0] == s and t.spans[c1][1] == t.spans[c2][0] and t.spans[c2][1] == e
                lp += np.log(R[lab, t.spans[c1][2], t.spans[c2][2]])
        assert abs(lp - t.logprob) < 1e-9
        # the derivation's probability is at most the string's probability
        assert t.logprob <= float(log_prob(g, toks[b:b + 1, :t.length])) + 1e-9


def test_sample_never_silently_resamples_long_strings():
    g = random_cnf(N=3, V=2, p_bin=0.45, seed=0)
    assert g.length_tail(4) > 1e-4
    with pytest.warns(LongSampleWarning):
        g.check_length(4)
    with pytest.raises(DataError, match="never silently re-sampled"):
        g.sample(2000, seed=0, max_len=4)
    toks, trees = g.sample(2000, seed=0, max_len=4, on_long="truncate")
    n_trunc = sum(t.truncated for t in trees)
    assert toks.shape[1] <= 4 and n_trunc > 0
    # truncation keeps exact prefixes: the fraction truncated estimates P(len > 4)
    p = g.length_tail(4)
    assert abs(n_trunc / 2000 - p) < 4 * np.sqrt(p * (1 - p) / 2000)
    # with a long enough max_len the same seed gives the same draws, none truncated
    toks2, trees2 = g.sample(50, seed=0, max_len=10_000)
    assert not any(t.truncated for t in trees2)


def test_length_distribution_exact_on_uniform_binary():
    g = uniform_binary(L=2, K=2, q=2, V=3, seed=0)
    d = g.length_distribution(6)
    assert abs(float(d[4]) - 1) < 1e-12 and float(d.sum()) == pytest.approx(1, abs=1e-12)


def test_encode_decode_and_errors():
    g = hand_grammar()
    toks, lens = g.encode(["a a", ["a"]])
    assert toks.tolist() == [[0, 0], [0, g.pad_id]] and lens.tolist() == [2, 1]
    assert g.decode(toks, lens) == ["a a", "a"]
    with pytest.raises(InputError, match="unknown terminal"):
        g.encode(["a b"])


def test_nltk_roundtrip_and_exponent_notation():
    g = random_cnf(N=3, V=3, p_bin=0.3, seed=5)
    ng = g.to_nltk()
    g2 = PCFG.from_nltk(ng)
    assert g2.nonterminals == g.nonterminals or set(g2.nonterminals) == set(g.nonterminals)
    perm = [g2.nonterminals.index(x) for x in g.nonterminals]
    tperm = [g2.terminals.index(x) for x in g.terminals]
    assert torch.allclose(g2.binary[perm][:, perm][:, :, perm], g.binary, atol=1e-15)
    assert torch.allclose(g2.lexical[perm][:, tperm], g.lexical, atol=1e-15)
    g3 = PCFG.from_string("S -> A A [1]\nA -> 'x' [0.99999]\nA -> 'y' [1e-05]")
    assert float(g3.lexical[1, 1]) == 1e-5
    g4 = PCFG.from_string(g3.to_string())
    assert torch.equal(g4.lexical, g3.lexical)
    d = g.to_dict()
    assert torch.equal(PCFG.from_dict(d).binary, g.binary)


def test_from_nltk_binarises_long_rhs():
    from nltk.grammar import PCFG as NPCFG, Nonterminal as NT, ProbabilisticProduction as PP
    S, A, B = NT("S"), NT("A"), NT("B")
    prods = [PP(S, [A, B, A], prob=0.5), PP(S, [A, B], prob=0.5), PP(A, ["a"], prob=1.0), PP(B, ["b"], prob=1.0)]
    g = PCFG.from_nltk(NPCFG(S, prods))
    assert g.auxiliary.sum() == 1
    toks, lens = g.encode(["a b a", "a b", "a b b"])
    lp = log_prob(g, toks, lens)
    assert torch.allclose(lp[:2], torch.log(torch.tensor([0.5, 0.5], dtype=torch.float64)))
    assert lp[2] == float("-inf")
