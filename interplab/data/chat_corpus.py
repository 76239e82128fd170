"""Offline chat dialogues for SAE training on a real chat model (issue 28 §3; methods/fast_sae.md §2.1).

The paper trains on public SFT/chat sets (WildChat, tulu-3, ...), which cannot be downloaded here. This module builds
the stand-in from text that ships with the project or with Python, with no language-model output anywhere (neither
prompt nor answer):

- **Python explanations**: Python's own reference topics (`pydoc_data.topics`, the hyperfitting corpus). A user asks
  about a topic ("How does augmented assignment work in Python?") and the assistant answers with a paragraph of that
  topic, word for word (capped at `MAX_ANSWER_WORDS` at a sentence end). 40 % of them continue for a second turn
  ("Tell me more.") answered by the topic's next paragraph.
- **Facts and words**: the hand-compiled public facts (`resources/facts/world_facts.csv`, 7 relations) and word
  pairs (`resources/words/antonyms.csv`, `nouns.csv`). A question in one of several phrasings, an answer sentence from
  the relation's template ("The capital of Albania is Tirana."). 40 % of them are two-question dialogues.

Every dialogue is user/assistant turns only: the model's chat template adds its own default system prompt
(SmolLM2 does), as the spec says to keep it.

Split: a Python paragraph is held out when `interplab.data.corpus.load_corpus` holds it out (10 %, seed 0); a fact or
word pair when crc32 of its subject is 0 mod 10. A two-turn dialogue is held out when its first item is (its second
item then comes from the same split). `plain_texts` gives block training on "pretraining text" (BT(P)) the training
split's Python paragraphs as raw text, without any chat template: the stand-in for the paper's Pile.
"""
from __future__ import annotations

import re
import zlib
from dataclasses import dataclass

import numpy as np

__all__ = ["ChatCorpus", "chat_corpus", "fact_turns", "plain_texts", "MAX_ANSWER_WORDS"]

MAX_ANSWER_WORDS = 120
TWO_TURN_FRACTION = 0.4

_TOPIC_QUESTIONS = ("Explain {t} in Python.", "How does {t} work in Python?",
                    "What does the Python language reference say about {t}?", "Can you describe {t} in Python?",
                    "I am learning Python. What should I know about {t}?")
_FOLLOW_UPS = ("Tell me more.", "Go on.", "What else should I know?", "Can you continue?")
_FACT_QUESTIONS = {
    "capital": ("What is the capital of {s}?", "Which city is the capital of {s}?", "Name the capital of {s}."),
    "currency": ("What is the currency of {s}?", "Which currency is used in {s}?", "What money do they use in {s}?"),
    "language": ("What is the official language of {s}?", "Which language is official in {s}?"),
    "continent": ("On which continent is {s}?", "Where in the world is {s}?", "Which continent is {s} part of?"),
    "element_symbol": ("What is the chemical symbol of {s}?", "How is {s} written in chemical formulas?"),
    "author": ("Who wrote {s}?", "Who is the author of {s}?"),
    "landmark_city": ("In which city is {s}?", "Where can I see {s}?"),
    "antonym": ("What is the opposite of \"{s}\"?", "Give me an antonym of \"{s}\".",
                "Which word means the opposite of \"{s}\"?"),
    "plural": ("What is the plural of \"{s}\"?", "How do you write \"{s}\" in the plural?"),
}
_FACT_ANSWERS = {
    "antonym": "The opposite of \"{s}\" is \"{o}\".",
    "plural": "The plural of \"{s}\" is \"{o}\".",
}


@dataclass(frozen=True)
class ChatCorpus:
    """train / eval: dialogues (lists of {"role", "content"} messages); kinds_*: "python" or "facts" per dialogue;
    answers_*: the object of a facts dialogue's last question (the public fact, e.g. "Beirut"), None for Python ones:
    a steered reply can be checked against it."""

    train: list
    eval: list
    kinds_train: list
    kinds_eval: list
    answers_train: list
    answers_eval: list

    def counts(self) -> dict:
        return {f"{split}_{k}": sum(1 for x in kinds if x == k) for split, kinds in
                (("train", self.kinds_train), ("eval", self.kinds_eval)) for k in ("python", "facts")}


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def _cap_words(text: str, n: int = MAX_ANSWER_WORDS) -> str:
    """The paragraph itself, or its longest prefix of whole sentences within n words (at least its first n words)."""
    words = text.split()
    if len(words) <= n:
        return text
    cut = " ".join(words[:n])
    ends = [m.end() for m in re.finditer(r"[.!?:](?=\s|$)", cut)]
    return cut[:ends[-1]] if ends and ends[-1] > len(cut) // 3 else cut


def _topic_name(key: str) -> str:
    name = key.replace("-", " ").replace("bltin ", "built-in ")
    return {"augassign": "augmented assignment", "execmodel": "the execution model", "exprlists": "expression lists",
            "formatstrings": "format strings", "id classes": "reserved identifier classes",
            "specialattrs": "special attributes", "specialnames": "special method names",
            "typesfunctions": "function objects", "typesmapping": "mapping types", "typesmethods": "method objects",
            "typesmodules": "module objects", "typesseq": "sequence types", "typesseq mutable": "mutable sequences",
            "if": "the if statement", "in": "the in operator", "for": "the for statement", "else": "else clauses",
            "try": "the try statement", "with": "the with statement", "while": "the while statement",
            "truth": "truth value testing", "power": "the power operator", "unary": "unary operators",
            "del": "the del statement", "pass": "the pass statement", "raise": "the raise statement",
            "return": "the return statement", "yield": "yield expressions", "global": "the global statement",
            "nonlocal": "the nonlocal statement", "import": "the import statement", "lambda": "lambda expressions",
            "assert": "the assert statement", "break": "the break statement",
            "continue": "the continue statement", "await": "await expressions"}.get(name, name)


def _python_items() -> list[tuple[str, list[str], bool]]:
    """(topic, paragraphs, held out) per run of paragraphs of one topic that share a split."""
    from pydoc_data.topics import topics

    from interplab.data.corpus import load_corpus, paragraphs

    held = set(load_corpus(("pydoc",)).heldout)
    out = []
    for key in sorted(topics):
        paras = list(dict.fromkeys(paragraphs(topics[key])))
        for flag in (False, True):
            run = [p for p in paras if (p in held) == flag]
            if run:
                out.append((_topic_name(key), run, flag))
    return out


def _fact_items() -> list[tuple[str, str, str]]:
    """(relation, subject, object) of every public fact and word pair."""
    import pandas as pd
    from importlib import resources

    from interplab.data.world_facts import load_facts

    items = [tuple(r) for r in load_facts()[["relation", "subject", "object"]].itertuples(index=False)]
    res = resources.files("interplab.data").joinpath("resources/words")
    for fname, rel, cols in (("antonyms.csv", "antonym", ("word", "opposite")),
                             ("nouns.csv", "plural", ("noun", "plural"))):
        with res.joinpath(fname).open("r", encoding="utf-8") as f:
            df = pd.read_csv(f, dtype=str, keep_default_na=False)
        items += [(rel, s, o) for s, o in zip(df[cols[0]], df[cols[1]])]
    return items


def _fact_turn(rel: str, s: str, o: str, rng) -> tuple[str, str]:
    from interplab.data.world_facts import fact_sentence

    q = _cap(_FACT_QUESTIONS[rel][int(rng.integers(len(_FACT_QUESTIONS[rel])))].format(s=s))
    a = _cap(_FACT_ANSWERS[rel].format(s=s, o=o)) if rel in _FACT_ANSWERS else fact_sentence(rel, s, o)
    return q, a


def fact_turns(seed: int = 0) -> list[tuple[str, str]]:
    """Every public fact and word pair as one (question, answer) turn, shuffled with `seed` (phrasing drawn with it
    too); the CRH offline pairs (`interplab.data.concept_pairs`) build on these."""
    rng = np.random.default_rng(seed)
    items = _fact_items()
    return [_fact_turn(*items[int(i)], rng) for i in rng.permutation(len(items))]


def _held_fact(subject: str) -> bool:
    return zlib.crc32(subject.encode("utf-8")) % 10 == 0


def chat_corpus(seed: int = 0) -> ChatCorpus:
    """Every dialogue the sources give (about 1,700: see the module docstring), shuffled with `seed` within each
    split. Deterministic: the same seed gives the same dialogues on every machine."""
    rng = np.random.default_rng(seed)
    dialogues: dict[bool, list] = {False: [], True: []}
    kinds: dict[bool, list] = {False: [], True: []}
    answers: dict[bool, list] = {False: [], True: []}
    for topic, paras, held in _python_items():
        i = 0
        while i < len(paras):
            msgs = [{"role": "user", "content": _TOPIC_QUESTIONS[int(rng.integers(len(_TOPIC_QUESTIONS)))]
                     .format(t=topic)}, {"role": "assistant", "content": _cap_words(paras[i])}]
            if i + 1 < len(paras) and rng.random() < TWO_TURN_FRACTION:
                msgs += [{"role": "user", "content": _FOLLOW_UPS[int(rng.integers(len(_FOLLOW_UPS)))]},
                         {"role": "assistant", "content": _cap_words(paras[i + 1])}]
                i += 1
            i += 1
            dialogues[held].append(msgs)
            kinds[held].append("python")
            answers[held].append(None)
    facts = _fact_items()
    by_split = {h: [f for f in facts if _held_fact(f[1]) == h] for h in (False, True)}
    for held, items in by_split.items():
        order = rng.permutation(len(items))
        i = 0
        while i < len(order):
            n = 2 if (i + 1 < len(order) and rng.random() < TWO_TURN_FRACTION) else 1
            msgs = []
            for j in order[i:i + n]:
                q, a = _fact_turn(*items[int(j)], rng)
                msgs += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
            answers[held].append(items[int(order[i + n - 1])][2])
            i += n
            dialogues[held].append(msgs)
            kinds[held].append("facts")
    split = {}
    for held in (False, True):
        perm = rng.permutation(len(dialogues[held]))
        split[held] = tuple([x[held][int(p)] for p in perm] for x in (dialogues, kinds, answers))
    return ChatCorpus(split[False][0], split[True][0], split[False][1], split[True][1], split[False][2],
                      split[True][2])


def plain_texts() -> list[str]:
    """The training split's Python paragraphs as raw text (BT(P)'s "pretraining" stand-in; no chat template)."""
    from interplab.data.corpus import load_corpus

    return list(load_corpus(("pydoc",)).train)
