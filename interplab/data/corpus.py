"""Offline English text, read at run time from what is installed (nothing is committed or downloaded).

Sources:
- "pydoc": Python's own `pydoc_data.topics.topics` (stdlib; ~465k characters of technical English).
- "gensim_lee": the Lee news corpus inside an installed `gensim` wheel (`gensim/test/test_data/lee_background.cor`),
  used only when gensim is installed (it is optional; `available_sources()` says what is there).

The text is split into paragraphs (duplicates dropped); a seeded fraction of paragraphs is held out (for prompts/evaluation).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SOURCES = ("pydoc", "gensim_lee")


def _pydoc_docs() -> list[str]:
    from pydoc_data.topics import topics

    return [topics[k] for k in sorted(topics)]


def _gensim_lee_docs() -> list[str]:
    import importlib.util

    spec = importlib.util.find_spec("gensim")
    if spec is None or not spec.submodule_search_locations:
        from interplab.core.errors import MissingDependencyError

        raise MissingDependencyError("the 'gensim_lee' corpus needs `pip install gensim` (it ships the Lee corpus)")
    f = Path(list(spec.submodule_search_locations)[0]) / "test" / "test_data" / "lee_background.cor"
    return [ln.strip() for ln in f.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]


def available_sources() -> list[str]:
    import importlib.util

    return ["pydoc"] + (["gensim_lee"] if importlib.util.find_spec("gensim") else [])


def paragraphs(doc: str, min_chars: int = 80) -> list[str]:
    """Split a document at blank lines, collapse whitespace runs inside lines, drop short paragraphs."""
    out = []
    for para in re.split(r"\n\s*\n", doc):
        lines = [re.sub(r"[ \t]+", " ", ln).rstrip() for ln in para.strip("\n").splitlines()]
        p = "\n".join(ln for ln in lines if ln.strip())
        if len(p) >= min_chars:
            out.append(p)
    return out


@dataclass(frozen=True)
class Corpus:
    """train / heldout paragraphs (lists of strings) and the sources they came from."""

    train: list[str]
    heldout: list[str]
    sources: tuple[str, ...]

    @property
    def n_chars(self) -> int:
        return sum(map(len, self.train)) + sum(map(len, self.heldout))


def load_corpus(sources: tuple[str, ...] | list[str] = ("pydoc",), heldout_frac: float = 0.1, seed: int = 0,
                min_chars: int = 80) -> Corpus:
    """Load the offline English corpus: paragraphs of `sources`, a seeded `heldout_frac` of them held out."""
    from interplab.core.errors import InputError

    paras: list[str] = []
    for s in sources:
        if s == "pydoc":
            docs = _pydoc_docs()
        elif s == "gensim_lee":
            docs = _gensim_lee_docs()
        else:
            raise InputError(f"unknown corpus source {s!r}; known: {SOURCES}")
        for d in docs:
            paras.extend(paragraphs(d, min_chars))
    paras = list(dict.fromkeys(paras))  # drop repeated paragraphs (pydoc repeats some), keep first occurrence
    if not paras:
        raise InputError(f"corpus sources {sources} gave no text")
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(paras))
    n_held = int(round(heldout_frac * len(paras)))
    held = set(perm[:n_held].tolist())
    return Corpus([p for i, p in enumerate(paras) if i not in held], [p for i, p in enumerate(paras) if i in held],
                  tuple(sources))
