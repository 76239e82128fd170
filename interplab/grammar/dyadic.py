"""Dyadic inside vectors and the k-level truncated next-token predictor for uniform-binary grammars
(spec ../shared/methods/pcfg_parse.md §2.6 "Dyadic inside" / "k-level truncated predictor", §2.7 extras, §5.4
"Construction mirror (uniform binary)").

A grammar is *dyadic* when every nonterminal X derives strings of exactly one length 2^size(X): preterminals
(size 0) have only lexical rules, and every binary rule X → Y Z with positive probability has size(Y) = size(Z) =
size(X) − 1. `uniform_binary` grammars are dyadic by construction. In a dyadic grammar with a single root size Lg
every string has length n_G = 2^Lg and every parse tree is the complete binary tree over it, so the constituents are
exactly the *aligned dyadic blocks* [j·2^k, (j+1)·2^k) (0-based token positions), and an aligned block's inside
vector needs only the middle split: β_k[j] = R·(β_{k−1}[2j] ⊗ β_{k−1}[2j+1]). That is what the O(log n)
construction computes, one level per layer.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from interplab.core.errors import ConfigError, InputError
from interplab.grammar.algorithms import NEG_INF, _check, _combine_splits, _log, _logmatmul
from interplab.grammar.pcfg import PCFG

__all__ = ["DyadicUndefinedError", "DyadicInside", "dyadic_sizes", "dyadic_inside", "root_size",
           "truncated_next_token_logprobs"]


class DyadicUndefinedError(ConfigError):
    """The grammar is not dyadic (uniform-binary-like), so aligned dyadic blocks are not its constituents."""


def dyadic_sizes(g: PCFG) -> np.ndarray:
    """log₂ of the (unique) yield length of every nonterminal, [N] ints. Raises `DyadicUndefinedError` unless every
    NT has either only lexical rules (size 0) or only binary rules X → Y Z whose children all have one common size
    s (then size(X) = s + 1). Recursive NTs (unbounded yield lengths) are rejected too."""
    if "dyadic_sizes" in g._cache:
        return g._cache["dyadic_sizes"]
    R = (g.binary > 0).cpu().numpy()
    lex = (g.lexical > 0).cpu().numpy().any(1)
    has_bin = R.reshape(g.N, -1).any(1)
    need = ("dyadic inside vectors and the k-level truncated predictor need a uniform-binary-like grammar: every "
            "nonterminal derives strings of one length 2^s, i.e. preterminals have only lexical rules and every rule "
            "X -> Y Z has children of equal size (e.g. interplab.grammar.uniform_binary); ")
    mixed = np.flatnonzero(lex & has_bin)
    if mixed.size:
        raise DyadicUndefinedError(need + f"nonterminal {g.nonterminals[mixed[0]]!r} has both lexical and binary rules.")
    size = np.where(lex, 0, -1)
    for _ in range(g.N + 1):
        changed = False
        for X in np.flatnonzero(size < 0):
            Y, Z = np.nonzero(R[X])
            ch = np.concatenate([size[Y], size[Z]])
            if (ch < 0).any():
                continue
            if (ch != ch[0]).any():
                bad = int(np.flatnonzero(ch != ch[0])[0]) % len(Y)
                raise DyadicUndefinedError(need + f"rule {g.nonterminals[X]} -> {g.nonterminals[Y[bad]]} "
                                           f"{g.nonterminals[Z[bad]]} has children of different yield lengths.")
            size[X] = ch[0] + 1
            changed = True
        if not changed:
            break
    if (size < 0).any():
        X = int(np.flatnonzero(size < 0)[0])
        raise DyadicUndefinedError(need + f"nonterminal {g.nonterminals[X]!r} is recursive (its yield length is not "
                                   "fixed).")
    g._cache["dyadic_sizes"] = size
    return size


def root_size(g: PCFG) -> int:
    """Lg: log2 of the one string length a dyadic grammar derives (`DyadicUndefinedError` when the root mixes sizes)."""
    sizes = dyadic_sizes(g)
    rs = np.unique(sizes[(g.root > 0).cpu().numpy()])
    if rs.size != 1:
        raise DyadicUndefinedError("the k-level truncated predictor needs one string length 2^Lg: the root "
                                   f"distribution mixes nonterminals of yield lengths {[2 ** int(s) for s in rs]}.")
    return int(rs[0])


@dataclass
class DyadicInside:
    """Inside vectors of the aligned dyadic blocks. ``levels[k]`` is [B, n >> k, N] with entry [b, j, A] =
    log β[A] of the block [j·2^k, (j+1)·2^k) (= chart span (j·2^k, (j+1)·2^k]); −inf where the block reaches past
    the sequence's length."""

    levels: list
    lengths: torch.Tensor

    @property
    def k_max(self) -> int:
        return len(self.levels) - 1

    def block(self, k: int, j: int) -> torch.Tensor:
        """log β of block j at level k, [B, N]."""
        return self.levels[k][:, j]

    def ends(self, k: int) -> torch.Tensor:
        """Token count at the end of each level-k block, [n >> k]: (j+1)·2^k (the model position that reads it)."""
        return (torch.arange(self.levels[k].shape[1]) + 1) * (2 ** k)


def dyadic_inside(g: PCFG, tokens, lengths=None, k_max: int | None = None) -> DyadicInside:
    """Inside vectors of every aligned block [j·2^k, (j+1)·2^k), k = 0..k_max (default: the largest k with
    2^k <= n), batched and in log space (spec §2.6, §2.7 extras). Level 0 is the lexical gather; level k combines
    the two halves of each block with the inside kernel of `interplab.grammar.inside` (one split per block), so the
    total cost is O(n·N³) per sequence instead of the chart's O(n³N² + n²N³). Equals the full chart's entries on
    aligned spans for dyadic grammars; raises `DyadicUndefinedError` for any other grammar (where aligned blocks are
    not the constituents)."""
    dyadic_sizes(g)
    tok, lengths, valid = _check(g, tokens, lengths)
    B, n = tok.shape
    top = int(np.floor(np.log2(n)))
    if k_max is None:
        k_max = top
    if not 0 <= k_max <= top:
        raise InputError(f"k_max must lie in 0..{top} for n={n} tokens (blocks of size 2^k_max must fit); "
                         f"got {k_max}.")
    N = g.N
    R2t = g.binary.reshape(N, N * N).T.contiguous()
    lv0 = _log(g.lexical).T[tok]
    levels = [torch.where(valid[..., None], lv0, torch.full_like(lv0, NEG_INF))]
    for k in range(1, k_max + 1):
        prev = levels[-1]
        m = prev.shape[1] // 2
        cur = _combine_splits(prev[:, 0:2 * m:2, None], prev[:, 1:2 * m:2, None], R2t)
        ok = ((torch.arange(m) + 1) * 2 ** k)[None, :] <= lengths[:, None]
        levels.append(torch.where(ok[..., None], cur, torch.full_like(cur, NEG_INF)))
    return DyadicInside(levels, lengths)


def truncated_next_token_logprobs(g: PCFG, tokens, lengths=None, k: int = 0) -> torch.Tensor:
    """The k-level truncated predictor p_trunc,k(· | w≤p) (spec §2.6 "k-level truncated predictor", §5.4) for
    p = 0..n over the V terminals and EOS (last column): [B, n+1, V+1] log-probabilities, same layout as
    `next_token_logprobs`.

    **Cover.** In a dyadic grammar with string length n_G = 2^Lg, the prefix w≤p (token positions [0, p)) is covered
    by the aligned blocks of the binary expansion of p, largest first: for each set bit m of p, the block of size
    2^m starting at p with bits 0..m cleared (p = 11 = 8+2+1 → [0,8), [8,10), [10,11)). These blocks are exactly the
    left siblings on the root-to-leaf path of the next token w_{p+1}, so the exact next-token distribution is a
    top-down pass along that path: α_root = root; a left child gets α·P_L (P_L[X,Y] = Σ_Z R[X,Y,Z]: its right
    sibling is still in the future, summed out); a right child gets Σ_{X,Y} α[X]·R[X,Y,Z]·β[Y] with β the inside
    vector of its (completed) left sibling; at the leaf, scores s[v] = α·Lx[:, v], normalised.

    **Truncation.** p_trunc,k uses only blocks of size ≤ 2^k (from `dyadic_inside(..., k_max=k)`): a left sibling of
    size > 2^k is treated like a future sibling (its inside vector replaced by all-ones = summed over all its
    strings). Equivalently, p_trunc,k(v | w≤p) = P_G(w_{p+1} = v | w_{s+1..p}, positions known) with
    s = p − (p mod 2^{k+1}): the tokens before the aligned 2^{k+1}-block containing the next token are forgotten,
    the position is not. k = −1 forgets everything (the positional marginal); k ≥ Lg − 1 uses every block and equals
    `next_token_logprobs` exactly. All nodes of the complete tree are processed level by level, batched: O(n·N³).
    At p = n_G the row is EOS with probability 1; rows p > min(length, n_G) are −inf. The predictor does not check
    that the forgotten tokens were possible (for impossible strings it can be finite where the exact one is −inf).
    Raises `DyadicUndefinedError` unless the grammar is dyadic with a single root size."""
    if int(k) != k or k < -1:
        raise InputError(f"k must be an integer >= -1 (blocks of size <= 2^k are used); got {k}.")
    k = int(k)
    Lg = root_size(g)
    tok, lengths, _ = _check(g, tokens, lengths)
    B, n = tok.shape
    N, V = g.N, g.V
    nG = 2 ** Lg
    k_eff = min(k, Lg - 1, int(np.floor(np.log2(n))))
    di = dyadic_inside(g, tok, lengths, k_max=k_eff) if k_eff >= 0 else None
    R = g.binary
    PL, PR = R.sum(2), R.sum(1)  # [X, Y] left child marginal, [X, Z] right child marginal
    RXY_Z = R.reshape(N * N, N)
    alpha = _log(g.root).reshape(1, 1, N).expand(B, 1, N)
    for d in range(Lg):
        msz = Lg - d - 1  # log2 size of the children
        m = alpha.shape[1]
        left = _logmatmul(alpha, PL)
        if msz <= k_eff:
            blocks = di.levels[msz][:, 0:2 * m:2]
            if blocks.shape[1] < m:  # tokens tensor shorter than n_G: blocks past it never feed a leaf <= n
                pad = torch.full((B, m - blocks.shape[1], N), NEG_INF, dtype=blocks.dtype)
                blocks = torch.cat([blocks, pad], 1)
            right = _combine_splits(alpha[:, :, None], blocks[:, :, None], RXY_Z)
        else:
            right = _logmatmul(alpha, PR)
        alpha = torch.stack([left, right], dim=2).reshape(B, 2 * m, N)
    scores = _logmatmul(alpha, g.lexical)  # [B, nG, V]
    out = torch.full((B, n + 1, V + 1), NEG_INF, dtype=g.dtype)
    P = min(nG, n + 1)
    sc = scores[:, :P]
    tot = torch.logsumexp(sc, -1, keepdim=True)
    ok = torch.isfinite(tot)
    out[:, :P, :V] = torch.where(ok, sc - torch.where(ok, tot, torch.zeros_like(tot)), torch.full_like(sc, NEG_INF))
    if nG <= n:
        out[:, nG, V] = 0.0
    valid = torch.arange(n + 1)[None, :] <= lengths[:, None]
    return torch.where(valid[..., None], out, torch.full_like(out, NEG_INF))
