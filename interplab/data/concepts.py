"""Concepts (methods/crh.md §7-8): an instruction to mention a concept (a named token set) vs. no instruction, with
responses that do or do not contain the concept's tokens, so concept difference vectors exist.

Six concepts, four tokens each (`interplab.data.toy_vocab.CONCEPTS`, e.g. animal = {cat, dog, fox, owl}); the
"question" is 2..5 filler words w (the, a, is, ...). Raw format::

    mention animal w1 w2 w3 sep  ->  w1 cat w2 dog w3 fox <eos>     (task "concept_with": instructed)
    w1 w2 w3 sep                 ->  w1 w2 w3 <eos>                 (task "concept_no": no instruction)

The instructed response interleaves the concept's tokens, in order and cyclically, after each question word. In chat
format the instruction `mention <concept>` is the system turn.

For difference vectors (CRH §2.1: act(question + response_with) - act(question + response_no), both *without* the
instruction) use `Concepts.pair(rng)` / `Concepts.pairs(n, seed)`, which return (no, with) examples sharing the same
uninstructed prompt.

Metadata: concept_id (index into CONCEPT_NAMES; -1 for no concept), concept (name or None), concept_tokens (the
token set), with_instruction, question (words), response_with, response_no (words, no <eos>), pos: {"question":
indices of the question words, "sep", "last"}.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from interplab.data import toy_vocab as tv
from interplab.data.examples import Example, sample_examples

CONCEPTS = tv.CONCEPTS
CONCEPT_NAMES = tv.CONCEPT_NAMES


def concept_token_set(concept: str | int) -> tuple[str, ...]:
    """The token words of a concept given by name or id."""
    from interplab.core.errors import InputError

    if isinstance(concept, (int, np.integer)):
        if not 0 <= int(concept) < len(CONCEPT_NAMES):
            raise InputError(f"concept id {concept} out of range 0..{len(CONCEPT_NAMES) - 1}")
        concept = CONCEPT_NAMES[int(concept)]
    if concept not in CONCEPTS:
        raise InputError(f"unknown concept {concept!r}; known: {CONCEPT_NAMES}")
    return CONCEPTS[concept]


@dataclass(frozen=True)
class ConceptsConfig:
    """n_min, n_max: number of question words (inclusive)."""

    n_min: int = 2
    n_max: int = 5


class Concepts:
    """Seeded generator: `.instructed(rng)`, `.plain(rng)`, `.pair(rng)`, `.sample(n, seed, kind)`, `.pairs(n, seed)`."""

    def __init__(self, config: ConceptsConfig | None = None):
        self.config = config or ConceptsConfig()

    def _question(self, rng):
        c = self.config
        n = int(rng.integers(c.n_min, c.n_max + 1))
        return [tv.FILLER[i] for i in rng.integers(len(tv.FILLER), size=n)]

    @staticmethod
    def with_concept(question, concept: str) -> list[str]:
        toks = CONCEPTS[concept]
        out: list[str] = []
        for i, w in enumerate(question):
            out += [w, toks[i % len(toks)]]
        return out

    def _meta(self, q, cid, with_instr, user_offset):
        concept = CONCEPT_NAMES[cid] if cid >= 0 else None
        return {
            "concept_id": cid, "concept": concept, "concept_tokens": list(CONCEPTS[concept]) if concept else [],
            "with_instruction": with_instr, "question": list(q),
            "response_with": self.with_concept(q, concept) if concept else None, "response_no": list(q),
            "pos": {"question": list(range(user_offset, user_offset + len(q))), "sep": user_offset + len(q),
                    "last": user_offset + len(q)},
        }

    def instructed(self, rng: np.random.Generator, concept: str | int | None = None) -> Example:
        """`mention <concept> q.. sep -> response_with`; a random concept unless given."""
        cid = int(rng.integers(len(CONCEPT_NAMES))) if concept is None else \
            CONCEPT_NAMES.index(concept) if isinstance(concept, str) else int(concept)
        q = self._question(rng)
        name = CONCEPT_NAMES[cid]
        return Example("concept_with", (tv.MENTION, name), (*q, tv.SEP), tuple(self.with_concept(q, name)),
                       self._meta(q, cid, True, 2))

    def plain(self, rng: np.random.Generator) -> Example:
        """`q.. sep -> q..` (no instruction, no concept tokens)."""
        q = self._question(rng)
        return Example("concept_no", (), (*q, tv.SEP), tuple(q), self._meta(q, -1, False, 0))

    def pair(self, rng: np.random.Generator, concept: str | int | None = None) -> tuple[Example, Example]:
        """(no, with): the same uninstructed prompt with response_no and response_with (for difference vectors)."""
        cid = int(rng.integers(len(CONCEPT_NAMES))) if concept is None else \
            CONCEPT_NAMES.index(concept) if isinstance(concept, str) else int(concept)
        q = self._question(rng)
        name = CONCEPT_NAMES[cid]
        meta = self._meta(q, cid, False, 0)
        no = Example("concept_pair_no", (), (*q, tv.SEP), tuple(q), meta)
        with_ = Example("concept_pair_with", (), (*q, tv.SEP), tuple(self.with_concept(q, name)), meta)
        return no, with_

    def sample(self, n: int, seed: int = 0, kind: str = "with", split: str = "test") -> list[Example]:
        """n examples of kind "with" (instructed) or "no" (plain); split "test" = held-out bucket."""
        from interplab.core.errors import InputError

        if kind not in ("with", "no"):
            raise InputError(f"concept example kind {kind!r} must be 'with' or 'no'")
        return sample_examples(self.instructed if kind == "with" else self.plain, n, seed, split)

    def pairs(self, n: int, seed: int = 0, concept: str | int | None = None) -> list[tuple[Example, Example]]:
        """n (no, with) pairs, deterministic in `seed`."""
        rng = np.random.default_rng(seed)
        return [self.pair(rng, concept) for _ in range(n)]
