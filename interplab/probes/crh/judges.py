"""Judges for CRH steering outputs: `judge(outputs) -> labels` with 1 = normal answer without the concept,
2 = contains / relates to the concept (success), 3 = gibberish.

Any callable `(list[str]) -> array-like of ints in {1, 2, 3}` is a judge. Built-ins:

* `GibberishFilter(mode="fixed"|"faithful")`: the repo's regex pre-filter (`output_labelling/label_gibberish.py`).
  *faithful* reproduces the shipped raw strings, whose doubled escapes (``\\s``, ``\\b``, ``\\w``, ``\\1``) make the
  repetition patterns match literal backslashes (so they never fire) and put whitespace into the 40% "non-word"
  rule (B4). *fixed* uses single escapes and excludes whitespace from that rule; it also counts alphanumeric runs
  as words (so word-level organism tokens such as ``w12`` are not all read as the same word ``w``).
* `TokenSetJudge(concept_words)`: label 3 if the gibberish filter fires, else 2 if any concept word/token occurs,
  else 1 (the organism proxy of the LLM judge).
* `LLMJudge(chat_fn, concept)`: adapter for an OpenAI-compatible chat function (optional; nothing is called
  offline). Label "4" and unparsable answers are invalid and counted (B4), mapped to `invalid_label`.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

import numpy as np

from interplab.core.errors import ConfigError, InputError

NORMAL, CONCEPT, GIBBERISH = 1, 2, 3
LABEL_NAMES = {NORMAL: "normal", CONCEPT: "concept", GIBBERISH: "gibberish"}

# The shipped patterns, verbatim (raw strings with doubled escapes).
FAITHFUL_PATTERNS = {
    "non_word": r"[^A-Za-z0-9\\s]",
    "word": r"[A-Za-z]+",
    "repeat_word": r"(\\b\\w+\\b)(\\s+\\1){3,}",
    "repeat_symbol": r"([\\W_])\\1{6,}",
}
FIXED_PATTERNS = {
    "non_word": r"[^A-Za-z0-9\s]",
    "word": r"[^\W_]+",
    "repeat_word": r"\b(\w+)\b(?:\s+\1\b){3,}",
    "repeat_symbol": r"([\W_])\1{6,}",
}


@dataclass
class GibberishFilter:
    """Regex gibberish detector (the repo's `is_gibberish`).

    mode: 'fixed' (default) or 'faithful' (the shipped doubled-escape patterns, B4).
    min_len_nonword: the 40% non-word rule applies from this many characters (repo: 20).
    nonword_frac: threshold of that rule (repo: 0.4).
    min_words: the diversity rules apply from this many words (repo: 6).
    unique_ratio: flag when distinct/total words ≤ this (repo: 0.25).
    top_freq: flag when the most frequent word's share ≥ this (repo: 0.4).
    empty_is_gibberish: an empty / whitespace-only output is gibberish (repo: True)."""

    mode: str = "fixed"
    min_len_nonword: int = 20
    nonword_frac: float = 0.4
    min_words: int = 6
    unique_ratio: float = 0.25
    top_freq: float = 0.4
    empty_is_gibberish: bool = True
    _re: dict = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self):
        if self.mode not in ("fixed", "faithful"):
            raise ConfigError(f"mode must be 'fixed' or 'faithful', got {self.mode!r}")
        pats = FIXED_PATTERNS if self.mode == "fixed" else FAITHFUL_PATTERNS
        self._re = {k: re.compile(v) for k, v in pats.items()}

    def reasons(self, text: str) -> list[str]:
        """Which rules fire on `text` (empty list = not gibberish)."""
        t = (text or "").strip()
        if not t:
            return ["empty"] if self.empty_is_gibberish else []
        out = []
        non_word = len(self._re["non_word"].findall(t))
        if len(t) >= self.min_len_nonword and non_word / len(t) > self.nonword_frac:
            out.append("non_word_fraction")
        words = self._re["word"].findall(t.lower())
        if len(words) >= self.min_words:
            if len(set(words)) / len(words) <= self.unique_ratio:
                out.append("low_unique_ratio")
            if Counter(words).most_common(1)[0][1] / len(words) >= self.top_freq:
                out.append("dominant_word")
        if self._re["repeat_word"].search(t.lower()):
            out.append("repeated_word")
        if self._re["repeat_symbol"].search(t):
            out.append("repeated_symbol")
        return out

    def is_gibberish(self, text: str) -> bool:
        return bool(self.reasons(text))

    def __call__(self, outputs: Sequence[str]) -> np.ndarray:
        """Bool array: True where the output is gibberish."""
        return np.array([self.is_gibberish(t) for t in _texts(outputs)], dtype=bool)


def _texts(outputs) -> list[str]:
    if isinstance(outputs, str):
        raise InputError("a judge takes a list of outputs, not one string; wrap it in a list")
    out = list(outputs)
    for o in out:
        if not isinstance(o, str):
            raise InputError(f"judge outputs must be strings; got {type(o).__name__}")
    return out


@dataclass
class TokenSetJudge:
    """Organism judge: a concept is a set of words/tokens (e.g. the toy-chat concept's token set).

    concept_words: the concept's surface words (matched as whole whitespace/punctuation-separated tokens,
    case-insensitive unless `case_sensitive`).
    min_hits: label 2 needs at least this many occurrences.
    gibberish: the pre-filter (None disables label 3)."""

    concept_words: Iterable[str]
    min_hits: int = 1
    case_sensitive: bool = False
    gibberish: GibberishFilter | None = field(default_factory=GibberishFilter)

    def __post_init__(self):
        words = [str(w) for w in self.concept_words]
        if not words:
            raise ConfigError("TokenSetJudge needs at least one concept word")
        self._set = frozenset(w if self.case_sensitive else w.lower() for w in words)

    def hits(self, text: str) -> int:
        from interplab.data.scoring import surface_tokens

        toks = surface_tokens(text if self.case_sensitive else text.lower())
        return sum(t in self._set for t in toks)

    def __call__(self, outputs: Sequence[str]) -> np.ndarray:
        texts = _texts(outputs)
        gib = self.gibberish(texts) if self.gibberish is not None else np.zeros(len(texts), bool)
        con = np.array([self.hits(t) >= self.min_hits for t in texts], dtype=bool)
        return np.where(gib, GIBBERISH, np.where(con, CONCEPT, NORMAL)).astype(np.int64)


@dataclass
class LLMJudge:
    """Adapter for an LLM judge (the repo used Llama-3.3-70B via an OpenAI-compatible API, max_tokens = 4).

    chat_fn: callable(prompt: str) -> str (the answer's first digit is the label); nothing runs offline unless you
    pass one. concept: the `output_concept` text. queries: optional per-output user queries.
    invalid_label: label for answers outside {1, 2, 3} (e.g. the repo's undefined "4"); `n_invalid` counts them.
    gibberish: regex pre-filter applied first (label 3 without calling the LLM)."""

    chat_fn: Callable[[str], str]
    concept: str
    queries: Sequence[str] | None = None
    invalid_label: int = NORMAL
    gibberish: GibberishFilter | None = field(default_factory=GibberishFilter)
    n_invalid: int = 0

    TEMPLATE = ("Query: {query}\nConcept: {concept}\nOutput: {output}\n\nAnswer with one digit: 1 if the output is a "
                "normal answer without the concept, 2 if it contains or relates to the concept, 3 if it is "
                "gibberish.")

    def __call__(self, outputs: Sequence[str]) -> np.ndarray:
        texts = _texts(outputs)
        gib = self.gibberish(texts) if self.gibberish is not None else np.zeros(len(texts), bool)
        labels = np.empty(len(texts), np.int64)
        for i, t in enumerate(texts):
            if gib[i]:
                labels[i] = GIBBERISH
                continue
            q = self.queries[i] if self.queries is not None else ""
            ans = str(self.chat_fn(self.TEMPLATE.format(query=q, concept=self.concept, output=t))).strip()
            m = re.match(r"\s*([0-9])", ans)
            lab = int(m.group(1)) if m else -1
            if lab not in (1, 2, 3):
                self.n_invalid += 1
                lab = self.invalid_label
            labels[i] = lab
        return labels


def check_labels(labels, n: int) -> np.ndarray:
    """Validate a judge's answer: n ints in {1, 2, 3}."""
    lab = np.asarray(labels)
    if lab.shape != (n,):
        raise InputError(f"the judge returned shape {lab.shape}, expected ({n},) — one label per output")
    if not np.isin(lab, (1, 2, 3)).all():
        raise InputError(f"the judge returned labels {sorted(set(lab.tolist()))}; only 1, 2, 3 are valid")
    return lab.astype(np.int64)
