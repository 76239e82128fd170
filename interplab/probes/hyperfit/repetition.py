"""Diversity and repetition metrics of generated text (spec methods/hyperfit_geometry.md §2.5).

Every metric takes sequences of hashable units: token ids (token level) or words (word level: the decoded text split on
whitespace). Definitions:

* TTR            |unique units| / |units| over the first `window` (default 96) units of one generation (Carlsson et al.).
* rep-n          1 - |unique n-grams| / |n-grams| within one generation (0 = no repeated n-gram).
* diversity      prod_{n=2..4} (1 - rep-n)  (SimCTG).
* distinct-n     |unique n-grams| / |n-grams| pooled over a set of generations (one generation: 1 - rep-n).
* Self-BLEU-4    mean over generations of BLEU-4 (nltk, uniform weights, smoothing method1) of each generation against
                 all the others as references; 1 = all identical.
* loop rate      fraction of generations whose last `loop_window` units are periodic with a period <= `max_period`
                 (x[i] == x[i + p] for every i in that tail): a generation that ended in a verbatim loop.

Sequence-level metrics are averaged over generations by `generation_metrics` / `metrics_table`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Sequence

import numpy as np

from interplab.core.errors import ConfigError, InputError
from interplab.core.nan import finite_mean

__all__ = [
    "ttr", "rep_n", "diversity", "distinct_n", "self_bleu", "is_loop", "loop_rate", "generation_metrics",
    "GenerationMetricsConfig", "metrics_table", "words",
]


def _check_seq(seq) -> list:
    if isinstance(seq, str):
        raise InputError("pass a sequence of units (token ids or words), not a raw string; use words(text) for the "
                         "word level")
    if hasattr(seq, "tolist"):
        seq = seq.tolist()
    return list(seq)


def words(text: str) -> list[str]:
    """Word-level units of a decoded generation: whitespace split."""
    return text.split()


def ttr(seq: Sequence[Hashable], window: int | None = 96) -> float:
    """Type-token ratio over the first `window` units (all units when window is None). Empty -> nan."""
    seq = _check_seq(seq)
    if window is not None:
        seq = seq[:window]
    return len(set(seq)) / len(seq) if seq else float("nan")


def _ngrams(seq: list, n: int) -> list[tuple]:
    return [tuple(seq[i:i + n]) for i in range(len(seq) - n + 1)]


def rep_n(seq: Sequence[Hashable], n: int = 2) -> float:
    """1 - |unique n-grams| / |n-grams| within one sequence; nan when it has no n-gram."""
    if n < 1:
        raise ConfigError(f"n must be >= 1, got {n}")
    grams = _ngrams(_check_seq(seq), n)
    return 1.0 - len(set(grams)) / len(grams) if grams else float("nan")


def diversity(seq: Sequence[Hashable], ns: Sequence[int] = (2, 3, 4)) -> float:
    """prod_n (1 - rep-n) over ns (SimCTG's diversity)."""
    return float(np.prod([1.0 - rep_n(seq, n) for n in ns]))


def distinct_n(seqs, n: int = 2) -> float:
    """Unique n-grams / n-grams pooled over generations. A single flat sequence is accepted too."""
    seqs = _as_seq_list(seqs)
    grams = [g for s in seqs for g in _ngrams(_check_seq(s), n)]
    return len(set(grams)) / len(grams) if grams else float("nan")


def _as_seq_list(seqs) -> list:
    if isinstance(seqs, str):
        raise InputError("pass sequences of units, not a raw string")
    seqs = list(seqs)
    if seqs and not isinstance(seqs[0], (list, tuple, np.ndarray)) and not hasattr(seqs[0], "tolist"):
        return [seqs]  # one flat sequence
    if seqs and hasattr(seqs[0], "ndim") and getattr(seqs[0], "ndim") == 0:
        return [seqs]
    return seqs


def self_bleu(seqs, max_n: int = 4) -> float:
    """Self-BLEU-max_n (nltk): mean BLEU of each generation against all the others. Needs >= 2 generations."""
    from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

    seqs = [[str(u) for u in _check_seq(s)] for s in _as_seq_list(seqs)]
    if len(seqs) < 2:
        raise InputError("Self-BLEU needs at least 2 generations")
    weights = tuple([1.0 / max_n] * max_n)
    smooth = SmoothingFunction().method1
    scores = []
    for i, hyp in enumerate(seqs):
        if not hyp:
            continue
        refs = [s for j, s in enumerate(seqs) if j != i and s]
        if not refs:
            continue
        scores.append(sentence_bleu(refs, hyp, weights=weights, smoothing_function=smooth))
    return float(np.mean(scores)) if scores else float("nan")


def is_loop(seq: Sequence[Hashable], loop_window: int = 32, max_period: int = 16) -> bool:
    """True when the last `loop_window` units repeat with some period p <= max_period (p < loop_window)."""
    seq = _check_seq(seq)
    if len(seq) < loop_window:
        return False
    tail = seq[-loop_window:]
    for p in range(1, min(max_period, loop_window - 1) + 1):
        if all(tail[i] == tail[i + p] for i in range(loop_window - p)):
            return True
    return False


def loop_rate(seqs, loop_window: int = 32, max_period: int = 16) -> float:
    seqs = _as_seq_list(seqs)
    return float(np.mean([is_loop(s, loop_window, max_period) for s in seqs])) if seqs else float("nan")


@dataclass
class GenerationMetricsConfig:
    """Fields: window (TTR window, 96 as in Carlsson et al.), ns (n-gram orders for rep-n/distinct-n), bleu_n
    (Self-BLEU order), loop_window / max_period (loop detector), self_bleu_max (Self-BLEU uses at most this many
    generations: it is quadratic)."""

    window: int = 96
    ns: tuple[int, ...] = (2, 3, 4)
    bleu_n: int = 4
    loop_window: int = 32
    max_period: int = 16
    self_bleu_max: int = 200


def _level_metrics(seqs: list[list], cfg: GenerationMetricsConfig, prefix: str) -> dict[str, float]:
    seqs = [s[:cfg.window] for s in seqs]
    out = {f"{prefix}ttr": finite_mean([ttr(s, None) for s in seqs])}
    for n in cfg.ns:
        out[f"{prefix}rep{n}"] = finite_mean([rep_n(s, n) for s in seqs])
        out[f"{prefix}distinct{n}"] = distinct_n(seqs, n)
    out[f"{prefix}diversity"] = finite_mean([diversity(s, cfg.ns) for s in seqs])
    out[f"{prefix}self_bleu{cfg.bleu_n}"] = (self_bleu(seqs[:cfg.self_bleu_max], cfg.bleu_n) if len(seqs) >= 2
                                            else float("nan"))
    out[f"{prefix}loop_rate"] = loop_rate(seqs, cfg.loop_window, cfg.max_period)
    return out


def generation_metrics(token_seqs, texts: Sequence[str] | None = None,
                       config: GenerationMetricsConfig | None = None) -> dict[str, float]:
    """All metrics for one setting: token level from `token_seqs` (lists of ids) and, when `texts` (the decoded
    generations) are given, word level with a "word_" prefix. Sequence-level metrics are means over generations."""
    cfg = config or GenerationMetricsConfig()
    token_seqs = [_check_seq(s) for s in _as_seq_list(token_seqs)]
    if not token_seqs:
        raise InputError("no generations given")
    out = _level_metrics(token_seqs, cfg, "")
    out["n_generations"] = len(token_seqs)
    if texts is not None:
        if len(texts) != len(token_seqs):
            raise InputError(f"{len(texts)} texts for {len(token_seqs)} token sequences")
        out.update(_level_metrics([words(t) for t in texts], cfg, "word_"))
    return out


def metrics_table(settings: dict, config: GenerationMetricsConfig | None = None):
    """DataFrame with one row per setting. `settings` maps a name to token_seqs or to (token_seqs, texts)."""
    import pandas as pd

    rows = []
    for name, val in settings.items():
        if isinstance(val, tuple) and len(val) == 2:
            m = generation_metrics(val[0], val[1], config)
        else:
            m = generation_metrics(val, None, config)
        rows.append({"setting": name, **m})
    return pd.DataFrame(rows)
