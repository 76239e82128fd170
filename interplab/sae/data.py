"""Samples for SAE training and evaluation on a model. For the toy organisms: dialogues are the toy task generators'
examples (interplab/data) rendered with the chat template (`Example.messages()`); BT(P)'s "pretraining text" is the
same task family in the raw, untemplated format (`Example.text("raw")`), the toy analogue of the Pile. Train and
evaluation samples come from disjoint splits (the crc32 held-out bucket). Models without the toy vocabulary get
random-word dialogues. For a real chat model, `data="offline-chat"` gives the built-in dialogues of
`interplab.data.chat_corpus` (Python reference paragraphs and public facts; BT(P) gets raw Python reference text)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["SAEData", "sae_data", "toy_dialogues", "generic_dialogues", "user_sae_data", "offline_chat_data",
           "load_sae_data", "OFFLINE_CHAT"]

# the built-in chat set for real chat models (`interplab.data.chat_corpus`), chosen with data="offline-chat"
OFFLINE_CHAT = "offline-chat"


@dataclass
class SAEData:
    """train / eval: dialogues (lists of {"role", "content"} messages) for FAST and BT(F) training and held-out
    evaluation; texts: plain texts for BT(P); eval_examples: the toy Examples behind `eval` (None for generic data),
    whose known answers score steering by exact match; source: what the samples are (recorded in each SAE's
    metadata as its dataset_path); eval_answers: for the offline chat set, the public-fact answer of each held-out
    dialogue's last question (None where there is none), which a steered reply should still contain."""

    train: list
    eval: list
    texts: list[str]
    eval_examples: list | None = None
    source: str = "interplab toy tasks"
    eval_answers: list | None = None


def toy_dialogues(n: int, seed: int = 0, split: str = "train", tasks: dict | None = None) -> list:
    """n toy-task examples (weighted like the toy organisms' mixture), deterministic in seed."""
    import numpy as np

    from interplab.data.examples import sample_examples
    from interplab.data.toy_tasks import toy_task_fns
    from interplab.zoo.recipes.toy import TOY_WEIGHTS

    w = dict(tasks or TOY_WEIGHTS)
    fns = toy_task_fns()
    names = sorted(w)
    p = np.array([w[t] for t in names], dtype=float)
    p /= p.sum()
    counts = np.random.default_rng(seed).multinomial(n, p)
    exs = []
    for i, (t, c) in enumerate(zip(names, counts)):
        if c:
            exs += sample_examples(fns[t], int(c), seed * 1000 + i, split=split)
    order = np.random.default_rng(seed + 1).permutation(len(exs))
    return [exs[i] for i in order]


def generic_dialogues(model: Any, n: int, seed: int = 0) -> list:
    """Fallback dialogues for models without toy vocabulary: random words from the tokenizer's vocabulary."""
    import random

    tok = model.tokenizer
    special = set(getattr(tok, "all_special_tokens", []) or [])
    words = [w for w in tok.get_vocab() if w not in special and w.isalnum()][:200] or ["a", "b"]
    rng = random.Random(seed)
    say = lambda: " ".join(rng.choice(words) for _ in range(rng.randint(3, 10)))
    return [[{"role": "user", "content": say()}, {"role": "assistant", "content": say()}] for _ in range(n)]


def sae_data(model: Any, n_train: int, n_eval: int, n_text: int, seed: int = 0) -> SAEData:
    """Toy dialogues and raw texts when the model knows the toy vocabulary, generic random-word dialogues else."""
    try:
        from interplab.data.toy_vocab import toy_vocab

        vocab = toy_vocab()
        if all(w in model.tokenizer.get_vocab() for w in list(vocab)[:50]):
            tr = toy_dialogues(n_train, seed, "train")
            ev = toy_dialogues(n_eval, seed + 7, "test")
            tx = toy_dialogues(n_text, seed + 13, "train")
            return SAEData([e.messages() for e in tr], [e.messages() for e in ev], [e.text("raw") for e in tx], ev)
    except Exception:  # noqa: BLE001 - fall back to generic data for non-toy models
        pass
    tr = generic_dialogues(model, n_train, seed)
    ev = generic_dialogues(model, n_eval, seed + 7)
    tx = [" ".join(m["content"] for m in d) for d in generic_dialogues(model, n_text, seed + 13)]
    return SAEData(tr, ev, tx, None, source="random vocabulary words")


def user_sae_data(path, n_train: int, n_eval: int, n_text: int, seed: int = 0) -> SAEData:
    """SAEData from a user chat file (`messages` JSONL, or `user`/`assistant` CSV columns; docs/data.md).

    Rows with split 'train' / 'test' go to training / evaluation; rows without a split are shuffled (seed) and the
    first n_train train, the next n_eval evaluate. BT(P)'s plain texts are the first n_text training dialogues'
    contents joined by newlines (the same data without the chat template)."""
    import random

    from interplab.core.errors import InputError
    from interplab.data.user import user_records

    rows = list(user_records("sae", path))
    train = [r["messages"] for r in rows if r["split"] == "train"]
    ev = [r["messages"] for r in rows if r["split"] == "test"]
    rest = [r["messages"] for r in rows if r["split"] not in ("train", "test")]
    random.Random(seed).shuffle(rest)
    need = max(0, n_train - len(train))
    train += rest[:need]
    ev += rest[need:need + max(0, n_eval - len(ev))]
    if not train or not ev:
        raise InputError(f"{path}: need training and evaluation dialogues (got {len(train)} / {len(ev)}); add rows "
                         "or set split=train/test")
    texts = ["\n".join(m["content"] for m in d) for d in train[:n_text]]
    return SAEData(train[:n_train], ev[:n_eval], texts, None, source=str(path))


def offline_chat_data(n_train: int, n_eval: int, n_text: int, seed: int = 0) -> SAEData:
    """The built-in chat set (`interplab.data.chat_corpus`; no model output): the first n_train training and n_eval
    held-out dialogues of its seed-`seed` shuffle, and n_text raw Python reference paragraphs (the training split,
    shuffled with `seed`) for BT(P)."""
    import random

    from interplab.core.errors import ConfigError
    from interplab.data.chat_corpus import chat_corpus, plain_texts

    c = chat_corpus(seed)
    texts = plain_texts()
    random.Random(seed).shuffle(texts)
    over = [f"{name}={n} (it has {have})" for name, n, have in (("n_train", n_train, len(c.train)),
                                                                   ("n_eval", n_eval, len(c.eval)),
                                                                   ("n_text", n_text, len(texts))) if n > have]
    if over or min(n_train, n_eval, n_text) < 1:
        raise ConfigError(f"the offline chat set is too small for {', '.join(over) or 'a count below 1'}; "
                          "lower the count(s) or pass a chat file of your own as data=PATH")
    return SAEData(c.train[:n_train], c.eval[:n_eval], texts[:n_text], None,
                   source="interplab offline chat (Python reference + public facts)", eval_answers=c.answers_eval[:n_eval])


def load_sae_data(model, data: str, n_train: int, n_eval: int, n_text: int, seed: int = 0) -> SAEData:
    """The SAE experiments' data setting: "" = the toy dialogues (`sae_data`), "offline-chat" = the built-in chat
    set (`offline_chat_data`), anything else = a chat file of your own (`user_sae_data`)."""
    if data == OFFLINE_CHAT:
        return offline_chat_data(n_train, n_eval, n_text, seed)
    if data:
        return user_sae_data(data, n_train, n_eval, n_text, seed)
    return sae_data(model, n_train, n_eval, n_text, seed)
