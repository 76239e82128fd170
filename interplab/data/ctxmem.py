"""CtxMem: key-value recall with a memorised map and context passages that may contradict it
(methods/truth_scores.md §7; the HaluEval analogue of the Truth-Score pipeline).

A fixed memory map M: entity -> value (a seeded permutation of 32 entities onto 32 values, the same for every toy
organism) is learned in the weights. A context passage lists k = 3..6 (entity, value) pairs.

Generation mode (`task="ctxmem_gen"`)::

    ctx e1 v1 e2 v2 .. ek vk q e_q ans  ->  v <eos>

If e_q is in the context (probability `p_in_context`), its context value is a counterfactual v_ctx != M(e_q) and
the target is v_ctx; otherwise the target is M(e_q) (answer from memory).

Verification mode (`task="ctxmem_ver"`, e_q always in the context), candidate before the query (default
`layout="candidate_first"`, see the calibration notes in docs/zoo.md)::

    ctx e1 v1 .. ek vk cand a q e_q ver  ->  T|F <eos>

with T iff a == v_ctx. Negatives are a = M(e_q) (parametric, the "hallucination"), the value of another pair in the
same context ("distractor") or a random other value. Distractors matter for training: without them "is the candidate
anywhere in the context?" answers ~90% of items, and a model that learns that shortcut never learns the lookup.
Other layouts: `"candidate_last"` (`.. q e_q cand a ver`) and `"answer"` (`.. q e_q ans a ver`: the generation
prompt with the candidate in the answer slot, so generation's lookup at `ans` can be reused; 1000 continuation steps
from toy-base on it did not beat candidate-first, docs/zoo.md).

Metadata (`example.meta`), positions index `example.prompt_words` (add 1 for <bos> in raw format, or use
`encode(...).word_pos`):

| key | meaning |
|---|---|
| mode | "gen" or "ver" |
| query_entity | e_q |
| in_context | e_q appears in the context |
| context_value | v_ctx (None when not in context) |
| memory_value | M(e_q) |
| contradicts_memory | in_context and v_ctx != M(e_q) |
| target | the answer word (gen: a value; ver: "T"/"F") |
| candidate, candidate_kind, label | ver only: a, one of "context"/"memory"/"distractor"/"random", 1 iff a == v_ctx |
| pairs | the context's (entity, value) pairs in order |
| pos | {"query": e_q after `q`, "evidence_entity"/"evidence_value": e_q and v_ctx in the context (None if absent), "candidate": a (ver), "last": the final prompt word (`ans`/`ver`)} |
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from interplab.data import toy_vocab as tv
from interplab.data.examples import Example, sample_examples

MEMORY_SEED = 1234


@lru_cache(maxsize=8)
def memory_map(seed: int = MEMORY_SEED) -> dict[str, str]:
    """The memorised entity -> value map (a seeded permutation; identical for all toy organisms)."""
    perm = np.random.default_rng(seed).permutation(tv.N_VALUES)
    return {e: tv.VALUES[int(perm[i])] for i, e in enumerate(tv.ENTITIES)}


@dataclass(frozen=True)
class CtxMemConfig:
    """k_min, k_max: number of context pairs (inclusive). p_in_context: P(e_q in context) in generation mode.
    p_agree: P(v_ctx == M(e_q)) when in context (0 = always counterfactual, as in the spec).
    p_true: P(label T) in verification. Among F candidates: p_memory_negative a = M(e_q), p_distractor_negative
    a = another context pair's value, the rest a random value (a draw that is impossible, e.g. M(e_q) == v_ctx,
    falls through to the next kind).
    layout: verification layout, "answer" (`q e_q ans a ver`), "candidate_first" (`cand a q e_q ver`) or
    "candidate_last" (`q e_q cand a ver`).
    memory_seed: seed of the memory map."""

    k_min: int = 3
    k_max: int = 6
    p_in_context: float = 0.7
    p_agree: float = 0.0
    p_true: float = 0.5
    p_memory_negative: float = 0.4
    p_distractor_negative: float = 0.4
    layout: str = "candidate_first"
    memory_seed: int = MEMORY_SEED


class CtxMem:
    """Seeded CtxMem example generator: `CtxMem().generation(rng)`, `.verification(rng)`, `.sample(n, seed, mode)`."""

    def __init__(self, config: CtxMemConfig | None = None):
        self.config = config or CtxMemConfig()
        self.memory = memory_map(self.config.memory_seed)

    def _context(self, rng: np.random.Generator, in_context: bool):
        c = self.config
        k = int(rng.integers(c.k_min, c.k_max + 1))
        ents = [tv.ENTITIES[i] for i in rng.choice(tv.N_ENTITIES, size=k + 1, replace=False)]
        e_q = ents[-1] if not in_context else ents[int(rng.integers(k))]
        ents = ents[:k]
        mem = self.memory[e_q]
        vals = [tv.VALUES[i] for i in rng.choice(tv.N_VALUES, size=k, replace=False)]
        if in_context:
            j = ents.index(e_q)
            agree = rng.random() < c.p_agree
            if agree and mem not in vals:
                vals[j] = mem
            elif not agree and vals[j] == mem:
                others = [v for v in tv.VALUES if v != mem and v not in vals]
                vals[j] = others[int(rng.integers(len(others)))]
        return ents, vals, e_q, mem

    def generation(self, rng: np.random.Generator) -> Example:
        in_ctx = bool(rng.random() < self.config.p_in_context)
        ents, vals, e_q, mem = self._context(rng, in_ctx)
        words = [tv.CTX]
        for e, v in zip(ents, vals):
            words += [e, v]
        words += [tv.QUERY, e_q, tv.ANS]
        v_ctx = vals[ents.index(e_q)] if in_ctx else None
        target = v_ctx if in_ctx else mem
        j = ents.index(e_q) if in_ctx else None
        meta = {
            "mode": "gen", "query_entity": e_q, "in_context": in_ctx, "context_value": v_ctx,
            "memory_value": mem, "contradicts_memory": bool(in_ctx and v_ctx != mem), "target": target,
            "pairs": list(zip(ents, vals)),
            "pos": {"query": len(words) - 2, "evidence_entity": None if j is None else 1 + 2 * j,
                    "evidence_value": None if j is None else 2 + 2 * j, "candidate": None, "last": len(words) - 1},
        }
        return Example("ctxmem_gen", (), tuple(words), (target,), meta)

    def verification(self, rng: np.random.Generator) -> Example:
        c = self.config
        ents, vals, e_q, mem = self._context(rng, True)
        j = ents.index(e_q)
        v_ctx = vals[j]
        u = rng.random()
        if rng.random() < c.p_true:
            cand, kind = v_ctx, "context"
        elif u < c.p_memory_negative and mem != v_ctx:
            cand, kind = mem, "memory"
        elif u < c.p_memory_negative + c.p_distractor_negative and len(vals) > 1:
            others = [v for v in vals if v != v_ctx]
            cand, kind = others[int(rng.integers(len(others)))], "distractor"
        else:
            others = [v for v in tv.VALUES if v not in (v_ctx, mem)]
            cand, kind = others[int(rng.integers(len(others)))], "random"
        words = [tv.CTX]
        for e, v in zip(ents, vals):
            words += [e, v]
        if c.layout == "answer":
            words += [tv.QUERY, e_q, tv.ANS, cand, tv.VER]
            p_cand, p_query = len(words) - 2, len(words) - 4
        elif c.layout == "candidate_first":
            words += [tv.CAND, cand, tv.QUERY, e_q, tv.VER]
            p_cand, p_query = len(words) - 4, len(words) - 2
        elif c.layout == "candidate_last":
            words += [tv.QUERY, e_q, tv.CAND, cand, tv.VER]
            p_cand, p_query = len(words) - 2, len(words) - 4
        else:
            from interplab.core.errors import ConfigError

            raise ConfigError(f"CtxMemConfig.layout must be 'answer', 'candidate_first' or 'candidate_last', "
                              f"got {c.layout!r}")
        label = int(cand == v_ctx)
        target = tv.TRUE if label else tv.FALSE
        meta = {
            "mode": "ver", "query_entity": e_q, "in_context": True, "context_value": v_ctx, "memory_value": mem,
            "contradicts_memory": v_ctx != mem, "target": target, "candidate": cand, "candidate_kind": kind,
            "label": label, "pairs": list(zip(ents, vals)),
            "pos": {"query": p_query, "evidence_entity": 1 + 2 * j, "evidence_value": 2 + 2 * j,
                    "candidate": p_cand, "last": len(words) - 1},
        }
        return Example("ctxmem_ver", (), tuple(words), (target,), meta)

    def sample(self, n: int, seed: int = 0, mode: str = "gen", split: str = "test") -> list[Example]:
        """n examples of `mode` ("gen" | "ver"); split "test" = held-out bucket (never trained on)."""
        from interplab.core.errors import InputError

        if mode not in ("gen", "ver"):
            raise InputError(f"CtxMem mode {mode!r} must be 'gen' or 'ver'")
        fn = self.generation if mode == "gen" else self.verification
        return sample_examples(fn, n, seed, split)
