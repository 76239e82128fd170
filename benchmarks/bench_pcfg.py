"""PCFG benchmarks (one process; prints BENCH lines).

1. log_prob on 1,000 sentences of length 8-12 sampled from a sparse 6-nonterminal grammar, against NLTK's
   InsideChartParser summing the probabilities of all parses. NLTK enumerates every parse, so it is timed on a
   random subset (the first SUBSET sentences of the same list) and its time scaled linearly to 1,000 sentences;
   results are compared on that subset (rtol 1e-10).
2. next_token_logprobs scaling in n (16, 32, 64, 128) against the O(n^3) expectation t(16)·(n/16)^3.
"""
from __future__ import annotations

import math
import time

import torch

from interplab.grammar import PCFG, log_prob, next_token_logprobs, random_cnf

SUBSET = 30


def bench_log_prob():
    from nltk.parse.pchart import InsideChartParser

    g = random_cnf(N=6, V=8, p_bin=0.42, n_binary=2, n_lexical=1, seed=4)
    toks, trees = g.sample(40000, seed=0, max_len=10_000)
    lens = g.lengths_of(toks)
    keep = torch.nonzero((lens >= 8) & (lens <= 12)).flatten()[:1000]
    assert len(keep) == 1000, len(keep)
    toks, lens = toks[keep][:, :12].contiguous(), lens[keep]
    log_prob(g, toks[:10], lens[:10])  # warm-up
    t = time.perf_counter()
    ours_lp = log_prob(g, toks, lens)
    ours = time.perf_counter() - t
    ind = PCFG((g.binary > 0).double(), (g.lexical > 0).double(), g.root, validate=False)
    n_parses = log_prob(ind, toks, lens).exp().round()
    ng = g.to_nltk()
    sents = g.decode(toks[:SUBSET], lens[:SUBSET])
    t = time.perf_counter()
    ref = [sum(tr.prob() for tr in InsideChartParser(ng).parse(s.split())) for s in sents]
    nltk_subset = time.perf_counter() - t
    anchor = nltk_subset * 1000 / SUBSET
    ref = torch.tensor(ref, dtype=torch.float64)
    equal = bool(torch.allclose(ours_lp[:SUBSET].exp(), ref, rtol=1e-10, atol=0))
    ratio = anchor / ours
    print(f"BENCH name=pcfg_log_prob_1000_len8-12 ours={ours:.4f} anchor={anchor:.2f} ratio={ratio:.0f}x "
          f"goal=>=100x_and_equal ok={ratio >= 100 and equal} extra=nltk_timed_on_{SUBSET}_scaled_x{1000 // SUBSET:d};"
          f"equal_rtol1e-10={equal};parses_per_sentence_median={int(n_parses.median())},"
          f"max={int(n_parses.max())};nltk_subset_s={nltk_subset:.2f}")


def bench_scaling():
    g = random_cnf(N=8, V=6, p_bin=0.3, seed=1)
    B = 4
    gen = torch.Generator().manual_seed(0)
    times = {}
    for n in (16, 32, 64, 128):
        toks = torch.randint(0, g.V, (B, n), generator=gen)
        lens = torch.full((B,), n)
        next_token_logprobs(g, toks[:, :8], torch.full((B,), 8))
        reps = 3 if n <= 64 else 1
        t = time.perf_counter()
        for _ in range(reps):
            out = next_token_logprobs(g, toks, lens)
        times[n] = (time.perf_counter() - t) / reps
        assert not torch.isnan(out).any()
    slope = math.log(times[128] / times[32]) / math.log(4)
    for n, tt in times.items():
        anchor = times[16] * (n / 16) ** 3
        print(f"BENCH name=pcfg_next_token_n{n} ours={tt:.4f} anchor={anchor:.4f} ratio={tt / anchor:.2f} "
              f"goal=<=O(n^3) ok={tt <= 1.5 * anchor} extra=B={B};N={g.N};float64;anchor=t16*(n/16)^3;"
              f"fitted_exponent_32to128={slope:.2f}")


if __name__ == "__main__":
    torch.set_num_threads(1)
    bench_log_prob()
    bench_scaling()
