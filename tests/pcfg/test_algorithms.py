"""Exact-probability machinery against independent references (spec §8)."""
import math

import numpy as np
import pytest
import torch
from nltk.parse.pchart import InsideChartParser
from nltk.parse.viterbi import ViterbiParser

from interplab.grammar import (hand_grammar, inside, layered, log_prob, next_token_logprobs, prefix,
                               prefix_log_prob, prefix_span_posteriors, random_cnf, span_marginals,
                               uniform_binary, viterbi)
from tests.pcfg._brute import enumerate_derivations, prefix_probs, string_probs

torch.set_num_threads(1)


def _nltk_inside(ng, words):
    return sum(t.prob() for t in InsideChartParser(ng).parse(words))


def test_hand_vector_prefix_probabilities():
    g = hand_grammar()
    toks, lens = g.encode(["a a a"])
    pp = prefix_log_prob(g, toks, lens).exp()[0]
    assert torch.allclose(pp, torch.tensor([1, 1, 1, .5], dtype=torch.float64), atol=1e-15)
    # P(a a) = 0.5, P(a a a) = 0.25
    lp = log_prob(g, *g.encode(["a a", "a a a"]))
    assert torch.allclose(lp.exp(), torch.tensor([.5, .25], dtype=torch.float64), atol=1e-15)


def _n_parses(g, toks, lens=None):
    """Number of parses per string (inside in the counting semiring, via indicator rule weights)."""
    from interplab.grammar import PCFG
    ind = PCFG((g.binary > 0).double(), (g.lexical > 0).double(), (g.root > 0).double(), validate=False)
    return inside_count(ind, toks, lens)


def inside_count(ind, toks, lens):
    return log_prob(ind, toks, lens).exp().round().long()


def _pick(g, n_min, n_max, max_parses, k, seed=0, pool=600):
    toks, _ = g.sample(pool, seed=seed, max_len=10_000)
    lens = g.lengths_of(toks)
    ok = (lens >= n_min) & (lens <= n_max)
    toks, lens = toks[ok], lens[ok]
    cnt = _n_parses(g, toks, lens)
    sel = [b for b in range(len(lens)) if int(cnt[b]) <= max_parses][:k]
    return [g.decode(toks[b:b + 1], lens[b:b + 1])[0].split() for b in sel], cnt


def test_inside_equals_nltk_dense():
    for N, sents in ((2, [["t0"], ["t1", "t2"], ["t0", "t0", "t1"], ["t2", "t1", "t0"]]),
                     (3, [["t0"], ["t1", "t2"], ["t2", "t0", "t1"]])):
        g = random_cnf(N=N, V=3, p_bin=0.3, seed=N)
        ng = g.to_nltk()
        toks, lens = g.encode(sents)
        ours = log_prob(g, toks, lens).exp()
        ref = torch.tensor([_nltk_inside(ng, s) for s in sents], dtype=torch.float64)
        assert torch.allclose(ours, ref, rtol=1e-10, atol=0)


def test_inside_equals_nltk_sparse_up_to_8():
    g = random_cnf(N=6, V=4, p_bin=0.35, n_binary=2, n_lexical=2, seed=4)
    ng = g.to_nltk()
    sents, _ = _pick(g, 5, 8, 40, 6)
    assert len(sents) >= 3 and max(map(len, sents)) >= 6
    ours = log_prob(g, *g.encode(sents)).exp()
    ref = torch.tensor([_nltk_inside(ng, s) for s in sents], dtype=torch.float64)
    assert torch.allclose(ours, ref, rtol=1e-10, atol=0)
    # the counting semiring agrees with NLTK's number of parses
    assert [len(list(InsideChartParser(ng).parse(s))) for s in sents[:2]] == \
        _n_parses(g, *g.encode(sents[:2])).tolist()
    # a uniform-binary grammar (n = 8) too
    ub = uniform_binary(L=3, K=2, q=2, V=4, k_lex=1, seed=3)
    sents, _ = _pick(ub, 8, 8, 40, 3)
    assert max(_n_parses(ub, *ub.encode(sents)).tolist()) > 1
    assert sents
    ours = log_prob(ub, *ub.encode(sents)).exp()
    ref = torch.tensor([_nltk_inside(ub.to_nltk(), s) for s in sents], dtype=torch.float64)
    assert torch.allclose(ours, ref, rtol=1e-10, atol=0)


def test_viterbi_equals_nltk():
    g = random_cnf(N=5, V=3, p_bin=0.35, n_binary=3, seed=7)
    ng = g.to_nltk()
    sents, _ = _pick(g, 2, 8, 200, 8, seed=2)
    assert len(sents) >= 5
    t, l = g.encode(sents)
    vr = viterbi(g, t, l)
    for k, s in enumerate(sents):
        ref = next(ViterbiParser(ng).parse(s)).prob()
        assert math.isclose(float(vr.log_prob[k].exp()), ref, rel_tol=1e-10)
        # the returned tree's own rule probabilities give the same number
        tree = vr.trees[k]
        assert math.isclose(tree.to_nltk(g, t[k]).leaves().__len__(), len(s))
        nt = tree.to_nltk(g, t[k])
        lp = 0.0
        for prod in nt.productions():
            (pr,) = [p for p in ng.productions(lhs=prod.lhs()) if p.rhs() == prod.rhs()]
            lp += math.log(pr.prob())
        assert math.isclose(lp, float(vr.log_prob[k]), rel_tol=1e-10)
    assert viterbi(g, *g.encode([["t0"]])).trees[0] is not None


def _layered_reference():
    g = layered(n_levels=2, q=2, V=3, seed=1)
    derivs = enumerate_derivations(g, max_len=9)
    sp = string_probs(derivs)
    assert abs(sum(sp.values()) - 1) < 1e-12  # finite language fully enumerated
    return g, derivs, sp, prefix_probs(sp)


def test_brute_force_prefix_and_next_token():
    g, derivs, sp, pp = _layered_reference()
    strings = sorted(sp)
    assert max(len(s) for s in strings) <= 8 or True
    toks = torch.full((len(strings), max(map(len, strings))), g.pad_id)
    for b, s in enumerate(strings):
        toks[b, :len(s)] = torch.tensor(s)
    lens = torch.tensor([len(s) for s in strings])
    ours_pp = prefix_log_prob(g, toks, lens).exp()
    nt = next_token_logprobs(g, toks, lens).exp()
    for b, s in enumerate(strings):
        for p in range(len(s) + 1):
            ref = pp[s[:p]]
            assert abs(float(ours_pp[b, p]) - ref) < 1e-12
            for v in range(g.V):
                ref_v = pp.get(s[:p] + (v,), 0.0) / ref
                assert abs(float(nt[b, p, v]) - ref_v) < 1e-12
            assert abs(float(nt[b, p, g.V]) - sp.get(s[:p], 0.0) / ref) < 1e-12
    # impossible prefixes: -inf and no NaN (every string of length <= 3 over V^n not in the prefix set)
    import itertools
    imp = [t for n in range(1, 4) for t in itertools.product(range(g.V), repeat=n) if t not in pp]
    assert imp
    ti = torch.tensor([list(t) + [g.pad_id] * (3 - len(t)) for t in imp])
    li = torch.tensor([len(t) for t in imp])
    out = next_token_logprobs(g, ti, li)
    assert not torch.isnan(out).any()
    ppi = prefix_log_prob(g, ti, li)
    assert (ppi.gather(1, li[:, None]) == float("-inf")).all()
    assert (log_prob(g, ti, li) == float("-inf")).all()


def test_brute_force_prefix_span_posteriors_and_marginals():
    g, derivs, sp, pp = _layered_reference()
    strings = sorted(sp)[:12]
    n = max(map(len, strings))
    toks = torch.full((len(strings), n), g.pad_id)
    for b, s in enumerate(strings):
        toks[b, :len(s)] = torch.tensor(s)
    lens = torch.tensor([len(s) for s in strings])
    post = prefix_span_posteriors(g, toks, lens).exp()
    mu = span_marginals(g, toks, lens)
    for b, s in enumerate(strings):
        for t in range(1, len(s) + 1):
            num = np.zeros((t, g.N))
            for ds, p, spans in derivs:
                if ds[:t] == s[:t]:
                    for (i, e, A) in spans:
                        if e == t:
                            num[i, A] += p
            ref = num / pp[s[:t]]
            assert np.abs(post[b, :t, t].numpy() - ref).max() < 1e-12
        full = np.zeros((n + 1, n + 1, g.N))
        for ds, p, spans in derivs:
            if ds == s:
                for (i, e, A) in spans:
                    full[i, e, A] += p
        full /= sp[s]
        assert np.abs(mu[b].numpy() - full).max() < 1e-10


def _recursive():
    return random_cnf(N=4, V=3, p_bin=0.35, seed=11)


def test_normalisation_and_chain_rule():
    g = _recursive()
    toks, _ = g.sample(64, seed=3, max_len=400)
    lens = g.lengths_of(toks)
    pre = prefix(g, toks, lens)
    nt = pre.next_token_logprobs()
    tot = torch.logsumexp(nt, -1).exp()
    valid = pre.valid
    assert (tot[valid] - 1).abs().max() < 1e-12
    # Σ_v S_p[v] + EOS_p = PP
    lhs = torch.logsumexp(torch.cat([pre.log_S, pre.log_eos[..., None]], -1), -1)
    assert (lhs - pre.log_pp)[valid].abs().max() < 1e-12
    # chain rule
    B, n = toks.shape
    tok_g = torch.where(torch.arange(n)[None] < lens[:, None], toks, torch.full_like(toks, g.eos_id))
    tgt = torch.cat([tok_g, torch.full((B, 1), g.eos_id)], 1)  # target at p is w_{p+1}, EOS at p = len
    step = nt.gather(2, tgt[..., None].clamp(max=g.V))[..., 0]
    step = torch.where(valid, step, torch.zeros_like(step))
    assert torch.allclose(step.sum(1), log_prob(g, toks, lens), atol=1e-10, rtol=0)


def test_batched_equals_per_sequence_and_padding_invariance():
    g = _recursive()
    toks, _ = g.sample(12, seed=5, max_len=400)
    lens = g.lengths_of(toks)
    batched = next_token_logprobs(g, toks, lens)
    lp_b = log_prob(g, toks, lens)
    post_b = prefix_span_posteriors(g, toks, lens)
    for b in range(12):
        L = int(lens[b])
        one = next_token_logprobs(g, toks[b:b + 1, :L], lens[b:b + 1])
        a, c = batched[b, :L + 1], one[0]
        fin = torch.isfinite(c)
        assert torch.equal(torch.isfinite(a), fin)
        assert (a[fin] - c[fin]).abs().max() < 1e-12
        assert abs(float(log_prob(g, toks[b:b + 1, :L]) - lp_b[b])) < 1e-12
        for extra in (1, 5):
            padded = torch.cat([toks[b:b + 1, :L], torch.full((1, extra), g.pad_id)], 1)
            o2 = next_token_logprobs(g, padded, lens[b:b + 1])[0, :L + 1]
            assert (o2[fin] - c[fin]).abs().max() < 1e-12
            assert torch.isinf(next_token_logprobs(g, padded, lens[b:b + 1])[0, L + 1:]).all()
        p1 = prefix_span_posteriors(g, toks[b:b + 1, :L], lens[b:b + 1])[0]
        pb = post_b[b, :L + 1, :L + 1]
        fin = torch.isfinite(p1)
        assert torch.equal(fin, torch.isfinite(pb)) and (p1[fin] - pb[fin]).abs().max() < 1e-12


def test_float32_close_to_float64():
    g = _recursive()
    toks, _ = g.sample(32, seed=9, max_len=400)
    lens = g.lengths_of(toks)
    a = next_token_logprobs(g, toks, lens)
    b = next_token_logprobs(g.to(torch.float32), toks, lens)
    fin = torch.isfinite(a)
    assert torch.equal(fin, torch.isfinite(b))
    assert (a[fin] - b[fin].double()).abs().max() < 1e-4
    assert (log_prob(g, toks, lens) - log_prob(g.to(torch.float32), toks, lens).double()).abs().max() < 1e-4


def test_guards_no_nan_on_impossible():
    g = hand_grammar().to(torch.float64)
    # "a" alone is impossible (min length 2): -inf, no NaN anywhere
    toks, lens = g.encode(["a"])
    assert log_prob(g, toks, lens)[0] == float("-inf")
    out = next_token_logprobs(g, toks, lens)
    assert not torch.isnan(out).any()
    ub = uniform_binary(L=2, K=2, q=2, V=4, k_lex=1, seed=0)
    impossible = [[a, b, c, d] for a in range(4) for b in range(4) for c in range(4) for d in range(4)]
    t = torch.tensor(impossible)
    lp = log_prob(ub, t)
    assert (lp == float("-inf")).any() and not torch.isnan(lp).any()
    assert not torch.isnan(next_token_logprobs(ub, t)).any()
    assert not torch.isnan(prefix_span_posteriors(ub, t)).any()
    vr = viterbi(ub, t)
    assert all((tr is None) == (float(l) == float("-inf")) for tr, l in zip(vr.trees, vr.log_prob))


def test_monte_carlo_next_token_frequencies():
    g = random_cnf(N=3, V=3, p_bin=0.3, seed=2)
    n = 100_000
    toks, _ = g.sample(n, seed=123, max_len=10_000)
    lens = g.lengths_of(toks)
    ext = torch.cat([toks[:, :3], torch.full((n, 1), g.pad_id)], 1)
    # continuation ids: terminal or EOS at position len
    def cont(p):
        c = ext[:, p].clone()
        c[lens == p] = g.eos_id
        return c
    checked = 0
    for prefix_len in (0, 1, 2):
        if prefix_len == 0:
            groups = {(): torch.ones(n, dtype=torch.bool)}
        else:
            keys = {}
            live = lens >= prefix_len
            for row in torch.unique(toks[live, :prefix_len], dim=0).tolist():
                m = live & (toks[:, :prefix_len] == torch.tensor(row)).all(1)
                keys[tuple(row)] = m
            groups = keys
        for key, m in groups.items():
            cnt = int(m.sum())
            if cnt < 2000:
                continue
            c = cont(prefix_len)[m]
            freq = torch.bincount(c, minlength=g.V + 1)[: g.V + 1].double() / cnt
            if prefix_len == 0:
                q = next_token_logprobs(g, torch.zeros(1, 1, dtype=torch.long), torch.tensor([1]))[0, 0].exp()
            else:
                q = next_token_logprobs(g, torch.tensor([list(key)]), torch.tensor([prefix_len]))[0, prefix_len].exp()
            sigma = torch.sqrt(q * (1 - q) / cnt).clamp_min(1e-12)
            assert ((freq - q).abs() <= 4 * sigma + 1e-12).all(), (key, freq, q)
            checked += 1
    assert checked >= 5
