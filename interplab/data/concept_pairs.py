"""Offline CRH concept pairs for a real chat model (issue 28 §1; methods/crh.md §2.1), built by project code from
shipped public text, with no model output anywhere.

The paper's pairs are the model's own answers to a question without and with the concept's instruction as the
system turn. SmolLM2-135M-Instruct ignores such instructions (its with-instruction answers do not mention the
concept), so that protocol gives pairs that differ in wording but not in concept. Here the with-concept response is
*built* instead of elicited:

- **Question and answer**: a public fact in one of the chat corpus's phrasings (`chat_corpus.fact_turns`, e.g. "What
  is the capital of Albania?" -> "The capital of Albania is Tirana."); facts that already contain one of the
  concept's words are skipped, so the control arm is free of the concept.
- **One aside sentence** after the answer, in one of `FRAMES` ("As an aside, this brings to mind {a} and {b}."). The
  concept arm fills the slots with the concept's own words; the control arm fills the same frame with everyday nouns
  (`resources/words/nouns.csv` minus every word of the lexicon). The two responses differ only in the slot words,
  so the difference vector is the concept, not length or style.

The concept's words (`resources/crh/concept_lexicon.csv`, 25 of the paper's 100 concepts,
hand-compiled from the concept's description and the examples in its `instruction`; see SOURCE.md)
are split in two (`split_words`, issue 46): the **build** words fill the with-concept slots, so they
make the difference vector, and the **judge** words are the judge's token set (`TokenSetJudge`): a
steered reply counts as showing the concept when it contains one of them. A vector that only
re-emits the words it was built from then scores nothing; it has to reach the concept's other words.
The split rule groups a concept's words into families (`word_families`: inflections, spelling
variants and words containing one another are one family) and alternates whole families build,
judge, build, ... in lexicon order, so no judge word is an inflection of a build word. Rows come in
the pair-file schema (`concept, question, resp_no_concept, resp_with_concept`, + `concept_words`
(the judge's), `build_words`, `cid`, `qid`), so they go through
`interplab.probes.crh.real_data.user_concept_data` like any user pair file.
"""
from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from importlib import resources
from typing import Sequence

import numpy as np

__all__ = ["FRAMES", "CONTROL", "LexiconConcept", "concept_lexicon", "neutral_words", "offline_concept_pairs",
           "control_pairs", "resolve_concepts", "word_families", "split_words", "WordSplit"]

#: the name of the no-concept control of `control_pairs`
CONTROL = "control (8 random nouns)"

#: the aside sentences; both arms of a pair use the same frame, only the slot words differ
FRAMES = ("As an aside, this brings to mind {a} and {b}.",
          "Incidentally, I was just reading about {a} and {b}.",
          "On a related note, think of {a} or {b}.",
          "It also reminds me of {a}, {b} and {c}.",
          "By the way, {a} and {b} are worth a look too.",
          "Unrelated, but I keep thinking about {a}, {b} and {c}.")


@dataclass(frozen=True)
class LexiconConcept:
    """One concept of the lexicon: the paper's id, description and genre, a short key, and its own words."""

    concept_id: int
    key: str
    words: tuple[str, ...]
    output_concept: str
    genre: str


def concept_lexicon() -> dict[str, LexiconConcept]:
    """The lexicon's concepts by key, in file order, joined to the paper's concept list by id."""
    from interplab.data.adapters.crh_concepts import concept_by_id

    ref = resources.files("interplab.data").joinpath("resources/crh/concept_lexicon.csv")
    with ref.open("r", encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    out = {}
    for r in rows:
        paper = concept_by_id(int(r["concept_id"]))
        out[r["key"]] = LexiconConcept(int(r["concept_id"]), r["key"], tuple(r["words"].split("|")),
                                       paper["output_concept"], paper["concept_genre"])
    return out


def resolve_concepts(names: Sequence) -> list[LexiconConcept]:
    """Lexicon concepts by key or paper id (empty = all of them); a clear error names the keys."""
    from interplab.core.errors import ConfigError

    lex = concept_lexicon()
    if not names:
        return list(lex.values())
    by_id = {c.concept_id: c for c in lex.values()}
    out = []
    for n in names:
        s = str(n).strip()
        c = lex.get(s) or (by_id.get(int(s)) if s.isdigit() else None)
        if c is None:
            raise ConfigError(f"no offline CRH concept {s!r}; known keys (or their paper ids): "
                              f"{', '.join(f'{k} ({v.concept_id})' for k, v in lex.items())}")
        out.append(c)
    return out


def _stem(word: str) -> str:
    """Case-folded letters and digits of a word (so "<script>" is "script") less one plural
    ending."""
    s = re.sub(r"[^\w]", "", word.casefold()) or word.casefold()
    if s.endswith("ies") and len(s) > 4:
        return s[:-3] + "y"                                   # trophies -> trophy
    if re.search(r"(s|x|ch|sh)es$", s) and len(s) > 4:
        return s[:-2]                                         # marshes -> marsh
    if s.endswith("s") and not s.endswith("ss") and len(s) > 3:
        return s[:-1]
    return s


def _related(a: str, b: str) -> bool:
    """One family: the same stem, the same first 6 letters (milliliter / millilitre, kilometers /
    kilometres), or one stem inside the other from 3 letters on (log / logarithm, script /
    javascript)."""
    x, y = _stem(a), _stem(b)
    if x == y or (min(len(x), len(y)) >= 6 and x[:6] == y[:6]):
        return True
    return min(len(x), len(y)) >= 3 and (x in y or y in x)


def word_families(words: Sequence[str]) -> list[tuple[str, ...]]:
    """The words grouped into families (connected components of `_related`), each family and the
    list in order of first appearance. Two words of one family are one word to a judge: a vector
    built from "root" that makes the model say "roots" has not reached anything new."""
    ws = list(dict.fromkeys(str(w) for w in words))
    parent = list(range(len(ws)))

    def root(i: int) -> int:
        while parent[i] != i:
            i = parent[i]
        return i

    for i in range(len(ws)):
        for j in range(i):
            if _related(ws[i], ws[j]):
                a, b = root(i), root(j)
                parent[max(a, b)] = min(a, b)
    roots = sorted({root(i) for i in range(len(ws))})
    return [tuple(ws[i] for i in range(len(ws)) if root(i) == r) for r in roots]


@dataclass(frozen=True)
class WordSplit:
    """A concept's words split into those that build its difference vector and those its judge
    looks for."""

    build: tuple[str, ...]
    judge: tuple[str, ...]


def split_words(words: Sequence[str]) -> WordSplit:
    """The rule (fixed before any reply was seen): families (`word_families`) in lexicon order
    alternate build, judge, build, ...; the first family (the lexicon lists the concept's own name
    first) builds. Needs two families, else no word is left to judge with."""
    from interplab.core.errors import ConfigError

    fams = word_families(words)
    if len(fams) < 2:
        raise ConfigError(f"the words {list(words)} form one family; a held-out judge needs words "
                          "of at least two families (add an unrelated word of the concept to the "
                          "lexicon)")
    return WordSplit(build=tuple(w for f in fams[0::2] for w in f),
                     judge=tuple(w for f in fams[1::2] for w in f))


def neutral_words() -> tuple[str, ...]:
    """Everyday nouns (singular and plural) that are no concept's word: the control arm's slot words."""
    import pandas as pd

    banned = {w.lower() for c in concept_lexicon().values() for w in c.words}
    with resources.files("interplab.data").joinpath("resources/words/nouns.csv").open("r", encoding="utf-8") as f:
        df = pd.read_csv(f, dtype=str, keep_default_na=False)
    words = list(dict.fromkeys([*df["noun"], *df["plural"]]))
    return tuple(w for w in words if w.lower() not in banned)


def offline_concept_pairs(concepts: Sequence = (), *, n_pairs: int = 30, seed: int = 0,
                          held_out_judge: bool = True) -> list[dict]:
    """`n_pairs` (without, with) rows per concept (keys or ids; empty = all): each concept draws its own questions
    from the shuffled public facts (seeded by `seed` and the concept id), a frame and slot words per
    row. held_out_judge: the slots take the concept's build words only and `concept_words` (the
    judge's) are its judge words (`split_words`); False: every word both builds and judges (the
    pairs of the issue-28 runs)."""
    from interplab.core.errors import ConfigError
    from interplab.data.chat_corpus import fact_turns
    from interplab.data.scoring import surface_tokens

    if n_pairs < 1:
        raise ConfigError(f"n_pairs must be >= 1, got {n_pairs}")
    neutral = np.array(neutral_words())
    rows = []
    for c in resolve_concepts(concepts):
        rng = np.random.default_rng([seed, c.concept_id])
        turns = fact_turns(seed=int(rng.integers(2**31)))
        split = split_words(c.words) if held_out_judge else WordSplit(build=c.words, judge=c.words)
        slot = [w for w in split.build if w.isalnum() or "-" in w] or list(split.build)
        own = {w.lower() for w in c.words}
        # a fact that already names the concept ("... the Brunei dollar" for prices) would put it in both arms
        turns = [(q, a) for q, a in turns if not own & set(surface_tokens(f"{q} {a}".lower()))]
        if n_pairs > len(turns):
            raise ConfigError(f"n_pairs={n_pairs} exceeds the {len(turns)} public facts free of {c.key!r} words")
        rows += [{**_pair_row(rng, c.key, c.concept_id, qid, q, a, slot, neutral, split.judge),
                  "build_words": "|".join(split.build)}
                 for qid, (q, a) in enumerate(turns[:n_pairs])]
    return rows


def _pair_row(rng, concept: str, cid: int, qid: int, question: str, answer: str, with_pool, no_pool,
              words) -> dict:
    """One pair-file row: the answer, then one frame with 3 words of `with_pool` in the with-arm's slots (repeats
    only when the pool is smaller) and 3 of `no_pool` in the other's. The draw order (frame, with-arm words, no-arm
    words) is part of the seeded output, and of the committed runs made from it."""
    frame = FRAMES[int(rng.integers(len(FRAMES)))]
    with_words = rng.choice(with_pool, 3, replace=len(with_pool) < 3)
    nw = rng.choice(no_pool, 3, replace=False)
    return {"concept": concept, "cid": cid, "qid": qid, "question": question,
            "resp_no_concept": f"{answer} {frame.format(a=nw[0], b=nw[1], c=nw[2])}",
            "resp_with_concept": f"{answer} {frame.format(a=with_words[0], b=with_words[1], c=with_words[2])}",
            "concept_words": "|".join(words)}


def control_pairs(n_pairs: int = 30, *, seed: int = 0, n_words: int = 8) -> list[dict]:
    """The geometry's empirical null: a pseudo-concept of `n_words` everyday nouns drawn at random (seeded), in pairs
    built exactly like `offline_concept_pairs` — its nouns in the with-arm's slots, other nouns in the no-arm's. It
    has a concept's form (a small word set, the same frames and answers) without its meaning. The LRH null of
    `fit_cylinder` assumes isotropic noise; a real residual stream is anisotropic, and a small word set alone may
    make the normal part planar: a concept's plane counts only beyond this control."""
    from interplab.core.errors import ConfigError
    from interplab.data.chat_corpus import fact_turns

    if n_pairs < 1 or n_words < 3:
        raise ConfigError(f"control_pairs needs n_pairs >= 1 and n_words >= 3, got {n_pairs}, {n_words}")
    rng = np.random.default_rng([seed, 0])
    nouns = np.array(neutral_words())
    pick = rng.permutation(nouns.size)
    pseudo, rest = nouns[pick[:n_words]], nouns[pick[n_words:]]
    return [_pair_row(rng, CONTROL, -1, qid, q, a, pseudo, rest, pseudo)
            for qid, (q, a) in enumerate(fact_turns(seed=int(rng.integers(2**31)))[:n_pairs])]
