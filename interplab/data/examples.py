"""Prompt/answer examples, their encoding (raw or chat format) and seeded batch mixtures.

Every synthetic generator (CtxMem, multitask decode, concepts) returns `Example`s. An example is stored as words
(the toy tokenizer is word-level): an optional instruction (`system`), the `user` words and the `response` words.

- **raw format** (toy-base): `<bos> system.. user.. | response.. <eos>`; the prompt is `system + user`.
- **chat format** (toy-chat): exactly `tokenizer.apply_chat_template(example.messages())`, i.e.
  `<|im_start|> system .. <|im_end|> <|im_start|> user .. <|im_end|> <|im_start|> assistant | response.. <|im_end|>`
  (the system turn only when `system` is non-empty; the template adds no <bos>).

`|` marks the prompt/answer boundary: loss masks and exact match cover the answer tokens only (response + stop token).
Metadata positions (`meta["pos"]`) index the *raw prompt words* (`example.prompt_words`); `Encoded.word_pos` maps
them to token indices of either format.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from interplab.data.chat import IM_END, IM_START
from interplab.data.tokenizers import BOS, EOS, PAD

FORMATS = ("raw", "chat")


@dataclass(frozen=True)
class Example:
    """One synthetic prompt/answer pair.

    task: task name (e.g. "ctxmem_gen", "ctxmem_ver", "copy", "mc", "concept_with", "concept_no").
    system: instruction words (raw: prefix of the prompt; chat: the system turn). May be empty.
    user: the remaining prompt words (raw: rest of the prompt; chat: the user turn).
    response: answer words without the stop token.
    meta: task metadata for probes (see each generator's docstring); positions index `prompt_words`.
    """

    task: str
    system: tuple[str, ...]
    user: tuple[str, ...]
    response: tuple[str, ...]
    meta: Mapping[str, Any] = field(default_factory=dict)

    @property
    def prompt_words(self) -> tuple[str, ...]:
        return self.system + self.user

    @property
    def prompt(self) -> str:
        """Raw-format prompt text (no <bos>; the tokenizer adds it)."""
        return " ".join(self.prompt_words)

    @property
    def answer(self) -> str:
        """Raw-format answer text, ending with <eos>."""
        return " ".join((*self.response, EOS))

    def messages(self, with_response: bool = True) -> list[dict]:
        """Chat messages (system turn only when there is an instruction)."""
        msgs = []
        if self.system:
            msgs.append({"role": "system", "content": " ".join(self.system)})
        msgs.append({"role": "user", "content": " ".join(self.user)})
        if with_response:
            msgs.append({"role": "assistant", "content": " ".join(self.response)})
        return msgs

    def text(self, fmt: str = "raw") -> str:
        """The full training text of this example in `fmt`."""
        if fmt == "raw":
            return f"{self.prompt} {self.answer}"
        from interplab.data.chat import render_chat

        return render_chat(self.messages())

    def prompt_text(self, fmt: str = "raw") -> str:
        """The prompt only (chat: with the generation prompt `<|im_start|> assistant`)."""
        if fmt == "raw":
            return self.prompt
        from interplab.data.chat import render_chat

        return render_chat(self.messages(with_response=False), add_generation_prompt=True)


@dataclass(frozen=True)
class Encoded:
    """Token ids of one example. ids[:prompt_len] is the prompt, ids[prompt_len:] the answer (incl. stop token).
    word_pos[i] is the token index of raw prompt word i (same for both formats' content words)."""

    ids: tuple[int, ...]
    prompt_len: int
    word_pos: tuple[int, ...]


def encode(example: Example, vocab: Mapping[str, int], fmt: str = "raw", bos: bool = True) -> Encoded:
    """Encode `example` without a tokenizer call (word-level vocab lookup).

    Equal to `tokenizer(example.text("raw")).input_ids` for raw and to `tokenizer.apply_chat_template(
    example.messages())["input_ids"]` for chat (both checked in tests/data). `bos` applies to the raw format only.
    """
    from interplab.core.errors import InputError

    if fmt not in FORMATS:
        raise InputError(f"format {fmt!r} must be one of {FORMATS}")
    try:
        if fmt == "raw":
            head = [vocab[BOS]] if bos else []
            prompt = head + [vocab[w] for w in example.prompt_words]
            word_pos = tuple(range(len(head), len(prompt)))
            answer = [vocab[w] for w in example.response] + [vocab[EOS]]
        else:
            s, e = vocab[IM_START], vocab[IM_END]
            prompt: list[int] = []
            pos: list[int] = []
            if example.system:
                prompt += [s, vocab["system"]]
                pos += range(len(prompt), len(prompt) + len(example.system))
                prompt += [vocab[w] for w in example.system] + [e]
            prompt += [s, vocab["user"]]
            pos += range(len(prompt), len(prompt) + len(example.user))
            prompt += [vocab[w] for w in example.user] + [e]
            prompt += [s, vocab["assistant"]]
            word_pos = tuple(pos)
            answer = [vocab[w] for w in example.response] + [e]
    except KeyError as err:
        raise InputError(f"word {err.args[0]!r} of a {example.task} example is not in the vocabulary") from None
    return Encoded(tuple(prompt + answer), len(prompt), word_pos)


def heldout_bucket(example: Example, n_buckets: int = 10) -> int:
    """Stable bucket of an example's prompt (crc32). Bucket 0 is held out from training by `TaskMixture`."""
    key = f"{example.task}|{example.prompt}".encode()
    return zlib.crc32(key) % n_buckets


def is_heldout(example: Example) -> bool:
    return heldout_bucket(example) == 0


# A generator is any callable (rng: np.random.Generator) -> Example.
ExampleFn = Callable[[np.random.Generator], Example]


def sample_examples(fn: ExampleFn, n: int, seed: int, split: str = "test") -> list[Example]:
    """n examples from `fn`, restricted to the held-out split ("test": bucket 0), the training split ("train") or
    anything ("all"). Deterministic in `seed`."""
    from interplab.core.errors import InputError

    if split not in ("test", "train", "all"):
        raise InputError(f"split {split!r} must be 'test', 'train' or 'all'")
    rng = np.random.default_rng(seed)
    out: list[Example] = []
    tries = 0
    while len(out) < n:
        ex = fn(rng)
        tries += 1
        if split == "all" or is_heldout(ex) == (split == "test"):
            out.append(ex)
        if tries > 200 * n + 1000:
            raise InputError(f"could not draw {n} {split} examples (space too small?)")
    return out


def collate(encoded: Sequence[Encoded], pad_id: int, pad_to: int | None = None) -> dict:
    """Right-pad a list of encodings into a training batch.

    Returns input_ids [B,T] long, attention_mask [B,T] long, loss_mask [B,T] bool where loss_mask[b,t] is True when
    token t is an answer token (it is predicted from position t-1), and prompt_len [B].
    """
    import torch

    T = max(len(e.ids) for e in encoded)
    if pad_to is not None:
        T = max(T, pad_to)
    B = len(encoded)
    ids = np.full((B, T), pad_id, dtype=np.int64)
    att = np.zeros((B, T), dtype=np.int64)
    lm = np.zeros((B, T), dtype=bool)
    for b, e in enumerate(encoded):
        n = len(e.ids)
        ids[b, :n] = e.ids
        att[b, :n] = 1
        lm[b, e.prompt_len:n] = True
    return {
        "input_ids": torch.from_numpy(ids),
        "attention_mask": torch.from_numpy(att),
        "loss_mask": torch.from_numpy(lm),
        "prompt_len": torch.tensor([e.prompt_len for e in encoded]),
    }


class TaskMixture:
    """A seeded, resumable batch source over weighted example generators: `mixture(step) -> batch`.

    The batch for step s depends only on (seed, s), so a resumed run sees exactly the batches it would have seen.
    Examples in the held-out bucket (`is_heldout`) are never trained on.

    Args:
        tasks: {task name: (generator fn, weight)}.
        vocab: word -> id.
        fmt: "raw" or "chat", or a dict {task name: fmt} / "mixed" (each example raw or chat with p=0.5).
        batch_size: examples per batch.
        seed: base seed.
        pad_id: the padding id (default vocab["<pad>"]).
    """

    def __init__(self, tasks: Mapping[str, tuple[ExampleFn, float]], vocab: Mapping[str, int], fmt="raw",
                 batch_size: int = 128, seed: int = 0, pad_id: int | None = None):
        from interplab.core.errors import ConfigError

        if not tasks:
            raise ConfigError("TaskMixture needs at least one task")
        self.names = list(tasks)
        self.fns = [tasks[n][0] for n in self.names]
        w = np.asarray([float(tasks[n][1]) for n in self.names])
        if (w < 0).any() or w.sum() <= 0:
            raise ConfigError(f"task weights {dict(zip(self.names, w))} must be >= 0 with a positive sum")
        self.weights = w / w.sum()
        self.vocab = vocab
        self.fmt = fmt
        self.batch_size = int(batch_size)
        self.seed = int(seed)
        self.pad_id = vocab[PAD] if pad_id is None else pad_id

    def _fmt_for(self, name: str, rng: np.random.Generator) -> str:
        if isinstance(self.fmt, Mapping):
            return self.fmt[name]
        if self.fmt == "mixed":
            return "chat" if rng.random() < 0.5 else "raw"
        return self.fmt

    def examples(self, step: int) -> list[tuple[Example, str]]:
        rng = np.random.default_rng([self.seed, int(step)])
        which = rng.choice(len(self.names), size=self.batch_size, p=self.weights)
        out = []
        for i in which:
            while True:
                ex = self.fns[i](rng)
                if not is_heldout(ex):
                    break
            out.append((ex, self._fmt_for(self.names[i], rng)))
        return out

    def __call__(self, step: int) -> dict:
        encs = [encode(ex, self.vocab, fmt) for ex, fmt in self.examples(step)]
        return collate(encs, self.pad_id)


def iter_batches(source: Callable[[int], dict], start: int = 0) -> Iterable[dict]:
    """Turn a step-indexed batch source into an endless iterator starting at `start`."""
    step = start
    while True:
        yield source(step)
        step += 1
