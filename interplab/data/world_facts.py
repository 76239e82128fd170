"""Counterfactual-context world facts for Truth Scores on a real model (issue 27 §1 / methods/truth_scores.md).

HaluEval's contexts support the gold answer but never contradict the model's memory, so its Truth Scores cannot
tell context-following from recall (truth_scores.md §1, "no counterfactual-vs-parametric-memory contexts"). This
module builds the text analogue of the CtxMem Mode-G set from public facts:

- `load_facts`: `resources/facts/world_facts.csv` (relation, subject, object), hand-compiled from public
  knowledge (see SOURCE.md there), no model output.
- `counterfactual_items`: each fact with a context that states a different object of the same relation (the
  counterfactual v_ctx) among one or two true sentences about other subjects.
- `verification_rows`: HaluEval-format rows {knowledge, question, answer, label, index} (+ relation,
  candidate_kind): label 1 = the context's value, 0 = the memory value, so
  `interplab.data.adapters.halueval.probe_text` gives the Truth-Score probing text.
- `known_facts`: which facts the model answers right closed-book (greedy); the headline set keeps those, so a
  context-following answer is a choice against a memory the model has.

A reply is scored by the relation's object it *names first* (`first_named`), not by `starts_with_answer` alone:
chat models answer in a sentence ("The capital of France is Paris."), and an echo of the subject or a list of
guesses must not count. See `first_named` for the rule.
"""
from __future__ import annotations

import re
import unicodedata
from importlib import resources
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from interplab.core.errors import ConfigError, DataError, InputError
from interplab.data.scoring import normalise_words

__all__ = ["COLUMNS", "FACTS_FILE", "INSTRUCTION", "RELATIONS", "load_facts", "question_for", "fact_sentence",
           "counterfactual_items", "verification_rows", "generation_prompt", "closed_book_prompt", "first_named",
           "known_facts", "KNOWN_DIR", "shipped_known", "load_known", "chat_prompt"]

FACTS_FILE = "resources/facts/world_facts.csv"
# per-model closed-book filters written by scripts/known_facts.py (the model's replies decide only which facts are
# kept, never a gold answer); one CSV per real-model name, `known_facts`' columns
KNOWN_DIR = "resources/facts/known"
COLUMNS = ("relation", "subject", "object")
INSTRUCTION = "Answer with the answer only."
# relation -> (question template, context sentence template); {s} subject, {o} object
RELATIONS: dict[str, tuple[str, str]] = {
    "capital": ("What is the capital of {s}?", "The capital of {s} is {o}."),
    "currency": ("What is the currency of {s}?", "The currency of {s} is the {o}."),
    "language": ("What is the official language of {s}?", "The official language of {s} is {o}."),
    "continent": ("On which continent is {s}?", "{s} is in {o}."),
    "element_symbol": ("What is the chemical symbol of {s}?", "The chemical symbol of {s} is {o}."),
    "author": ("Who wrote {s}?", "{s} was written by {o}."),
    "landmark_city": ("In which city is {s}?", "{s} is in {o}."),
}


def _capitalised(text: str) -> str:
    # subjects such as "the Netherlands" open some sentences
    return text[:1].upper() + text[1:]


def question_for(relation: str, subject: str) -> str:
    return _capitalised(RELATIONS[relation][0].format(s=subject))


def fact_sentence(relation: str, subject: str, obj: str) -> str:
    return _capitalised(RELATIONS[relation][1].format(s=subject, o=obj))


def load_facts(relations: Sequence[str] | None = None, *, path=None) -> pd.DataFrame:
    """The facts table (columns relation, subject, object; file order). relations: keep only these.
    path: another CSV of the same schema (default: the shipped `world_facts.csv`)."""
    src = Path(path) if path is not None else resources.files("interplab.data").joinpath(FACTS_FILE)
    name = str(path) if path is not None else FACTS_FILE
    with src.open("r", encoding="utf-8") as f:
        # keep_default_na=False: a subject or object such as "NA" is text, not a missing value
        df = pd.read_csv(f, dtype=str, keep_default_na=False)
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise DataError(f"{name}: missing column(s) {missing}; expected columns {list(COLUMNS)}, got "
                        f"{list(df.columns)}")
    df = df[list(COLUMNS)].apply(lambda col: col.str.strip())
    empty = df.index[(df == "").any(axis=1)].tolist()
    if empty:
        raise DataError(f"{name}: empty cells in data row(s) {empty[:5]}")
    unknown = sorted(set(df["relation"]) - set(RELATIONS))
    if unknown:
        raise DataError(f"{name}: relation(s) {unknown} have no question template; known: {sorted(RELATIONS)}")
    dup = df[df.duplicated(["relation", "subject"], keep=False)]
    if len(dup):
        raise DataError(f"{name}: duplicate (relation, subject) pairs "
                        f"{sorted(set(zip(dup['relation'], dup['subject'])))[:5]}")
    if relations is not None:
        bad = sorted(set(relations) - set(RELATIONS))
        if bad:
            raise ConfigError(f"unknown relation(s) {bad}; known: {sorted(RELATIONS)}")
        df = df[df["relation"].isin(list(relations))]
    return df.reset_index(drop=True)


def _object_pools(facts: pd.DataFrame) -> dict[str, list[str]]:
    """Distinct objects per relation (first spelling kept), so a frequent object ("Spanish") is not favoured."""
    pools: dict[str, dict[str, str]] = {}
    for rel, obj in zip(facts["relation"], facts["object"]):
        pools.setdefault(rel, {}).setdefault(normalise_words(obj), obj)
    return {rel: list(p.values()) for rel, p in pools.items()}


def counterfactual_items(facts: pd.DataFrame, seed: int = 0, *, distractor: bool = False) -> list[dict]:
    """One item per fact: {"index", "relation", "subject", "question", "memory_value", "context_value",
    "context"}. context_value: another object of the same relation (never the true one, case-folded); context:
    its sentence plus one or two true sentences about other subjects of other relations, in a seeded order.
    Those never mention either value.

    distractor=True adds one more true sentence of the *same* relation about another subject, whose object is
    neither value ("distractor_value", "distractor_subject"): an answer that is in the context but is not the
    context's answer to the question. Without it, "the answer appears in the context" alone gives the verification
    label. The other sentences and their order are those of distractor=False (the distractor is drawn from its own
    seeded stream and inserted at a seeded place)."""
    if len(facts) == 0:
        raise InputError("no facts given")
    rng = np.random.default_rng(seed)
    drng = np.random.default_rng([seed, 1])   # its own stream: the items of distractor=False stay unchanged
    pools = _object_pools(facts)
    recs = facts.to_dict("records")
    items = []
    for i, r in enumerate(recs):
        rel, subj, true = r["relation"], r["subject"], r["object"]
        others = [o for o in pools[rel] if normalise_words(o) != normalise_words(true)]
        if not others:
            raise DataError(f"relation {rel!r} has one distinct object; a counterfactual needs at least two")
        cf = others[int(rng.integers(len(others)))]
        banned = {normalise_words(true), normalise_words(cf)}
        k = int(rng.integers(1, 3))
        picked: list[int] = []
        for j in rng.permutation(len(recs)):
            d = recs[int(j)]
            if (d["relation"] != rel and normalise_words(d["subject"]) != normalise_words(subj)
                    and normalise_words(d["object"]) not in banned):
                picked.append(int(j))
                if len(picked) == k:
                    break
        if not picked:
            raise DataError(f"no distractor fact for {rel!r} / {subj!r}: the facts need at least two relations")
        sentences = [fact_sentence(rel, subj, cf)] + [fact_sentence(recs[j]["relation"], recs[j]["subject"],
                                                                    recs[j]["object"]) for j in picked]
        order = rng.permutation(len(sentences))
        ordered = [sentences[int(o)] for o in order]
        item = {"index": i, "relation": rel, "subject": subj, "question": question_for(rel, subj),
                "memory_value": true, "context_value": cf}
        if distractor:
            d = _same_relation_distractor(recs, i, banned, drng)
            ordered.insert(int(drng.integers(len(ordered) + 1)), fact_sentence(rel, d["subject"], d["object"]))
            item.update(distractor_value=d["object"], distractor_subject=d["subject"])
        items.append({**item, "context": " ".join(ordered)})
    return items


def _same_relation_distractor(recs: list[dict], i: int, banned: set, rng) -> dict:
    """A true fact of record i's relation about another subject whose object is neither banned value."""
    r = recs[i]
    subj = normalise_words(r["subject"])
    pool = [d for d in recs if d["relation"] == r["relation"] and normalise_words(d["subject"]) != subj
            and normalise_words(d["object"]) not in banned and subj not in normalise_words(d["subject"])
            and normalise_words(d["subject"]) not in subj]   # "Guinea" / "Equatorial Guinea" would read as an echo
    if not pool:
        raise DataError(f"no same-relation distractor for {r['relation']!r} / {r['subject']!r}: the relation needs "
                        "three distinct objects")
    return pool[int(rng.integers(len(pool)))]


def verification_rows(items: Sequence[Mapping], seed: int = 0) -> list[dict]:
    """Two HaluEval-format rows per item: answer = context_value (label 1, candidate_kind "context") and answer =
    memory_value (label 0, "memory"). Items come in a seeded order with the pair adjacent and a seeded coin for
    which comes first, so any prefix is balanced and mixes relations. index = the item's index (shared by the
    pair: split folds by index to keep a pair together). An item with a "distractor_value"
    (`counterfactual_items(distractor=True)`) gives a third row, answer = distractor_value (label 0, "distractor"),
    and its three rows come in a seeded order."""
    rng = np.random.default_rng(seed)
    rows = []
    for k in rng.permutation(len(items)):
        it = items[int(k)]
        pair = [(it["context_value"], 1, "context"), (it["memory_value"], 0, "memory")]
        if rng.integers(2):
            pair.reverse()
        if "distractor_value" in it:
            pair.insert(int(rng.integers(3)), (it["distractor_value"], 0, "distractor"))
        rows.extend({"knowledge": it["context"], "question": it["question"], "answer": a, "label": y,
                     "index": it.get("index", int(k)), "relation": it["relation"], "candidate_kind": kind}
                    for a, y, kind in pair)
    return rows


PLAIN_CUE = "\nAnswer:"   # a model without a chat template (a base model) answers after this cue


def chat_prompt(message: str, tokenizer) -> str:
    """`message` as the model reads a user turn: chat-templated with the generation prompt when the tokenizer has
    a template, else the plain message ending in PLAIN_CUE (generate it with chat=False)."""
    if tokenizer is not None and getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template([{"role": "user", "content": message}], tokenize=False,
                                             add_generation_prompt=True)
    return message + PLAIN_CUE


def generation_prompt(item: Mapping, tokenizer=None) -> str:
    """The open-book prompt: chat-templated when the tokenizer has a template, else the plain message ending in
    "\nAnswer:" (generate it with chat=False)."""
    return chat_prompt(f"{INSTRUCTION}\n\nContext: {item['context']}\n\nQuestion: {item['question']}", tokenizer)


def closed_book_prompt(fact_row: Mapping, tokenizer=None) -> str:
    """The question alone (a facts row or an item: needs relation and subject), chat-templated likewise."""
    return chat_prompt(f"{INSTRUCTION}\n\nQuestion: {question_for(fact_row['relation'], fact_row['subject'])}",
                      tokenizer)


def _words(text: str) -> list[str]:
    # accents folded (a model writes "Bogotá" or "Bogota"); a possessive 's dropped so "Hydrogen's" never names
    # sulfur's "S"
    t = "".join(c for c in unicodedata.normalize("NFKD", str(text or "")) if not unicodedata.combining(c))
    return normalise_words(re.sub(r"['’]s\b", "", t)).split()


def _starts(words: list[str], phrase: list[str]) -> list[int]:
    n = len(phrase)
    return [i for i in range(len(words) - n + 1) if n and words[i:i + n] == phrase]


def first_named(reply: str, subject: str, candidates: Sequence[str]) -> str | None:
    """The candidate named first (whole words, case- and accent-folded) in the reply's first non-empty line, or
    None. Echoes of the subject are skipped first ("South Africa is in Africa" names Africa once), unless the
    subject is part of a candidate ("Mexico" in "Mexico City"). On a tie the longer candidate wins."""
    line = next((ln for ln in str(reply or "").splitlines() if ln.strip()), "")
    words = _words(line)
    cands = [(c, _words(c)) for c in candidates]
    subj = _words(subject)
    if subj and not any(_starts(cw, subj) for _, cw in cands):
        for i in reversed(_starts(words, subj)):
            words[i:i + len(subj)] = ["\0"]
    best = None
    for c, cw in cands:
        pos = _starts(words, cw)
        if pos and (best is None or (pos[0], -len(cw)) < (best[0], -best[1])):
            best = (pos[0], len(cw), c)
    return best[2] if best else None


def known_facts(model, facts: pd.DataFrame, *, max_new_tokens: int = 8, batch_size: int = 32) -> pd.DataFrame:
    """Greedy closed-book answers: columns relation, subject, object, reply, named, known.

    named: the relation's object (among `facts`) the reply names first (`first_named`); known: named is the true
    object. A sentence answer counts, so give max_new_tokens room for the model's phrasing (SmolLM2 restates
    the question before the object: 16 covers the shipped facts)."""
    if len(facts) == 0:
        raise InputError("no facts given")
    pools = _object_pools(facts)
    recs = facts.to_dict("records")
    replies: list[str] = []
    for s in range(0, len(recs), batch_size):
        chunk = [closed_book_prompt(r, model.tokenizer) for r in recs[s:s + batch_size]]
        # chat=False: the prompts are already chat-templated
        gen = model.generate(chunk, max_new_tokens=max_new_tokens, return_logits=False, chat=False)
        replies.extend(model.tokenizer.decode(t, skip_special_tokens=True).strip() for t in gen.new_tokens)
    out = facts[list(COLUMNS)].copy()
    out["reply"] = replies
    out["named"] = [first_named(rep, r["subject"], pools[r["relation"]]) for rep, r in zip(replies, recs)]
    out["known"] = [n is not None and normalise_words(n) == normalise_words(r["object"])
                    for n, r in zip(out["named"], recs)]
    return out


def shipped_known() -> list[str]:
    """Model names (without `real:`) that have a shipped closed-book filter."""
    root = resources.files("interplab.data").joinpath(KNOWN_DIR)
    return sorted(p.name[:-4] for p in root.iterdir() if p.name.endswith(".csv"))


def load_known(model: str, facts: pd.DataFrame | None = None) -> pd.Series:
    """Boolean Series aligned with `facts` (default: the shipped facts): which facts `model` answers right
    closed-book, from its shipped filter (`shipped_known()`; made by `scripts/known_facts.py`). model: a real-model
    name with or without `real:`. For another model compute it with `known_facts(model, facts)`."""
    facts = load_facts() if facts is None else facts
    key = str(model).removeprefix("real:")
    if key not in shipped_known():
        raise ConfigError(f"no shipped closed-book filter for {model!r} (shipped: {shipped_known()}); compute one "
                          "with interplab.data.world_facts.known_facts(model, facts) or "
                          "`python scripts/known_facts.py`, or (experiments) set known=compute / known=all / "
                          "known=<a shipped model>")
    src = resources.files("interplab.data").joinpath(f"{KNOWN_DIR}/{key}.csv")
    with src.open("r", encoding="utf-8") as f:
        known = pd.read_csv(f, dtype=str, keep_default_na=False)
    flag = {(r, s): k == "True" for r, s, k in zip(known["relation"], known["subject"], known["known"])}
    missing = [(r, s) for r, s in zip(facts["relation"], facts["subject"]) if (r, s) not in flag]
    if missing:
        raise DataError(f"the shipped filter for {key} has no row for {len(missing)} fact(s), e.g. {missing[:3]}; "
                        "re-run scripts/known_facts.py after changing the facts")
    return pd.Series([flag[(r, s)] for r, s in zip(facts["relation"], facts["subject"])], index=facts.index,
                     name="known")
