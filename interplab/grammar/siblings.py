"""A dyadic grammar whose sibling blocks depend on each other, so that the k-level truncated predictors
(`interplab.grammar.dyadic.truncated_next_token_logprobs`, spec ../shared/methods/pcfg_parse.md §2.6, §5.4) of
different k differ measurably at the output.

Why a new family: on `uniform_binary` grammars the rule weights are random and each NT's children are drawn
independently of what the left sibling produced, so the tokens before the aligned 2^(k+1)-block of the next token
say almost nothing about it: on the shipped zoo grammar KL(p_G ‖ p_trunc,k) is 0.001–0.003 nats per position for
every k, and a model's output cannot tell the levels apart. Here every nonterminal carries a *type*, the left child
inherits its parent's type, and the right child copies its left sibling's type; the preterminal's type picks
which terminals it emits. A completed left block therefore reveals the type of its right sibling (through the parent
rule X → Y Z, which couples Y and Z), and forgetting it costs real nats at every level.
"""
from __future__ import annotations

import numpy as np

from interplab.core.errors import ConfigError
from interplab.grammar.pcfg import PCFG

__all__ = ["dependent_siblings", "DependentSiblings"]


def _markov(q: int, stay: float) -> np.ndarray:
    """[q, q] row-stochastic: keep the type with probability ``stay``, else one of the other q − 1 uniformly."""
    if q == 1:
        return np.ones((1, 1))
    M = np.full((q, q), (1.0 - stay) / (q - 1))
    np.fill_diagonal(M, stay)
    return M


def dependent_siblings(L: int = 4, q: int = 4, k_lex: int = 2, *, inherit: float = 0.8, couple: float = 0.9,
                       lex_noise: float = 0.0, name: str | None = None) -> PCFG:
    """Dyadic PCFG with dependent sibling blocks: every string has length 2**L and every tree is the complete
    binary tree over it (so it is dyadic, like `uniform_binary`, and every exact / truncated algorithm applies).

    Nonterminals: the root ``S`` (level 0) and ``A{l}_{c}`` for levels l = 1..L and types c = 0..q−1 (level L are
    the preterminals). Rules:

    * ``S → A1_b A1_b'`` with probability (1/q)·C[b, b'];
    * ``A{l}_c → A{l+1}_b A{l+1}_b'`` with probability I[c, b]·C[b, b'] (l = 1..L−1);
    * ``A{L}_c → t`` for the ``k_lex`` terminals of type c (``t{c·k_lex + i}``), uniformly, with mass
      ``1 − lex_noise``; ``lex_noise`` is spread uniformly over the other types' terminals.

    I keeps the parent's type with probability ``inherit`` (else another type, uniformly) and C copies the left
    sibling's type to the right sibling with probability ``couple``; both are in [0, 1]. V = q·k_lex terminals. With
    inherit = couple = 1/q every choice is independent and the truncated predictors of all k coincide; the larger
    they are, the more a far, completed left block predicts the next token."""
    if L < 1 or q < 1 or k_lex < 1:
        raise ConfigError(f"dependent_siblings needs L, q, k_lex >= 1; got L={L}, q={q}, k_lex={k_lex}.")
    for nm, v in (("inherit", inherit), ("couple", couple), ("lex_noise", lex_noise)):
        if not 0.0 <= v <= 1.0:
            raise ConfigError(f"{nm} is a probability and must lie in [0, 1]; got {v}.")
    if q == 1 and lex_noise > 0:
        raise ConfigError("lex_noise needs other types' terminals to move mass to: use q >= 2 or lex_noise=0.")
    V = q * k_lex
    N = 1 + L * q
    I, C = _markov(q, inherit), _markov(q, couple)

    def idx(level: int, c: int) -> int:
        return 1 + (level - 1) * q + c

    R = np.zeros((N, N, N))
    for b in range(q):
        for b2 in range(q):
            R[0, idx(1, b), idx(1, b2)] = C[b, b2] / q
    for lv in range(1, L):
        for c in range(q):
            for b in range(q):
                for b2 in range(q):
                    R[idx(lv, c), idx(lv + 1, b), idx(lv + 1, b2)] = I[c, b] * C[b, b2]
    Lx = np.zeros((N, V))
    for c in range(q):
        own = np.zeros(V, bool)
        own[c * k_lex:(c + 1) * k_lex] = True
        Lx[idx(L, c), own] = (1.0 - lex_noise) / k_lex
        if lex_noise > 0:
            Lx[idx(L, c), ~own] = lex_noise / (V - k_lex)
    names = ["S"] + [f"A{lv}_{c}" for lv in range(1, L + 1) for c in range(q)]
    levels = [0] + [lv for lv in range(1, L + 1) for _ in range(q)]
    return PCFG(R, Lx, 0, nonterminals=names, terminals=[f"t{i}" for i in range(V)], levels=levels,
                name=name or f"dependent_siblings(L={L},q={q},k_lex={k_lex},inherit={inherit},couple={couple},"
                              f"lex_noise={lex_noise})")


DependentSiblings = dependent_siblings
