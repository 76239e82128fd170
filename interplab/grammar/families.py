"""The three grammar families of the spec (§4.1): uniform binary, layered (Allen-Zhu-like, binarised) and random
CNF. Every constructor is deterministic given its seed and returns a validated `PCFG`."""
from __future__ import annotations

import warnings

import numpy as np
import torch

from interplab.core.errors import ConfigError
from interplab.grammar.pcfg import PCFG, LongSampleWarning, NonTightGrammarError

__all__ = ["uniform_binary", "layered", "random_cnf", "UniformBinary", "Layered", "RandomCNF"]


def _weights(rng, k, alpha):
    if alpha is None:
        return np.full(k, 1.0 / k)
    w = rng.dirichlet(np.full(k, float(alpha)))
    w = np.maximum(w, 1e-12)
    return w / w.sum()


def uniform_binary(L: int = 4, K: int = 3, q: int = 4, V: int = 8, *, k_lex: int | None = 3,
                   alpha: float | None = None, alpha_lex: float | None = None, seed: int = 0,
                   name: str | None = None) -> PCFG:
    """Uniform binary grammar: a root S (level 0); levels 1..L-1 of ``q`` NTs; level L of ``q`` preterminals.
    Every NT at level l < L has ``K`` distinct binary rules whose children are level-(l+1) NTs (weights uniform,
    or Dirichlet(alpha)); every preterminal emits ``k_lex`` of the ``V`` shared terminals (all V when None;
    uniform or Dirichlet(alpha_lex)). Every string has length exactly 2**L and every tree is a full binary tree
    whose constituents are the aligned dyadic blocks.
    """
    if L < 1 or K < 1 or q < 1 or V < 1:
        raise ConfigError("uniform_binary needs L, K, q, V >= 1.")
    if K > q * q:
        raise ConfigError(f"K={K} binary rules per NT need q*q >= K distinct (Y,Z) pairs; q={q}.")
    k_lex = V if k_lex is None else min(k_lex, V)
    rng = np.random.default_rng(seed)
    names, levels = ["S"], [0]
    level_ids = [[0]]
    for lv in range(1, L + 1):
        ids = list(range(len(names), len(names) + q))
        level_ids.append(ids)
        pre = "P" if lv == L else f"L{lv}_"
        names += [f"{pre}{i}" if lv == L else f"{pre}{i}" for i in range(q)]
        levels += [lv] * q
    N = len(names)
    R = np.zeros((N, N, N))
    Lx = np.zeros((N, V))
    for lv in range(L):
        children = level_ids[lv + 1]
        for X in level_ids[lv]:
            pairs = rng.choice(q * q, size=K, replace=False)
            w = _weights(rng, K, alpha)
            for pr, p in zip(pairs, w):
                R[X, children[pr // q], children[pr % q]] = p
    for X in level_ids[L]:
        ts = rng.choice(V, size=k_lex, replace=False)
        Lx[X, ts] = _weights(rng, k_lex, alpha_lex)
    return PCFG(R, Lx, 0, nonterminals=names, terminals=[f"t{i}" for i in range(V)], levels=levels,
                name=name or f"uniform_binary(L={L},K={K},q={q},V={V},seed={seed})")


def layered(n_levels: int = 3, q: int = 3, V: int = 3, *, rules_per_nt=(2, 3), rhs_len=(2, 3), seed: int = 0,
            name: str | None = None) -> PCFG:
    """Allen-Zhu-like layered grammar, binarised exactly: a root (level 0), ``n_levels - 1`` levels of ``q``
    symbols, then the ``V`` terminals. Each NT has 2–3 rules (``rules_per_nt``), each RHS 2–3 symbols
    (``rhs_len``) of the next level, uniform probabilities. Terminals inside longer RHS get preterminals
    ``T_a -> a`` (p=1) and RHS of length 3 are binarised (A -> B C D becomes A -> B X_CD, X_CD -> C D, p=1); both
    kinds of helper NT are marked ``auxiliary``. The language is finite (lengths 2**n_levels .. 3**n_levels).
    """
    if n_levels < 1:
        raise ConfigError("layered needs n_levels >= 1.")
    rng = np.random.default_rng(seed)
    level_syms = [["S"]] + [[f"L{lv}_{i}" for i in range(q)] for lv in range(1, n_levels)]
    terms = [f"t{i}" for i in range(V)]
    raw = []  # (lhs, [rhs names], prob, rhs_is_terminal)
    for lv, syms in enumerate(level_syms):
        nxt = terms if lv == n_levels - 1 else level_syms[lv + 1]
        for X in syms:
            nr = int(rng.integers(rules_per_nt[0], rules_per_nt[1] + 1))
            seen = set()
            rules = []
            while len(rules) < nr:
                ln = int(rng.integers(rhs_len[0], rhs_len[1] + 1))
                rhs = tuple(nxt[int(j)] for j in rng.integers(0, len(nxt), size=ln))
                if rhs in seen:
                    continue
                seen.add(rhs)
                rules.append(rhs)
            for rhs in rules:
                raw.append((X, list(rhs), 1.0 / nr, lv == n_levels - 1))
    names: list[str] = []
    idx: dict[str, int] = {}
    levels: list[int] = []
    aux: list[bool] = []

    def nt(name, level, is_aux):
        if name not in idx:
            idx[name] = len(names)
            names.append(name)
            levels.append(level)
            aux.append(is_aux)
        return idx[name]

    for lv, syms in enumerate(level_syms):
        for X in syms:
            nt(X, lv, False)
    bin_rules, lex_rules = [], []
    tindex = {t: i for i, t in enumerate(terms)}
    for X, rhs, p, is_term in raw:
        lvX = levels[idx[X]]
        if is_term:
            syms = [nt(f"T_{a}", lvX + 1, True) for a in rhs]
        else:
            syms = [idx[s] for s in rhs]
        if len(syms) == 2:
            bin_rules.append((idx[X], syms[0], syms[1], p))
        elif len(syms) == 3:
            A = nt("X_" + "".join(names[s] for s in syms[1:]), lvX, True)
            bin_rules.append((idx[X], syms[0], A, p))
            bin_rules.append((A, syms[1], syms[2], 1.0))
        else:
            raise ConfigError("rhs_len must be within 2..3.")
    for a in terms:
        if f"T_{a}" in idx:
            lex_rules.append((idx[f"T_{a}"], tindex[a], 1.0))
    N = len(names)
    R = np.zeros((N, N, N))
    for X, Y, Z, p in bin_rules:
        if names[X].startswith("X_"):
            R[X, Y, Z] = 1.0  # shared auxiliary: same deterministic expansion
        else:
            R[X, Y, Z] += p
    Lx = np.zeros((N, V))
    for X, a, p in lex_rules:
        Lx[X, a] = p
    # a terminal that no rule produces still needs a well-formed grammar: fine (its column is zero)
    return PCFG(R, Lx, 0, nonterminals=names, terminals=terms, auxiliary=aux, levels=levels,
                name=name or f"layered(levels={n_levels},q={q},V={V},seed={seed})")


def random_cnf(N: int = 4, V: int = 4, p_bin=0.3, *, alpha: float = 1.0, n_binary: int | None = None,
               n_lexical: int | None = None, seed: int = 0, max_len: int | None = None, tail_tol: float = 1e-4,
               name: str | None = None) -> PCFG:
    """Random recursive CNF grammar. NT X puts mass ``p_bin`` (scalar or per-NT) on binary rules, Dirichlet(alpha)
    over all N*N (Y,Z) pairs or over ``n_binary`` random pairs (sparse), and 1 - p_bin on lexical rules over all V
    terminals or ``n_lexical`` random ones. Start symbol N0. Raises `NonTightGrammarError` when the expected-children
    matrix has spectral radius >= 1; with ``max_len`` warns (`LongSampleWarning`) if P(len > max_len) > tail_tol.
    """
    rng = np.random.default_rng(seed)
    pb = np.broadcast_to(np.asarray(p_bin, dtype=float), (N,)).copy()
    if (pb < 0).any() or (pb >= 1).any():
        raise ConfigError("p_bin must lie in [0, 1).")
    R = np.zeros((N, N, N))
    Lx = np.zeros((N, V))
    for X in range(N):
        kb = N * N if n_binary is None else min(n_binary, N * N)
        pairs = rng.choice(N * N, size=kb, replace=False)
        R[X].flat[pairs] = pb[X] * _weights(rng, kb, alpha)
        kl = V if n_lexical is None else min(n_lexical, V)
        ts = rng.choice(V, size=kl, replace=False)
        Lx[X, ts] = (1 - pb[X]) * _weights(rng, kl, alpha)
    g = PCFG(R, Lx, 0, nonterminals=[f"N{i}" for i in range(N)], terminals=[f"t{i}" for i in range(V)],
             name=name or f"random_cnf(N={N},V={V},p_bin={p_bin},seed={seed})")
    if max_len is not None:
        g.check_length(max_len, tail_tol)
    return g


# CamelCase aliases matching the family names in the issue
UniformBinary = uniform_binary
Layered = layered
RandomCNF = random_cnf
