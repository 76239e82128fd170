"""Independent brute-force references for finite-language grammars: enumerate every derivation from the dense
rule tensors (no dynamic programming shared with interplab.grammar.algorithms)."""
from __future__ import annotations

from collections import defaultdict
from functools import lru_cache


def enumerate_derivations(g, max_len=12):
    """All derivations from the root: list of (tokens tuple, probability, frozenset of (start, end, label))."""
    R = g.binary.double().numpy()
    L = g.lexical.double().numpy()
    N, V = L.shape

    @lru_cache(maxsize=None)
    def expand(X):
        out = []
        for a in range(V):
            if L[X, a] > 0:
                out.append(((a,), float(L[X, a]), ((0, 1, X),)))
        for Y in range(N):
            for Z in range(N):
                p = R[X, Y, Z]
                if p <= 0:
                    continue
                for ty, py, sy in expand(Y):
                    for tz, pz, sz in expand(Z):
                        if len(ty) + len(tz) > max_len:
                            continue
                        off = len(ty)
                        spans = ((0, len(ty) + len(tz), X),) + sy + tuple((s + off, e + off, lab) for s, e, lab in sz)
                        out.append((ty + tz, p * py * pz, spans))
        return tuple(out)

    derivs = []
    root = g.root.double().numpy()
    for X in range(N):
        if root[X] > 0:
            for t, p, s in expand(X):
                derivs.append((t, root[X] * p, frozenset(s)))
    return derivs


def string_probs(derivs):
    d = defaultdict(float)
    for t, p, _ in derivs:
        d[t] += p
    return dict(d)


def prefix_probs(sprobs):
    pp = defaultdict(float)
    for t, p in sprobs.items():
        for k in range(len(t) + 1):
            pp[t[:k]] += p
    return dict(pp)
