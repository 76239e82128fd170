"""The `PCFG` class: a probabilistic context-free grammar in Chomsky normal form, stored as dense tensors.

Notation (spec ../shared/methods/pcfg_parse.md §2.1): N nonterminals, V terminals.
``binary[X, Y, Z] = P(X -> Y Z)``, ``lexical[X, a] = P(X -> a)``, ``root[X]`` = probability that the derivation
starts at X (one-hot for a start symbol). Per nonterminal the binary and lexical rules sum to 1.

Grammar token ids: terminals ``0..V-1``, ``eos_id = V``, ``bos_id = V + 1``, ``pad_id = V + 2`` (vocabulary V + 3).
`next_token_logprobs` returns V + 1 columns: the terminals, then EOS.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np
import torch

from interplab.core.errors import ConfigError, DataError, InputError, ShapeError

__all__ = ["PCFG", "Tree", "NonTightGrammarError", "LongSampleWarning"]


class NonTightGrammarError(ConfigError):
    """The grammar's expected-children matrix has spectral radius >= 1: derivations may not terminate."""


class LongSampleWarning(UserWarning):
    """The grammar puts more than the allowed mass on strings longer than max_len."""


@dataclass
class Tree:
    """A derivation tree, flattened in preorder.

    ``spans`` is an int array [m, 4] with rows (start, end, label, depth): the node with nonterminal ``label``
    spans tokens ``start..end-1`` (the spec's (start, end]), ``depth`` is its distance from the root.
    ``parent[k]`` is the preorder index of node k's parent (-1 for the root). A node left open by truncation has
    ``end = -1``. ``logprob`` is the sum of the rule log-probabilities used (plus the root term).
    """

    spans: np.ndarray
    parent: np.ndarray
    logprob: float
    length: int
    truncated: bool = False

    def constituents(self, include_auxiliary: bool = True, g: "PCFG | None" = None) -> list[tuple[int, int, int]]:
        """(start, end, label) of the completed nodes; with ``include_auxiliary=False`` drop ``g``'s auxiliary NTs."""
        out = []
        for s, e, lab, _ in self.spans:
            if e < 0:
                continue
            if not include_auxiliary and g is not None and g.auxiliary[lab]:
                continue
            out.append((int(s), int(e), int(lab)))
        return out

    def to_nltk(self, g: "PCFG", tokens: Sequence[int]):
        """An `nltk.Tree` with nonterminal and terminal names (complete trees only)."""
        import nltk

        if self.truncated:
            raise DataError("to_nltk needs a complete tree; this sample was truncated at max_len.")
        m = len(self.spans)
        children: list[list[int]] = [[] for _ in range(m)]
        for k in range(1, m):
            children[self.parent[k]].append(k)

        def build(k):
            s, e, lab, _ = self.spans[k]
            name = g.nonterminals[lab]
            if not children[k]:
                return nltk.Tree(name, [g.terminals[int(tokens[s])]])
            return nltk.Tree(name, [build(c) for c in children[k]])

        return build(0)


def _as_tensor(x, dtype=torch.float64) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x.detach().to(dtype=dtype, device="cpu").clone()
    return torch.as_tensor(np.asarray(x, dtype=np.float64), dtype=dtype)


class PCFG:
    """A CNF PCFG as dense tensors (see module docstring).

    Args:
        binary: [N, N, N] rule probabilities P(X -> Y Z).
        lexical: [N, V] rule probabilities P(X -> a).
        root: [N] start distribution, or an int (index of the start symbol).
        nonterminals: N names (default "N0".."N{N-1}").
        terminals: V names in id order (default "t0".."t{V-1}").
        auxiliary: [N] bools marking helper NTs created by binarisation / preterminal introduction (left out of
            probe targets).
        levels: [N] ints, the grammar level of each NT where the family has levels (else -1).
        name: a short description (used in cards and figures).
        validate: check shapes, non-negativity, row sums (atol ``atol``) and tightness.
    """

    def __init__(self, binary, lexical, root, *, nonterminals: Sequence[str] | None = None,
                 terminals: Sequence[str] | None = None, auxiliary=None, levels=None, name: str = "pcfg",
                 validate: bool = True, atol: float = 1e-8, dtype=torch.float64):
        self.binary = _as_tensor(binary, dtype)
        self.lexical = _as_tensor(lexical, dtype)
        if self.binary.ndim != 3 or len(set(self.binary.shape)) != 1:
            raise ShapeError(f"binary rules must be [N,N,N]; got {tuple(self.binary.shape)}.")
        N = self.binary.shape[0]
        if self.lexical.ndim != 2 or self.lexical.shape[0] != N:
            raise ShapeError(f"lexical rules must be [N={N}, V]; got {tuple(self.lexical.shape)}.")
        V = self.lexical.shape[1]
        if isinstance(root, (int, np.integer)):
            if not 0 <= int(root) < N:
                raise InputError(f"root index {root} out of range for {N} nonterminals.")
            r = torch.zeros(N, dtype=dtype)
            r[int(root)] = 1.0
            self.root = r
        else:
            self.root = _as_tensor(root, dtype)
            if self.root.shape != (N,):
                raise ShapeError(f"root must be [N={N}] or an int; got {tuple(self.root.shape)}.")
        self.nonterminals = list(nonterminals) if nonterminals is not None else [f"N{i}" for i in range(N)]
        self.terminals = list(terminals) if terminals is not None else [f"t{i}" for i in range(V)]
        if len(self.nonterminals) != N or len(set(self.nonterminals)) != N:
            raise InputError(f"need {N} distinct nonterminal names; got {len(self.nonterminals)}.")
        if len(self.terminals) != V or len(set(self.terminals)) != V:
            raise InputError(f"need {V} distinct terminal names; got {len(self.terminals)}.")
        self.auxiliary = np.zeros(N, bool) if auxiliary is None else np.asarray(auxiliary, bool)
        self.levels = -np.ones(N, int) if levels is None else np.asarray(levels, int)
        if self.auxiliary.shape != (N,) or self.levels.shape != (N,):
            raise ShapeError("auxiliary and levels must have one entry per nonterminal.")
        self.name = name
        self._t_index = {t: i for i, t in enumerate(self.terminals)}
        self._cache: dict = {}
        if validate:
            self.validate(atol=atol)

    # ------------------------------------------------------------------ basic properties
    @property
    def n_nonterminals(self) -> int:
        return self.binary.shape[0]

    @property
    def n_terminals(self) -> int:
        return self.lexical.shape[1]

    N = n_nonterminals
    V = n_terminals

    @property
    def eos_id(self) -> int:
        return self.n_terminals

    @property
    def bos_id(self) -> int:
        return self.n_terminals + 1

    @property
    def pad_id(self) -> int:
        return self.n_terminals + 2

    @property
    def dtype(self):
        return self.binary.dtype

    @property
    def start(self) -> int | None:
        """Index of the start symbol when the root is one-hot, else None."""
        nz = torch.nonzero(self.root > 0).flatten()
        return int(nz[0]) if len(nz) == 1 and abs(float(self.root[nz[0]]) - 1) < 1e-12 else None

    def to(self, dtype) -> "PCFG":
        """A copy with tensors in ``dtype`` (float32 for production, float64 for tests)."""
        return PCFG(self.binary, self.lexical, self.root, nonterminals=self.nonterminals, terminals=self.terminals,
                    auxiliary=self.auxiliary, levels=self.levels, name=self.name, validate=False, dtype=dtype)

    def __repr__(self) -> str:
        nb = int((self.binary > 0).sum())
        nl = int((self.lexical > 0).sum())
        return (f"PCFG({self.name!r}, N={self.N}, V={self.V}, binary_rules={nb}, lexical_rules={nl}, "
                f"dtype={str(self.dtype).replace('torch.', '')})")

    # ------------------------------------------------------------------ validation
    def expected_children(self) -> torch.Tensor:
        """M[X, Y] = expected number of Y children of one X node = Σ_Z R[X,Y,Z] + R[X,Z,Y]."""
        return self.binary.sum(2) + self.binary.sum(1)

    def left_corner(self) -> torch.Tensor:
        """P[X, Y] = Σ_Z R[X, Y, Z] (the left-corner matrix)."""
        return self.binary.sum(2)

    def spectral_radius(self) -> float:
        """Spectral radius of the expected-children matrix restricted to NTs reachable from the root."""
        M = self.expected_children().double()
        reach = self.reachable()
        M = M[reach][:, reach]
        if M.numel() == 0:
            return 0.0
        return float(torch.linalg.eigvals(M).abs().max())

    def reachable(self) -> torch.Tensor:
        """Bool [N]: nonterminals reachable from the root distribution."""
        adj = (self.expected_children() > 0)
        r = self.root > 0
        while True:
            nxt = r | (adj[r].any(0) if r.any() else r)
            if torch.equal(nxt, r):
                return r
            r = nxt

    def validate(self, atol: float = 1e-8) -> None:
        """Raise `ConfigError` unless probabilities are valid and `NonTightGrammarError` unless the grammar is
        tight (spectral radius of the expected-children matrix < 1)."""
        for nm, t in (("binary", self.binary), ("lexical", self.lexical), ("root", self.root)):
            if not torch.isfinite(t).all():
                raise ConfigError(f"{nm} rule probabilities contain NaN/inf.")
            if (t < 0).any():
                raise ConfigError(f"{nm} rule probabilities must be >= 0.")
        sums = self.binary.flatten(1).sum(1) + self.lexical.sum(1)
        bad = torch.nonzero((sums - 1).abs() > atol).flatten().tolist()
        if bad:
            detail = ", ".join(f"{self.nonterminals[i]}: {float(sums[i]):.6g}" for i in bad[:5])
            raise ConfigError(f"rule probabilities of each nonterminal must sum to 1; they do not for {detail}. "
                              "Normalise each nonterminal's binary + lexical rules.")
        if abs(float(self.root.sum()) - 1) > atol:
            raise ConfigError(f"root distribution sums to {float(self.root.sum()):.6g}, not 1.")
        rho = self.spectral_radius()
        if rho >= 1 - 1e-9:
            raise NonTightGrammarError(
                f"grammar {self.name!r} is not tight (or is critical): the spectral radius of its expected-children "
                f"matrix is {rho:.4f} >= 1, so derivations need not terminate and prefix probabilities diverge. "
                "Lower the binary-rule mass (p_bin) of the recursive nonterminals.")

    # ------------------------------------------------------------------ derived tensors (cached)
    def closure(self) -> dict[str, torch.Tensor]:
        """Left-corner closure E = (I - P)^-1, D[X,Y,Z] = Σ_W E[X,W] R[W,Y,Z], EL = E Lx (spec §2.3), in float64
        and then cast to the grammar dtype."""
        if "closure" not in self._cache:
            P = self.left_corner().double()
            rho = float(torch.linalg.eigvals(P).abs().max()) if P.numel() else 0.0
            if rho >= 1 - 1e-9:
                raise NonTightGrammarError(f"left-corner matrix has spectral radius {rho:.4f} >= 1; the left-corner "
                                           "closure (I-P)^-1 does not exist.")
            N = P.shape[0]
            E = torch.linalg.solve(torch.eye(N, dtype=torch.float64) - P, torch.eye(N, dtype=torch.float64))
            E = E.clamp_min(0)  # tiny negative round-off
            D = torch.einsum("xw,wyz->xyz", E, self.binary.double())
            EL = E @ self.lexical.double()
            self._cache["closure"] = {"E": E.to(self.dtype), "D": D.to(self.dtype), "EL": EL.to(self.dtype)}
        return self._cache["closure"]

    def length_distribution(self, max_len: int) -> torch.Tensor:
        """Exact P(len = ℓ) for ℓ = 0..max_len (index 0 is always 0), by a CKY-like DP on lengths (float64)."""
        R = self.binary.double()
        N = self.N
        c = torch.zeros(max_len + 1, N, dtype=torch.float64)
        if max_len >= 1:
            c[1] = self.lexical.double().sum(1)
        for ell in range(2, max_len + 1):
            # c[ell, X] = Σ_k Σ_{Y,Z} R[X,Y,Z] c[k,Y] c[ell-k,Z]
            pair = torch.einsum("ky,kz->yz", c[1:ell], c[1:ell].flip(0))
            c[ell] = torch.einsum("xyz,yz->x", R, pair)
        return c @ self.root.double()

    def length_tail(self, max_len: int) -> float:
        """P(len > max_len) (exact up to float64 round-off)."""
        return float(max(0.0, 1.0 - float(self.length_distribution(max_len).sum())))

    def check_length(self, max_len: int, tol: float = 1e-4) -> float:
        """Warn (`LongSampleWarning`) if P(len > max_len) > tol; returns the tail mass."""
        tail = self.length_tail(max_len)
        if tail > tol:
            warnings.warn(f"grammar {self.name!r} generates strings longer than max_len={max_len} with probability "
                          f"{tail:.3g} > {tol:g}; sample() will raise on them (or truncate if asked). Raise max_len or "
                          "lower p_bin.", LongSampleWarning, stacklevel=2)
        return tail

    # ------------------------------------------------------------------ tokens
    def encode(self, sentences: Iterable[str | Sequence[str]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Terminal strings ("a b c" or ["a", "b", "c"]) -> (tokens [B, n_max] LongTensor padded with pad_id,
        lengths [B])."""
        rows = []
        for s in sentences:
            words = s.split() if isinstance(s, str) else list(s)
            try:
                rows.append([self._t_index[w] for w in words])
            except KeyError as e:
                raise InputError(f"unknown terminal {e.args[0]!r}; the grammar's terminals are {self.terminals}.") from None
        if not rows:
            raise InputError("encode needs at least one sentence.")
        n = max(1, max(len(r) for r in rows))
        toks = torch.full((len(rows), n), self.pad_id, dtype=torch.long)
        for b, r in enumerate(rows):
            toks[b, :len(r)] = torch.tensor(r, dtype=torch.long)
        return toks, torch.tensor([len(r) for r in rows], dtype=torch.long)

    def decode(self, tokens, lengths=None) -> list[str]:
        """Token ids -> space-joined terminal strings (stops at pad/eos or at ``lengths``)."""
        toks = torch.as_tensor(tokens)
        if toks.ndim == 1:
            toks = toks[None]
        out = []
        for b in range(toks.shape[0]):
            n = int(lengths[b]) if lengths is not None else toks.shape[1]
            words = []
            for t in toks[b, :n].tolist():
                if t >= self.V:
                    break
                words.append(self.terminals[t])
            out.append(" ".join(words))
        return out

    def lengths_of(self, tokens: torch.Tensor) -> torch.Tensor:
        """Lengths of pad-padded token rows (number of ids < V before the first non-terminal id)."""
        is_t = torch.as_tensor(tokens) < self.V
        return torch.cumprod(is_t.long(), dim=1).sum(1)

    # ------------------------------------------------------------------ sampling
    def _sampler_tables(self):
        if "sampler" not in self._cache:
            R = self.binary.double().reshape(self.N, -1).numpy()
            L = self.lexical.double().numpy()
            allp = np.concatenate([R, L], axis=1)  # [N, N*N + V]
            cdf = np.cumsum(allp, axis=1)
            cdf /= cdf[:, -1:]
            logp = np.log(np.where(allp > 0, allp, 1.0))
            rcdf = np.cumsum(self.root.double().numpy())
            rcdf /= rcdf[-1]
            self._cache["sampler"] = (cdf, logp, rcdf)
        return self._cache["sampler"]

    def sample(self, n: int, seed: int = 0, max_len: int = 64, on_long: str = "raise"):
        """Draw ``n`` exact samples. Returns ``(tokens, trees)``: tokens [n, max length drawn] LongTensor padded
        with ``pad_id`` (lengths via ``lengths_of(tokens)`` or ``tree.length``), trees a list of `Tree`.

        Long strings are never silently re-sampled (rejection would change the distribution). ``on_long``:
        ``"raise"`` (default) raises `DataError` when a sample would exceed ``max_len``; ``"truncate"`` keeps its
        first ``max_len`` tokens (an exact sample of the prefix distribution), marks ``tree.truncated`` and leaves
        nodes that were still open with ``end = -1``.
        """
        if n < 1:
            raise InputError("sample needs n >= 1.")
        if on_long not in ("raise", "truncate"):
            raise InputError("on_long must be 'raise' or 'truncate'.")
        cdf, logp, rcdf = self._sampler_tables()
        N, NN = self.N, self.N * self.N
        rng = np.random.default_rng(seed)
        seqs, trees = [], []
        for _ in range(n):
            X0 = int(np.searchsorted(rcdf, rng.random(), side="right"))
            X0 = min(X0, N - 1)
            lp = float(np.log(self.root[X0]))
            spans: list[list[int]] = []
            parent: list[int] = []
            out: list[int] = []
            # stack of (nt, depth, parent_index); a negative nt marks "close node k" (record the end position)
            stack: list[tuple[int, int, int]] = [(X0, 0, -1)]
            pending = 1  # NTs not yet expanded (each yields >= 1 token)
            truncated = False
            while stack:
                X, depth, par = stack.pop()
                if X < 0:
                    spans[-X - 1][1] = len(out)
                    continue
                pending -= 1
                if len(out) >= max_len:
                    truncated = True
                    break
                k = len(spans)
                spans.append([len(out), -1, X, depth])
                parent.append(par)
                u = rng.random()
                r = int(np.searchsorted(cdf[X], u, side="right"))
                r = min(r, cdf.shape[1] - 1)
                lp += logp[X, r]
                if r >= NN:  # lexical
                    out.append(r - NN)
                    spans[k][1] = len(out)
                else:
                    Y, Z = divmod(r, N)
                    stack.append((-k - 1, 0, 0))
                    stack.append((Z, depth + 1, k))
                    stack.append((Y, depth + 1, k))
                    pending += 2
                if len(out) + pending > max_len and on_long == "raise":
                    raise DataError(
                        f"a sample from grammar {self.name!r} is longer than max_len={max_len} (P(len > max_len) = "
                        f"{self.length_tail(max_len):.3g}). Long strings are never silently re-sampled: raise "
                        "max_len, or pass on_long='truncate' to keep exact prefixes.")
            if stack and not truncated:
                truncated = any(x >= 0 for x, _, _ in stack)
            seqs.append(out)
            trees.append(Tree(np.asarray(spans, dtype=np.int64).reshape(-1, 4), np.asarray(parent, dtype=np.int64),
                              lp, len(out), truncated))
        width = max(1, max(len(s) for s in seqs))
        toks = torch.full((n, width), self.pad_id, dtype=torch.long)
        for b, s in enumerate(seqs):
            toks[b, :len(s)] = torch.tensor(s, dtype=torch.long)
        return toks, trees

    # ------------------------------------------------------------------ NLTK interop
    def to_nltk(self):
        """An `nltk.grammar.PCFG` built from production objects (exact float probabilities, no string parsing).
        A non-one-hot root becomes a fresh start symbol "ROOT" with unary rules ROOT -> X [root[X]]."""
        from nltk.grammar import PCFG as NPCFG, Nonterminal, ProbabilisticProduction

        nts = [Nonterminal(s) for s in self.nonterminals]
        prods = []
        R = self.binary.double()
        for X, Y, Z in torch.nonzero(R > 0).tolist():
            prods.append(ProbabilisticProduction(nts[X], [nts[Y], nts[Z]], prob=float(R[X, Y, Z])))
        L = self.lexical.double()
        for X, a in torch.nonzero(L > 0).tolist():
            prods.append(ProbabilisticProduction(nts[X], [self.terminals[a]], prob=float(L[X, a])))
        s = self.start
        if s is not None:
            start = nts[s]
        else:
            start = Nonterminal("ROOT")
            for X in torch.nonzero(self.root > 0).flatten().tolist():
                prods.append(ProbabilisticProduction(start, [nts[X]], prob=float(self.root[X])))
        return NPCFG(start, prods)

    @classmethod
    def from_nltk(cls, grammar, *, name: str = "nltk", binarize: bool = True, **kw) -> "PCFG":
        """Build from an `nltk.grammar.PCFG`. Rules must be A -> B C ..., A -> a, or (start only) S -> A unary.
        Right-hand sides of >2 nonterminals are binarised exactly with auxiliary NTs (A -> B C D becomes
        A -> B @C_D, @C_D -> C D with probability 1). Unary NT rules other than from the start symbol raise."""
        from nltk.grammar import Nonterminal

        prods = grammar.productions()
        start = grammar.start()
        nt_names: list[str] = []
        idx: dict[str, int] = {}

        def nt(name):
            if name not in idx:
                idx[name] = len(nt_names)
                nt_names.append(name)
            return idx[name]

        term_names: list[str] = []
        tidx: dict[str, int] = {}
        unary_root: dict[str, float] = {}
        bins: list[tuple[int, list[int], float]] = []
        lexs: list[tuple[int, int, float]] = []
        for p in prods:
            lhs = str(p.lhs().symbol())
            rhs = p.rhs()
            if len(rhs) == 1 and not isinstance(rhs[0], Nonterminal):
                t = str(rhs[0])
                if t not in tidx:
                    tidx[t] = len(term_names)
                    term_names.append(t)
                lexs.append((nt(lhs), tidx[t], p.prob()))
            elif len(rhs) == 1:
                if p.lhs() != start:
                    raise InputError(f"unary rule {p} is not in CNF; only the start symbol may have unary rules "
                                     "(they become the root distribution).")
                unary_root[str(rhs[0].symbol())] = p.prob()
            elif all(isinstance(x, Nonterminal) for x in rhs):
                bins.append((nt(lhs), [nt(str(x.symbol())) for x in rhs], p.prob()))
            else:
                raise InputError(f"rule {p} mixes terminals into a right-hand side of length > 1; introduce "
                                 "preterminals first.")
        aux = set()
        if unary_root:
            start_is_root_only = True
        else:
            start_is_root_only = False
            nt(str(start.symbol()))
        binary_rules = []
        for X, rhs, p in bins:
            if len(rhs) == 2:
                binary_rules.append((X, rhs[0], rhs[1], p))
                continue
            if not binarize:
                raise InputError("right-hand side longer than 2; pass binarize=True.")
            cur = X
            rest = rhs
            first = True
            while len(rest) > 2:
                aux_name = "@" + "_".join(nt_names[r] for r in rest[1:])
                new = aux_name not in idx
                A = nt(aux_name)
                aux.add(A)
                binary_rules.append((cur, rest[0], A, p if first else 1.0))
                first = False
                if not new:  # the same suffix already expands deterministically
                    rest = []
                    break
                cur, rest = A, rest[1:]
            if rest:
                binary_rules.append((cur, rest[0], rest[1], p if first else 1.0))
        N, V = len(nt_names), len(term_names)
        R = torch.zeros(N, N, N, dtype=torch.float64)
        for X, Y, Z, p in binary_rules:
            if nt_names[X].startswith("@") and X in aux and R[X, Y, Z] > 0:
                continue  # shared auxiliary, already added
            R[X, Y, Z] += p
        Lx = torch.zeros(N, V, dtype=torch.float64)
        for X, a, p in lexs:
            Lx[X, a] += p
        if start_is_root_only:
            root = torch.zeros(N, dtype=torch.float64)
            for name, p in unary_root.items():
                root[idx[name]] += p
            if str(start.symbol()) in idx:
                raise InputError("the start symbol has both unary and binary/lexical rules; not supported.")
        else:
            root = idx[str(start.symbol())]
        auxm = np.zeros(N, bool)
        auxm[list(aux)] = True
        return cls(R, Lx, root, nonterminals=nt_names, terminals=term_names, auxiliary=auxm, name=name, **kw)

    # ------------------------------------------------------------------ serialisation
    def to_dict(self) -> dict:
        """JSON-able description (nonzero rules as lists) for cards and run directories."""
        R = self.binary.double()
        return {
            "name": self.name, "nonterminals": self.nonterminals, "terminals": self.terminals,
            "binary": [[X, Y, Z, float(R[X, Y, Z])] for X, Y, Z in torch.nonzero(R > 0).tolist()],
            "lexical": [[X, a, float(self.lexical[X, a])] for X, a in torch.nonzero(self.lexical > 0).tolist()],
            "root": self.root.double().tolist(), "auxiliary": self.auxiliary.tolist(), "levels": self.levels.tolist(),
        }

    @classmethod
    def from_dict(cls, d: dict, **kw) -> "PCFG":
        N, V = len(d["nonterminals"]), len(d["terminals"])
        R = torch.zeros(N, N, N, dtype=torch.float64)
        for X, Y, Z, p in d["binary"]:
            R[X, Y, Z] = p
        L = torch.zeros(N, V, dtype=torch.float64)
        for X, a, p in d["lexical"]:
            L[X, a] = p
        return cls(R, L, d["root"], nonterminals=d["nonterminals"], terminals=d["terminals"],
                   auxiliary=d.get("auxiliary"), levels=d.get("levels"), name=d.get("name", "pcfg"), **kw)

    @classmethod
    def from_string(cls, text: str, *, name: str = "custom", **kw) -> "PCFG":
        """Parse rules one per line: ``S -> NP VP [0.7]``; terminals in quotes (``N -> 'dog' [0.5]``). Numbers
        may use exponent notation (unlike `nltk.PCFG.fromstring`). The first LHS is the start symbol."""
        from nltk.grammar import Nonterminal, PCFG as NPCFG, ProbabilisticProduction
        import re

        prods, start = [], None
        for ln, line in enumerate(text.splitlines(), 1):
            line = line.split("#")[0].strip()
            if not line:
                continue
            m = re.fullmatch(r"(\S+)\s*->\s*(.+?)\s*\[\s*([0-9.eE+-]+)\s*\]", line)
            if not m:
                raise InputError(f"line {ln}: {line!r} is not 'A -> B C [p]' or \"A -> 'a' [p]\".")
            lhs, rhs, p = m.group(1), m.group(2).split(), float(m.group(3))
            syms = []
            for r in rhs:
                if len(r) >= 2 and r[0] == r[-1] and r[0] in "'\"":
                    syms.append(r[1:-1])
                else:
                    syms.append(Nonterminal(r))
            if start is None:
                start = Nonterminal(lhs)
            prods.append(ProbabilisticProduction(Nonterminal(lhs), syms, prob=p))
        if not prods:
            raise InputError("no rules given.")
        try:
            ng = NPCFG(start, prods)
        except ValueError as e:
            raise ConfigError(f"invalid grammar: {e}") from None
        return cls.from_nltk(ng, name=name, **kw)

    def to_string(self) -> str:
        """Rules one per line in the `from_string` format."""
        lines = []
        order = list(range(self.N))
        if self.start is not None:
            order.remove(self.start)
            order.insert(0, self.start)
        R = self.binary.double()
        for X in order:
            for Y, Z in torch.nonzero(R[X] > 0).tolist():
                lines.append(f"{self.nonterminals[X]} -> {self.nonterminals[Y]} {self.nonterminals[Z]} [{float(R[X, Y, Z]):.10g}]")
            for a in torch.nonzero(self.lexical[X] > 0).flatten().tolist():
                lines.append(f"{self.nonterminals[X]} -> '{self.terminals[a]}' [{float(self.lexical[X, a]):.10g}]")
        return "\n".join(lines)
