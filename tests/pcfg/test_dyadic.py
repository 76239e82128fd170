"""Dyadic inside vectors and the k-level truncated predictor (spec §2.6, §5.4) against the full inside chart, the
exact next-token distribution and brute-force enumeration."""
import itertools

import pytest
import torch

from interplab.grammar import inside, layered, log_prob, next_token_logprobs, random_cnf, uniform_binary
from interplab.grammar.dyadic import (DyadicUndefinedError, dyadic_inside, dyadic_sizes,
                                      truncated_next_token_logprobs)
from interplab.core.errors import ConfigError, InputError

torch.set_num_threads(1)


def _zoo_grammar():
    return uniform_binary(L=4, K=3, q=4, V=8, k_lex=2, alpha=0.5, alpha_lex=0.5, seed=0)


@pytest.mark.parametrize("g", [_zoo_grammar(), uniform_binary(L=3, K=4, q=3, V=5, k_lex=None, alpha=0.3, seed=2)])
def test_dyadic_inside_equals_chart_on_aligned_blocks(g):
    toks, _ = g.sample(7, seed=1, max_len=64)
    lens = g.lengths_of(toks)
    lens[2] = lens[2] - 3  # a shorter (padded) row: blocks reaching past it must be -inf
    di = dyadic_inside(g, toks, lens)
    ch = inside(g, toks, lens)
    n = toks.shape[1]
    assert di.k_max == n.bit_length() - 1
    checked = 0
    for k, lv in enumerate(di.levels):
        assert lv.shape == (7, n >> k, g.N)
        for j in range(lv.shape[1]):
            a, b = lv[:, j], ch.span(j * 2 ** k, (j + 1) * 2 ** k)
            inside_len = ((j + 1) * 2 ** k <= lens)
            assert torch.isinf(a[~inside_len]).all() and (a[~inside_len] < 0).all()
            a, b = a[inside_len], b[inside_len]
            assert torch.equal(torch.isfinite(a), torch.isfinite(b))
            fin = torch.isfinite(b)
            assert (a[fin] - b[fin]).abs().max() <= 1e-10
            checked += int(fin.sum())
    assert checked > 100
    # only level-(L-k) NTs have finite inside at level k
    sizes = dyadic_sizes(g)
    for k, lv in enumerate(di.levels):
        fin_nt = torch.isfinite(lv[0, 0])
        assert (torch.as_tensor(sizes)[fin_nt] == k).all()


def test_dyadic_errors():
    for bad in (random_cnf(N=4, V=4, p_bin=0.35, seed=0), layered(3, 3, 3, seed=0)):
        with pytest.raises(DyadicUndefinedError, match="uniform-binary") as e:
            dyadic_inside(bad, *bad.sample(2, seed=0, max_len=200, on_long="truncate")[:1])
        assert isinstance(e.value, ConfigError)
        with pytest.raises(DyadicUndefinedError):
            truncated_next_token_logprobs(bad, torch.zeros(1, 4, dtype=torch.long), None, 1)
    g = _zoo_grammar()
    toks, _ = g.sample(2, seed=0)
    with pytest.raises(InputError, match="k_max"):
        dyadic_inside(g, toks, None, k_max=5)
    with pytest.raises(InputError, match="k must"):
        truncated_next_token_logprobs(g, toks, None, k=-2)


def test_truncated_equals_exact_for_large_k_and_differs_for_small_k():
    g = _zoo_grammar()
    toks, _ = g.sample(24, seed=3)
    lens = g.lengths_of(toks)
    ex = next_token_logprobs(g, toks, lens)
    fin = torch.isfinite(ex)
    for k in (3, 4, 7):  # k >= log2(n) - 1 uses every block of the cover
        t = truncated_next_token_logprobs(g, toks, lens, k)
        assert t.shape == ex.shape
        assert torch.equal(torch.isfinite(t), fin)
        assert (t[fin] - ex[fin]).abs().max() <= 1e-10
    for k in (-1, 0, 1):
        t = truncated_next_token_logprobs(g, toks, lens, k)
        ok = torch.isfinite(t).any(-1)
        assert torch.allclose(torch.logsumexp(t[ok], -1), torch.zeros(int(ok.sum()), dtype=torch.float64),
                              atol=1e-12)  # rows normalised
        assert ok[:, : 17].all()
        diff = (t.exp() - ex.exp()).abs().nan_to_num(0).amax()
        assert diff > 1e-2, k
        # p = 0 (nothing observed) and the last row (EOS certain) are the same for every k
        assert torch.allclose(t[:, 0], ex[:, 0], atol=1e-12)
        assert torch.allclose(t[:, 16], ex[:, 16], atol=1e-12)


def test_truncated_matches_brute_force_conditional():
    """p_trunc,k(v | w≤p) = P(w_{p+1} = v | w_{s+1..p}), s = p - (p mod 2^(k+1)), by enumerating all strings."""
    g = uniform_binary(L=3, K=3, q=3, V=3, k_lex=2, alpha=0.7, alpha_lex=0.7, seed=5)
    allw = torch.tensor(list(itertools.product(range(3), repeat=8)))
    P = log_prob(g, allw, torch.full((len(allw),), 8)).exp()
    assert abs(float(P.sum()) - 1) < 1e-12
    toks, _ = g.sample(5, seed=0)
    for k in (-1, 0, 1, 2):
        t = truncated_next_token_logprobs(g, toks, None, k).exp()
        for b in range(5):
            for p in range(8):
                s = p - p % 2 ** (k + 1)
                m = (allw[:, s:p] == toks[b, s:p]).all(1)
                num = torch.stack([(P * (m & (allw[:, p] == v))).sum() for v in range(3)])
                assert torch.allclose(t[b, p, :3], num / num.sum(), atol=1e-12), (k, b, p)
                assert t[b, p, 3] == 0


@pytest.mark.slow
def test_construction_experiment_on_pcfg_L2(tmp_path):
    import pandas as pd
    import plotly.graph_objects as go

    from interplab.experiments.registry import run_experiment
    from interplab.figures.pcfg import dyadic_probe_figure, truncated_kl_figure

    p = run_experiment("pcfg-construction", {"models": "zoo:pcfg-L2", "n_sequences": 60, "n_seeds": 1},
                       root=tmp_path)
    pr = pd.read_csv(next(p.rglob("dyadic_probe.csv")))
    kl = pd.read_csv(next(p.rglob("truncated_kl.csv")))
    assert set(pr.layer) == {-1, 0, 1} and set(pr.k) == {0, 1, 2, 3}
    assert (pr[(pr.k == 0) & (pr.layer == -1)].r2 > 0.99).all()  # size-1 blocks: the token fixes them
    assert set(kl.k) == {-1, 0, 1, 2, 3}
    assert (kl.lens_err < 1e-4).all()  # logit lens at the last layer = the model's output
    last = kl[kl.final_layer].sort_values("k")
    assert last.kl_trunc_model.iloc[-1] < last.kl_trunc_model.iloc[0]  # the trained model uses the context
    assert (kl.kl_exact_trunc >= -1e-12).all()
    assert any(p.rglob("dyadic_probe_pcfg-L2.html")) and any(p.rglob("truncated_kl_pcfg-L2.html"))
    for f in (dyadic_probe_figure(pr), truncated_kl_figure(kl)):
        assert isinstance(f, go.Figure) and len(f.data) >= 1
