"""Multitask decode (methods/decodeshare.md §7): five tasks that answer in one shared output alphabet + EOS, so a
shared decode channel (remaining length / EOS counter, symbol readout) exists.

Raw format, symbols s0..s15 (V = 16), n in [n_min, n_max] = [3, 8]::

    copy x1..xn sep   ->  x1..xn <eos>
    rev  x1..xn sep   ->  xn..x1 <eos>
    sort x1..xn sep   ->  sorted(x) <eos>
    inc  x1..xn sep   ->  (x1+1 mod 16)..(xn+1 mod 16) <eos>
    mc   x1..xn A o1 B o2 C o3 D o4 sep  ->  ans L <eos>     (L is the option equal to max(x))

In chat format the task word is the system turn ("the system turn sets a mode", methods/fast_sae.md §7) and the
rest is the user turn.

Metadata: task, n (input length), x (input symbols), y (answer words without <eos>), and for mc: options, correct
(letter), max_symbol; pos: {"task": 0, "inputs": [indices of x], "sep": index of `sep`, "last": last prompt word}.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from interplab.data import toy_vocab as tv
from interplab.data.examples import Example, sample_examples

TASKS = tv.TASKS


@dataclass(frozen=True)
class MultitaskConfig:
    """n_min, n_max: input length range (inclusive); n_symbols: alphabet size V (<= 16)."""

    n_min: int = 3
    n_max: int = 8
    n_symbols: int = tv.N_SYMBOLS


class Multitask:
    """Seeded generator: `Multitask().example(task, rng)`, `.fn(task)` (an rng -> Example callable), `.sample()`."""

    def __init__(self, config: MultitaskConfig | None = None):
        self.config = config or MultitaskConfig()
        from interplab.core.errors import ConfigError

        if not 1 <= self.config.n_symbols <= tv.N_SYMBOLS:
            raise ConfigError(f"n_symbols must be in 1..{tv.N_SYMBOLS}")

    def fn(self, task: str):
        from interplab.core.errors import InputError

        if task not in TASKS:
            raise InputError(f"unknown multitask task {task!r}; known: {TASKS}")
        return lambda rng: self.example(task, rng)

    def example(self, task: str, rng: np.random.Generator) -> Example:
        c = self.config
        V = c.n_symbols
        n = int(rng.integers(c.n_min, c.n_max + 1))
        x = [int(i) for i in rng.integers(V, size=n)]
        sym = tv.SYMBOLS
        meta: dict = {"task": task, "n": n, "x": [sym[i] for i in x]}
        user = [sym[i] for i in x]
        if task == "copy":
            y = [sym[i] for i in x]
        elif task == "rev":
            y = [sym[i] for i in reversed(x)]
        elif task == "sort":
            y = [sym[i] for i in sorted(x)]
        elif task == "inc":
            y = [sym[(i + 1) % V] for i in x]
        elif task == "mc":
            mx = max(x)
            distract = [i for i in rng.permutation(V) if i != mx][:3]
            opts = [mx, *distract]
            order = rng.permutation(4)
            opts = [int(opts[i]) for i in order]
            correct = tv.LETTERS[opts.index(mx)]
            for L, o in zip(tv.LETTERS, opts):
                user += [L, sym[o]]
            y = [tv.ANS, correct]
            meta.update(options=[sym[o] for o in opts], correct=correct, max_symbol=sym[mx])
        else:  # pragma: no cover - fn() validates
            raise AssertionError(task)
        user.append(tv.SEP)
        meta["y"] = list(y)
        meta["pos"] = {"task": 0, "inputs": list(range(1, 1 + n)), "sep": len(user), "last": len(user)}
        return Example(task, (task,), tuple(user), tuple(y), meta)

    def sample(self, task: str, n: int, seed: int = 0, split: str = "test") -> list[Example]:
        """n examples of one task; split "test" = the held-out bucket (never trained on)."""
        return sample_examples(self.fn(task), n, seed, split)
