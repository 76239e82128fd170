"""The multitask-decode data DecodeShare runs on: encoded examples of each task with forced-choice candidates
(`multitask_sets`), and the prompt format an organism was trained with (`resolve_format`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from interplab.core.errors import ConfigError, InputError

__all__ = ["SEQ_TASKS", "ALL_TASKS", "TaskSet", "resolve_format", "multitask_sets"]

SEQ_TASKS = ("copy", "rev", "sort", "inc")
ALL_TASKS = ("copy", "rev", "sort", "inc", "mc")


@dataclass
class TaskSet:
    """Encoded multitask examples of one task.

    prompts: prompt token ids; answers: answer ids without the stop token; stop: the stop-token id;
    fc_cands [n][C]: forced-choice candidates as full answers (ids incl. the stop token); fc_gold [n]: index of the
    gold candidate; fc_equiv [n, C]: candidate equals the gold answer (handles coinciding transforms, e.g. sorted
    inputs); inputs: the input symbol indices; examples: the Example objects."""
    task: str
    prompts: list
    answers: list
    stop: int
    fc_cands: list
    fc_gold: np.ndarray
    fc_equiv: np.ndarray
    inputs: list
    examples: list = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.prompts)


def resolve_format(model_name: str, fmt: str = "auto") -> str:
    """'raw' or 'chat'. auto: the zoo recipe's training format for `zoo:` names, 'chat' when the name contains
    'chat', else 'raw'."""
    if fmt in ("raw", "chat"):
        return fmt
    if fmt != "auto":
        raise ConfigError(f"format must be 'auto', 'raw' or 'chat'; got {fmt!r}")
    name = str(model_name)
    if name.startswith("zoo:"):
        try:
            from interplab.zoo.registry import get_recipe

            return str(get_recipe(name).data.get("format", "raw"))
        except Exception:  # noqa: BLE001 - fall through to the name heuristic
            pass
    return "chat" if "chat" in name.lower() else "raw"


def transform(task: str, x: list[int], V: int) -> list[int]:
    """The answer of sequence task `task` on input symbol indices `x` (alphabet size V)."""
    if task == "copy":
        return list(x)
    if task == "rev":
        return list(reversed(x))
    if task == "sort":
        return sorted(x)
    if task == "inc":
        return [(i + 1) % V for i in x]
    raise InputError(f"no transform for task {task!r}")


def multitask_sets(model, tasks: Sequence[str], n: int, *, seed: int = 0, split: str = "test",
                   fmt: str = "raw") -> dict[str, TaskSet]:
    """n encoded examples per task from `interplab.data.multitask` (split "train" for calibration, "test" for
    evaluation). Sequence tasks get the four transforms (copy/rev/sort/inc of the same input) as forced-choice
    candidates; mc gets `ans A..D`."""
    from interplab.data import toy_vocab as tv
    from interplab.data.examples import encode
    from interplab.data.multitask import Multitask

    vocab = model.tokenizer.get_vocab()
    mt = Multitask()
    V = mt.config.n_symbols
    stop_word = "<eos>" if fmt == "raw" else "<|im_end|>"
    if stop_word not in vocab:
        raise InputError(f"{model.name} has no {stop_word!r} token: it is not a multitask-decode organism")
    stop = vocab[stop_word]
    out = {}
    for ti, task in enumerate(tasks):
        if task not in ALL_TASKS:
            raise ConfigError(f"unknown multitask task {task!r}; use any of {ALL_TASKS}")
        exs = mt.sample(task, n, seed=seed * 1000 + ti, split=split)
        prompts, answers, cands, gold, equiv, inputs = [], [], [], [], [], []
        for ex in exs:
            enc = encode(ex, vocab, fmt)
            prompts.append(list(enc.ids[:enc.prompt_len]))
            ans = [vocab[w] for w in ex.response]
            answers.append(ans)
            x = [int(w[1:]) for w in ex.meta["x"]]
            inputs.append(x)
            if task == "mc":
                cs = [[vocab[tv.ANS], vocab[L], stop] for L in tv.LETTERS]
                g = tv.LETTERS.index(ex.meta["correct"])
            else:
                cs = [[vocab[tv.SYMBOLS[i]] for i in transform(t, x, V)] + [stop] for t in SEQ_TASKS]
                g = SEQ_TASKS.index(task)
            cands.append(cs)
            gold.append(g)
            equiv.append([c == cs[g] for c in cs])
        out[task] = TaskSet(task, prompts, answers, stop, cands, np.asarray(gold), np.asarray(equiv, bool),
                            inputs, exs)
    return out

