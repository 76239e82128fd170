"""Clean / corrupt factual-recall pairs for activation patching on a real model (issue 27 §3, "Lenses and the atlas";
docs/lenses.md, "Lenses over many fact pairs").

A pair is one relation's declarative sentence prefix with two subjects whose objects differ:

    clean   "The capital of France is"  -> answer " Paris"
    corrupt "The capital of Italy is"   -> wrong  " Rome"

built offline from the shipped world facts (`interplab.data.world_facts.load_facts`), never from a model's output:
the answer is the clean subject's object and the wrong token the corrupt subject's object, both read from the facts
file. A model only decides which facts are kept (`known`: the facts it answers right closed-book,
`world_facts.load_known`), not what the gold answer is.

The prompts are plain text (the relation's context sentence of `world_facts.RELATIONS` cut before its object, e.g.
"The currency of Japan is the" -> " yen"), tokenized with the tokenizer's own special tokens (Gemma's <bos>;
SmolLM2 adds none) and *not* chat-templated, for base and instruction-tuned models alike: the next token is then the
object itself, and the two prompts differ only in the subject. (A chat model's user turn would be answered with a
sentence whose first token is the same for every subject.) The pair carries token ids, so a lens reads exactly
these tokens whatever the model's chat default.

A pair is kept only when (checked on the given tokenizer):
- answer and wrong are each one token with their leading space (" Paris"), and appending it to the prompt's text
  tokenizes to the prompt's ids plus that token (so the answer is the next token, no merge across the boundary);
- clean and corrupt prompts have the same token length (position-wise patching lines positions up);
- the two objects differ (case- and punctuation-folded), so answer != wrong.
Multi-token objects are dropped, not cut to their first token.

    >>> from interplab.data.fact_pairs import fact_pairs
    >>> pairs = fact_pairs(tokenizer, known=load_known("smollm2-135m-instruct"), seed=0)
    >>> pairs[0].clean, pairs[0].answer, pairs[0].corrupt, pairs[0].wrong
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from interplab.core.errors import DataError, InputError
from interplab.data.scoring import normalise_words

__all__ = ["FactPair", "PAIR_COLUMNS", "prompt_prefix", "single_token", "encode_pair", "fact_pairs",
           "pairs_from_rows", "pairs_frame"]

# a user's pairs file (CSV / JSONL): one row per pair; answer / wrong are one token each (a leading space is tried)
PAIR_COLUMNS = ("clean", "corrupt", "answer", "wrong")


@dataclass
class FactPair:
    """One clean / corrupt prompt pair of equal token length with single-token answer and wrong tokens.

    clean / corrupt: the prompts' text. answer / wrong: the gold next token of the clean / corrupt prompt as text
    (with its leading space). clean_ids / corrupt_ids: the prompts' token ids (special tokens included).
    answer_id / wrong_id: the two tokens' ids. relation, subject, corrupt_subject: where the pair came from
    ("" for a user's pair)."""

    clean: str
    corrupt: str
    answer: str
    wrong: str
    clean_ids: list[int] = field(repr=False)
    corrupt_ids: list[int] = field(repr=False)
    answer_id: int = -1
    wrong_id: int = -1
    relation: str = ""
    subject: str = ""
    corrupt_subject: str = ""

    @property
    def n_tokens(self) -> int:
        return len(self.clean_ids)


def prompt_prefix(relation: str, subject: str) -> str:
    """The relation's context sentence for `subject` cut before its object ("The capital of France is")."""
    from interplab.data.world_facts import RELATIONS, fact_sentence

    if relation not in RELATIONS:
        raise InputError(f"unknown relation {relation!r}; known: {sorted(RELATIONS)}")
    marker = "\x00"
    return fact_sentence(relation, subject, marker).split(marker)[0].rstrip()


def single_token(tokenizer, text: str) -> tuple[int, str] | None:
    """(id, spelling) when `text` is one token of `tokenizer` (with one leading space first, then as written:
    the next word of a sentence prefix carries its space), else None."""
    for cand in (" " + text.lstrip(), text):
        ids = tokenizer(cand, add_special_tokens=False)["input_ids"]
        if len(ids) == 1:
            return int(ids[0]), cand
    return None


def _answer_follows(tokenizer, prompt: str, prompt_ids: list[int], answer: str, answer_id: int) -> bool:
    """Whether prompt + answer tokenizes to prompt_ids + [answer_id] (the answer is the prompt's next token)."""
    full = tokenizer(prompt + answer, add_special_tokens=True)["input_ids"]
    return list(full) == list(prompt_ids) + [answer_id]


def encode_pair(tokenizer, clean: str, corrupt: str, answer: str, wrong: str, **meta) -> FactPair | None:
    """The `FactPair` of two prompts and their gold tokens, or None when it breaks a rule of the module docstring
    (a multi-token answer, unequal lengths, answer == wrong, or a tokenization that merges across the boundary)."""
    at, wt = single_token(tokenizer, answer), single_token(tokenizer, wrong)
    if at is None or wt is None or at[0] == wt[0]:
        return None
    (a, a_txt), (w, w_txt) = at, wt
    c_ids = list(tokenizer(clean, add_special_tokens=True)["input_ids"])
    k_ids = list(tokenizer(corrupt, add_special_tokens=True)["input_ids"])
    if len(c_ids) != len(k_ids) or c_ids == k_ids:
        return None
    if not (_answer_follows(tokenizer, clean, c_ids, a_txt, a)
            and _answer_follows(tokenizer, corrupt, k_ids, w_txt, w)):
        return None
    return FactPair(clean, corrupt, a_txt, w_txt, c_ids, k_ids, a, w, **meta)


def fact_pairs(tokenizer, *, n: int | None = None, seed: int = 0, known: Sequence[bool] | pd.Series | None = None,
               relations: Sequence[str] | None = None, facts: pd.DataFrame | None = None) -> list[FactPair]:
    """Clean / corrupt pairs from the world facts for `tokenizer` (see the module docstring for the rules).

    facts: the facts table (default `world_facts.load_facts()`); known: a boolean mask aligned with it (e.g.
    `load_known("smollm2-135m-instruct")`; None keeps every fact) — both subjects of a pair are kept facts.
    Every kept fact whose object is one token is a clean prompt once; its corrupt partner is drawn (seeded) among
    the other kept facts of the relation with a different one-token object and a prompt of equal token length.
    The pairs come relation by relation in turn (a seeded order within and across relations), so any prefix mixes
    relations; n: keep the first n (None = all). Deterministic for a seed and tokenizer."""
    from interplab.data.world_facts import load_facts

    facts = load_facts(relations) if facts is None else facts
    if known is not None:
        mask = np.asarray(known, dtype=bool)
        if mask.shape != (len(facts),):
            raise InputError(f"known must be one flag per fact ({len(facts)}), got shape {mask.shape}")
        facts = facts[mask]
    if relations is not None:
        facts = facts[facts["relation"].isin(list(relations))]
    rng = np.random.default_rng(seed)
    by_rel: dict[str, list[dict]] = {}
    for r in facts.to_dict("records"):
        obj = " " + r["object"]
        ids = tokenizer(obj, add_special_tokens=False)["input_ids"]
        if len(ids) != 1:
            continue
        tid = int(ids[0])
        prompt = prompt_prefix(r["relation"], r["subject"])
        ids = list(tokenizer(prompt, add_special_tokens=True)["input_ids"])
        if not _answer_follows(tokenizer, prompt, ids, obj, tid):
            continue
        by_rel.setdefault(r["relation"], []).append({**r, "prompt": prompt, "ids": ids, "tid": tid, "obj": obj})
    per_rel: dict[str, list[FactPair]] = {}
    for rel in sorted(by_rel):
        rows = by_rel[rel]
        out = per_rel.setdefault(rel, [])
        for i in rng.permutation(len(rows)):
            c = rows[int(i)]
            cands = [k for k in rows if len(k["ids"]) == len(c["ids"]) and k["tid"] != c["tid"]
                     and normalise_words(k["object"]) != normalise_words(c["object"])
                     and normalise_words(k["subject"]) != normalise_words(c["subject"])]
            if not cands:
                continue
            k = cands[int(rng.integers(len(cands)))]
            out.append(FactPair(c["prompt"], k["prompt"], c["obj"], k["obj"], c["ids"], k["ids"], c["tid"], k["tid"],
                                rel, c["subject"], k["subject"]))
    order = list(rng.permutation(sorted(per_rel)))
    pairs: list[FactPair] = []
    for j in range(max((len(v) for v in per_rel.values()), default=0)):
        pairs.extend(per_rel[str(rel)][j] for rel in order if j < len(per_rel[str(rel)]))
    if not pairs:
        raise DataError("no fact pair survives the rules (one-token objects, equal prompt lengths) on this "
                        "tokenizer; give your own pairs (pairs_from_rows) instead")
    return pairs[:n] if n is not None else pairs


def pairs_from_rows(tokenizer, rows: Iterable[Mapping], *, source: str = "the pairs") -> tuple[list[FactPair], int]:
    """Your own pairs: rows with columns clean, corrupt, answer, wrong (`PAIR_COLUMNS`; answer / wrong one token
    each, a leading space tried). Returns (the pairs that keep the rules, how many rows were dropped)."""
    from interplab.data.files import require_columns

    rows = list(rows)
    if not rows:
        raise DataError(f"{source} holds no rows")
    require_columns(list(rows[0]), PAIR_COLUMNS, source=source, hint="one row per clean / corrupt pair")
    pairs = [encode_pair(tokenizer, str(r["clean"]), str(r["corrupt"]), str(r["answer"]), str(r["wrong"]),
                         relation=str(r.get("relation", "") or "")) for r in rows]
    kept = [p for p in pairs if p is not None]
    if not kept:
        raise DataError(f"no row of {source} keeps the rules (answer and wrong one token each and different, clean and "
                        "corrupt of equal token length)")
    return kept, len(pairs) - len(kept)


def pairs_frame(pairs: Sequence[FactPair]) -> pd.DataFrame:
    """One row per pair (ids as space-separated strings, so the table saves as CSV)."""
    rows = []
    for i, p in enumerate(pairs):
        d = asdict(p)
        d["clean_ids"] = " ".join(map(str, p.clean_ids))
        d["corrupt_ids"] = " ".join(map(str, p.corrupt_ids))
        rows.append({"pair": i, **d, "n_tokens": p.n_tokens})
    return pd.DataFrame(rows)
