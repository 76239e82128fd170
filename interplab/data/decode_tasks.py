"""Real-model DecodeShare tasks built offline from public facts (methods/decodeshare.md section 5; issue 27 §2).

Eight question-answer tasks a chat model answers in a short reply, each row with its gold answer from the data
(never from a model's output), forced-choice candidates, and what the reply is parsed with:

| task | question | gold (source) |
|---|---|---|
| capital | What is the capital of France? | Paris (`world_facts`) |
| language | What is the official language of Brazil? | Portuguese (`world_facts`) |
| mc_capital | Which city is the capital of France: Rome, Paris, Lima or Oslo? | Paris (`world_facts`; options seeded) |
| first_letter | What is the first letter of the word 'cat'? | C (`resources/words/nouns.csv`) |
| plural | What is the plural of 'mouse'? | mice (`resources/words/nouns.csv`) |
| antonym | What is the opposite of 'hot'? | cold (`resources/words/antonyms.csv`) |
| yes_no | Is Paris the capital of France? Answer yes or no. | yes/no (half the rows name a wrong capital) |
| addition | What is 3 + 5? Answer with the number only. | 8 (one-digit operands) |

A small chat model answers in a sentence ("The plural of 'mouse' is mice."), so a reply is scored by the candidate
it names first, after skipping echoes of the question's subject (`world_facts.first_named` with the task's whole
answer pool): exact match of the parsed answer, not of the token sequence. The fact tasks keep the facts the model
knows closed-book (`world_facts.load_known`, the shipped per-model filter) when a filter is given; the model's
replies only choose which facts are kept, never a gold answer. Everything is seeded.
"""
from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from typing import Sequence

import numpy as np
import pandas as pd

from interplab.core.errors import ConfigError, InputError

__all__ = ["REAL_TASKS", "DEFAULT_REAL_TASKS", "STEER_PAIRS", "DecodeRow", "load_words", "decode_task_rows",
           "matched_rows"]

REAL_TASKS = ("capital", "language", "mc_capital", "first_letter", "plural", "antonym", "yes_no", "addition")
# the tasks SmolLM2-135M-Instruct answers at >= 60 % (results/decodeshare-tasks-smollm2); yes_no and addition are
# built for the screen and stay out of the default
DEFAULT_REAL_TASKS = ("capital", "language", "mc_capital", "first_letter", "plural", "antonym")
# task pairs that share their subjects (the same noun), so a steering vector between them is a matched-input
# difference of means and its effect on a `from` prompt has a known `to` answer
STEER_PAIRS = {("first_letter", "plural"), ("plural", "first_letter")}
N_CHOICES = 4   # forced choice scores each candidate after the (long, templated) prompt: 4 keeps it affordable


@dataclass(frozen=True)
class DecodeRow:
    """One item. message: the user message (not yet chat-templated); answer: the gold answer text; choices: the
    forced-choice candidates (the answer among them, the same count in a task); pool: the answers the reply
    parser recognises (the task's whole answer vocabulary); echo: the subject a reply may restate (skipped by the
    parser); subject: the item's key (matched_rows pairs tasks by it)."""
    task: str
    message: str
    answer: str
    choices: tuple[str, ...]
    pool: tuple[str, ...]
    echo: str
    subject: str


def load_words(name: str) -> pd.DataFrame:
    """A shipped word list: 'nouns' (noun, plural) or 'antonyms' (word, opposite); see resources/words/SOURCE.md."""
    if name not in ("nouns", "antonyms"):
        raise ConfigError(f"no word list {name!r}; use 'nouns' or 'antonyms'")
    with resources.files("interplab.data").joinpath(f"resources/words/{name}.csv").open("r", encoding="utf-8") as f:
        return pd.read_csv(f, dtype=str, keep_default_na=False)


def _choices(answer: str, pool: Sequence[str], rng, exclude: Sequence[str] = ()) -> tuple[str, ...]:
    others = sorted({p for p in pool if p != answer and p not in exclude})
    pick = rng.choice(others, size=min(N_CHOICES - 1, len(others)), replace=False)
    return tuple(sorted([answer, *map(str, pick)]))


def _fact_rows(task: str, facts: pd.DataFrame, rng) -> list[DecodeRow]:
    from interplab.data.world_facts import question_for

    rel = {"capital": "capital", "language": "language", "mc_capital": "capital", "yes_no": "capital"}[task]
    fr = facts[facts["relation"] == rel]
    pool = tuple(sorted(set(fr["object"])))
    rows = []
    for i, r in enumerate(fr.to_dict("records")):
        s, o = r["subject"], r["object"]
        if task in ("capital", "language"):
            rows.append(DecodeRow(task, question_for(rel, s), o, _choices(o, pool, rng), pool, s, s))
        elif task == "mc_capital":
            opts = list(rng.choice([p for p in pool if p != o], size=3, replace=False))
            opts.insert(int(rng.integers(4)), o)
            msg = f"Which city is the capital of {s}: {opts[0]}, {opts[1]}, {opts[2]} or {opts[3]}?"
            rows.append(DecodeRow(task, msg, o, tuple(sorted(opts)), tuple(sorted(opts)), s, s))
        else:   # yes_no: even rows true, odd rows name another country's capital
            named = o if i % 2 == 0 else str(rng.choice([p for p in pool if p != o]))
            ans = "yes" if named == o else "no"
            rows.append(DecodeRow(task, f"Is {named} the capital of {s}? Answer yes or no.", ans, ("no", "yes"),
                                  ("no", "yes"), "", s))
    return rows


def _word_rows(task: str, rng) -> list[DecodeRow]:
    if task == "antonym":
        w = load_words("antonyms")
        pool = tuple(sorted(set(w["opposite"])))
        return [DecodeRow(task, f"What is the opposite of '{a}'?", b, _choices(b, pool, rng, exclude=(a,)),
                          tuple(p for p in pool if p != a), a, a) for a, b in zip(w["word"], w["opposite"])]
    w = load_words("nouns")
    if task == "plural":
        pool = tuple(sorted(set(w["plural"])))
        # a noun whose plural is itself (sheep) cannot be told from an echo of the question: left out
        return [DecodeRow(task, f"What is the plural of '{n}'?", p, _choices(p, pool, rng, exclude=(n,)),
                          tuple(q for q in pool if q != n), n, n) for n, p in zip(w["noun"], w["plural"]) if p != n]
    letters = tuple("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
    return [DecodeRow(task, f"What is the first letter of the word '{n}'?", n[0].upper(),
                      _choices(n[0].upper(), letters, rng), letters, n, n) for n in w["noun"]]


def _addition_rows(rng, n: int = 120) -> list[DecodeRow]:
    pool = tuple(str(i) for i in range(0, 19))
    rows = []
    for a, b in rng.integers(1, 10, size=(n, 2)):
        s = str(a + b)
        rows.append(DecodeRow("addition", f"What is {a} + {b}? Answer with the number only.", s,
                              _choices(s, pool, rng), pool, f"{a} + {b}", f"{a}+{b}"))
    return rows


def decode_task_rows(tasks: Sequence[str] = DEFAULT_REAL_TASKS, *, known: str | None = "smollm2-135m-instruct",
                     seed: int = 0) -> dict[str, list[DecodeRow]]:
    """{task: rows} in a seeded order (shuffled per task). known: a shipped closed-book filter
    (`world_facts.shipped_known()`) the fact tasks keep to, or None for every fact."""
    from interplab.data.world_facts import load_facts, load_known

    bad = [t for t in tasks if t not in REAL_TASKS]
    if bad:
        raise ConfigError(f"unknown real-model task(s) {bad}; use any of {', '.join(REAL_TASKS)}")
    if len(set(tasks)) != len(tasks):
        raise ConfigError(f"tasks repeat: {list(tasks)}")
    facts = load_facts()
    if known:
        facts = facts[load_known(known, facts).to_numpy()]
    out = {}
    for ti, task in enumerate(tasks):
        rng = np.random.default_rng([seed, ti, REAL_TASKS.index(task)])
        if task in ("capital", "language", "mc_capital", "yes_no"):
            rows = _fact_rows(task, facts, rng)
        elif task == "addition":
            rows = _addition_rows(rng)
        else:
            rows = _word_rows(task, rng)
        order = rng.permutation(len(rows))
        out[task] = [rows[i] for i in order]
    return out


def matched_rows(rows: Sequence[DecodeRow], task: str, seed: int = 0) -> list[tuple[DecodeRow, DecodeRow]]:
    """(row, its subject's `task` row) for each row whose subject `task` has (the steering target: for
    first_letter rows on nouns, the plural rows of the same nouns; a noun without a distinct plural is dropped).
    Raises ConfigError for a pair of tasks that do not share subjects, InputError when none match."""
    src = {r.task for r in rows}
    if any((s, task) not in STEER_PAIRS for s in src):
        raise ConfigError(f"no matched steering pair {sorted(src)} -> {task!r}; matched pairs: "
                          f"{sorted(STEER_PAIRS)}")
    by_subject = {r.subject: r for r in decode_task_rows([task], known=None, seed=seed)[task]}
    pairs = [(r, by_subject[r.subject]) for r in rows if r.subject in by_subject]
    if not pairs:
        raise InputError(f"task {task!r} has no row for any of the {len(rows)} subjects given")
    return pairs
