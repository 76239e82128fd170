"""n-gram deduplication of chat samples (FAST paper, Alg. 1).

For each sample in order, hash the word n-grams of every turn's content; drop the sample if any of its hashes was
seen before, otherwise keep it and add its hashes. Turns shorter than n words contribute no n-gram (a sample made only
of such turns is always kept). The paper uses n = 20 on whitespace words."""
from __future__ import annotations

import hashlib
from typing import Any, Sequence

from interplab.core.errors import ConfigError


def _ngram_hashes(sample: Any, n: int) -> set[bytes]:
    turns = [m.get("content", "") for m in sample] if isinstance(sample, (list, tuple)) else [str(sample)]
    out = set()
    for t in turns:
        w = str(t).split()
        for i in range(len(w) - n + 1):
            out.add(hashlib.blake2b(" ".join(w[i:i + n]).encode("utf-8"), digest_size=12).digest())
    return out


def dedup_ngrams(samples: Sequence[Any], n: int = 20) -> tuple[list[Any], list[int]]:
    """(kept samples, kept indices). Samples are dialogues (lists of {'role', 'content'}) or strings."""
    if n <= 0:
        raise ConfigError(f"n must be positive, got {n}")
    seen: set[bytes] = set()
    kept, idx = [], []
    for i, s in enumerate(samples):
        h = _ngram_hashes(s, n)
        if h & seen:
            continue
        seen |= h
        kept.append(s)
        idx.append(i)
    return kept, idx
