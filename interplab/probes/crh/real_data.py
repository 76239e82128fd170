"""CRH concept data from real text (crh.md §2.1): a user's pair file, or the paper's 100 concepts elicited from a
chat model on AlpacaEval-style questions.

* `user_concept_data(records)`: rows {concept, question, resp_no_concept, resp_with_concept, concept_words?} (the
  repo's pair-CSV columns) -> one `ConceptData` per concept, texts `"User: {q}\\nAssistant: {r}"` (no chat
  template), steering prompts `"User: {q}\\nAssistant: "`; for a model trained on chats (toy-chat) its chat
  template instead (the one prompt path of issue 15).
* `paper_concept_data(model, concepts, questions)`: for each concept of `interplab.data.adapters.crh_concepts`
  (`concepts=paper`), the model answers each question without and with the concept's `instruction` as the system
  turn (its own chat template, greedy); the responses go into the same pair texts. The repo filtered its pairs with
  an LLM (not published); interplab keeps every pair and says so.

The judge of steered generations is `TokenSetJudge(words)`: words = the `concept_words` column (`|`- or
`,`-separated), else the concept name's words of 4+ letters (a keyword proxy for the paper's LLM judge).
"""
from __future__ import annotations

import re
from typing import Iterable, Sequence

import numpy as np

from interplab.core.errors import DataError, InputError
from interplab.probes.crh.toy import ConceptData

__all__ = ["concept_words", "user_concept_data", "paper_concept_data", "real_spiral_prompts", "REAL_SPIRAL_QUESTION"]

#: the default question of `real_spiral_prompts` and its answer, the start of the assistant reply
REAL_SPIRAL_QUESTION = ("What is the capital of France?", "The capital of France is Paris.")


def concept_words(name: str, given=None) -> tuple[str, ...]:
    """The judge's token set of a concept: `given` (a list or a `|`/`,`-separated string), else the name's words
    of at least 4 letters."""
    if given:
        items = given if isinstance(given, (list, tuple)) else re.split(r"[|,]", str(given))
        words = tuple(w.strip() for w in items if w.strip())
        if words:
            return words
    return tuple(dict.fromkeys(w for w in re.findall(r"[A-Za-z][A-Za-z+#/]{3,}", str(name).lower())))


def _split(n: int, n_test: int, seed: int) -> tuple[list[int], list[int]]:
    if n < n_test + 2:
        raise InputError(f"a concept needs at least n_test + 2 = {n_test + 2} pairs (2 for the axis), got {n}")
    order = np.random.default_rng(seed).permutation(n)
    return sorted(order[n_test:].tolist()), sorted(order[:n_test].tolist())


def user_concept_data(records: Iterable[dict], *, n_test: int = 5, seed: int = 0,
                      max_train: int | None = None, model=None) -> list[ConceptData]:
    """ConceptData per concept of a pair file (rows in the repo's pair schema; `concept_words` optional).
    n_test pairs per concept (seeded) are the steered test samples, the rest (at most max_train) the axis/cylinder
    train set. Texts are the repo's "User: q\nAssistant: r" strings, except for a `model` trained on chats
    (`model.chat_default`: zoo:toy-chat, an instruct real model), whose one prompt path is its chat template: the
    pair is the templated (user q, assistant r) conversation and the steering prompt the templated user turn with
    the generation prompt (token ids)."""
    pair_text, steer_prompt = _formats(model)

    by: dict[str, list[dict]] = {}
    for i, r in enumerate(records):
        for k in ("concept", "question", "resp_no_concept", "resp_with_concept"):
            if k not in r:
                raise DataError(f"CRH pair row {i} is missing column {k!r}")
        by.setdefault(str(r["concept"]), []).append(r)
    if not by:
        raise InputError("the CRH pair file has no rows")
    out = []
    for ci, (name, rows) in enumerate(by.items()):
        train, test = _split(len(rows), n_test, seed + ci)
        train = train[:max_train] if max_train else train
        pairs = lambda idx: [(pair_text(rows[i]["question"], rows[i]["resp_no_concept"]),
                              pair_text(rows[i]["question"], rows[i]["resp_with_concept"])) for i in idx]
        build = rows[0].get("build_words")
        out.append(ConceptData(name=name, words=concept_words(name, rows[0].get("concept_words")),
                               train_pairs=pairs(train), test_pairs=pairs(test),
                               test_prompts=[steer_prompt(rows[i]["question"]) for i in test],
                               build_words=concept_words(name, build) if build else ()))
    return out


def _formats(model):
    """(pair_text(q, r), steer_prompt(q)) for `model`: its chat template when it was trained on chats, else the
    repo's plain "User: q\nAssistant: r" format (which base and hub chat models read as the paper does)."""
    from interplab.data.adapters import crh_concepts

    if model is None or not getattr(model, "chat_default", False):
        return crh_concepts.pair_text, crh_concepts.steer_prompt

    def pair_text(q, r):
        return model.apply_chat_template([{"role": "user", "content": q}, {"role": "assistant", "content": r}],
                                         add_generation_prompt=False)
    def steer_prompt(q):   # token ids: the steering runs generate with chat=False, so a string would stay raw text
        return model.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True)
    return pair_text, steer_prompt


def _replies(model, chats: list[list[dict]], max_new_tokens: int, batch_size: int) -> list[str]:
    out = []
    for s in range(0, len(chats), batch_size):
        ids = [model.apply_chat_template(c, add_generation_prompt=True) for c in chats[s:s + batch_size]]
        gen = model.generate(ids, max_new_tokens=max_new_tokens, return_logits=False)
        out += [model.tokenizer.decode(t, skip_special_tokens=True).strip() for t in gen.new_tokens]
    return out


def paper_concept_data(model, concepts: Sequence[dict], questions: Sequence[str], *, n_test: int = 5,
                       seed: int = 0, max_new_tokens: int = 32, batch_size: int = 16) -> list[ConceptData]:
    """ConceptData for the paper's concepts (`paper_concepts()` rows) from the model's own greedy answers to each
    question without / with the concept's instruction as the system turn (chat template required)."""
    if getattr(model.tokenizer, "chat_template", None) is None:
        raise InputError(f"{model.name} has no chat template: `concepts=paper` elicits concepts with a system "
                         "instruction; use a chat model or pass your own pair file (data=...)")
    qs = [str(q) for q in questions]
    if len(qs) < n_test + 2:
        raise InputError(f"need at least n_test + 2 = {n_test + 2} questions, got {len(qs)}")
    plain = _replies(model, [[{"role": "user", "content": q}] for q in qs], max_new_tokens, batch_size)
    rows = []
    for c in concepts:
        sys = {"role": "system", "content": c["instruction"]}
        withc = _replies(model, [[sys, {"role": "user", "content": q}] for q in qs], max_new_tokens, batch_size)
        rows += [{"concept": c["output_concept"], "question": q, "resp_no_concept": a, "resp_with_concept": b}
                 for q, a, b in zip(qs, plain, withc)]
    return user_concept_data(rows, n_test=n_test, seed=seed, model=model)


def _one_token_word(tok, concept) -> tuple[str, int]:
    """The concept's first lexicon word that this tokenizer reads as one token after a space."""
    for w in concept.words:
        ids = tok.encode(" " + w, add_special_tokens=False)
        if len(ids) == 1:
            return w, int(ids[0])
    raise InputError(f"no word of concept {concept.key!r} ({', '.join(concept.words)}) is one token for this "
                     "tokenizer; the spiral probe needs prompts that differ in exactly one token — pick another "
                     "concept")


def real_spiral_prompts(model, concept_ori, concept_tgt, question: str = "") -> tuple[list[int], list[int]]:
    """Spiral-probe prompts (crh.md §2.4) on a real chat model for two offline concepts (lexicon keys or paper ids,
    `interplab.data.concept_pairs`): the templated user question, then the start of the assistant's reply — the
    answer and the aside of the offline pairs, "… As an aside, this brings to mind" — ending in one word of each
    concept (its first lexicon word that is a single token). Token ids of equal length, differing in that last
    token. `question` empty = `REAL_SPIRAL_QUESTION` (with its answer); another question gets no answer sentence."""
    from interplab.data.concept_pairs import resolve_concepts

    ori, tgt = resolve_concepts([concept_ori, concept_tgt])
    if ori.key == tgt.key:
        raise InputError("concept_ori and concept_tgt must differ")
    if getattr(model.tokenizer, "chat_template", None) is None:
        raise InputError(f"{model.name} has no chat template; real_spiral_prompts builds a chat (user question, "
                         "assistant reply); use toy concepts (toy_spiral_prompts) on a raw-text model")
    q, a = REAL_SPIRAL_QUESTION if not question else (question, "")
    tok = model.tokenizer
    head = model.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True)
    head = list(head) + tok.encode(f"{a} As an aside, this brings to mind".strip(), add_special_tokens=False)
    return tuple(head + [_one_token_word(tok, c)[1]] for c in (ori, tgt))
