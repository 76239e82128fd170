"""The one word-level vocabulary shared by every toy organism (toy-base, toy-chat, toy-base-s2).

All three task families (CtxMem, multitask decode, concepts) and the chat roles live in one vocabulary so a single
organism can be trained on the mixture. Ids are fixed by the order below (after the tokenizer's six special tokens:
<pad>=0, <bos>=1, <eos>=2, <unk>=3, <|im_start|>=4, <|im_end|>=5); never reorder, only append.
"""
from __future__ import annotations

from functools import lru_cache

# chat roles (the chat template writes them as plain words)
ROLES = ("system", "user", "assistant")

# CtxMem (methods/truth_scores.md §7)
N_ENTITIES = 32
N_VALUES = 32
ENTITIES = tuple(f"e{i}" for i in range(N_ENTITIES))
VALUES = tuple(f"v{i}" for i in range(N_VALUES))
CTX = "ctx"      # starts a CtxMem passage
QUERY = "q"      # precedes the queried entity
ANS = "ans"      # generation-mode answer marker (also the MC answer prefix)
CAND = "cand"    # precedes the candidate answer in verification mode
VER = "ver"      # verification-mode answer marker
TRUE, FALSE = "T", "F"
CTXMEM_MARKERS = (CTX, QUERY, ANS, CAND, VER, TRUE, FALSE)

# Multitask decode (methods/decodeshare.md §7)
N_SYMBOLS = 16
SYMBOLS = tuple(f"s{i}" for i in range(N_SYMBOLS))
SEP = "sep"
TASKS = ("copy", "rev", "sort", "inc", "mc")
LETTERS = ("A", "B", "C", "D")

# Concepts (methods/crh.md §7-8): concept name -> its token set
CONCEPTS: dict[str, tuple[str, ...]] = {
    "animal": ("cat", "dog", "fox", "owl"),
    "color": ("red", "blue", "green", "gold"),
    "food": ("bread", "rice", "apple", "soup"),
    "weather": ("rain", "snow", "wind", "sun"),
    "music": ("drum", "song", "harp", "bell"),
    "place": ("city", "lake", "hill", "road"),
}
CONCEPT_NAMES = tuple(CONCEPTS)
MENTION = "mention"
FILLER = (
    "the", "a", "is", "and", "it", "we", "go", "see", "make", "this", "that", "very",
    "good", "new", "old", "big", "small", "day", "time", "way", "work", "home", "book", "hand",
)


@lru_cache(maxsize=1)
def toy_words() -> tuple[str, ...]:
    """All non-special words of the toy vocabulary, in id order."""
    words: list[str] = [*ROLES, *ENTITIES, *VALUES, *CTXMEM_MARKERS, *SYMBOLS, SEP, *TASKS, *LETTERS,
                        MENTION, *CONCEPT_NAMES]
    for toks in CONCEPTS.values():
        words.extend(toks)
    words.extend(FILLER)
    if len(set(words)) != len(words):  # pragma: no cover - guards edits to the lists above
        dup = sorted({w for w in words if words.count(w) > 1})
        raise AssertionError(f"duplicate toy words: {dup}")
    return tuple(words)


def build_toy_tokenizer():
    """The toy organisms' tokenizer: `build_word_tokenizer(toy_words(), chat=True, add_bos=True)`."""
    from interplab.data.tokenizers import build_word_tokenizer

    return build_word_tokenizer(toy_words(), chat=True, add_bos=True)


@lru_cache(maxsize=1)
def toy_vocab() -> dict[str, int]:
    """word -> id, identical to `build_toy_tokenizer().get_vocab()` (checked in tests) but without building one."""
    from interplab.data.tokenizers import SPECIAL_TOKENS

    vocab: dict[str, int] = {}
    for w in (*SPECIAL_TOKENS, *toy_words()):
        vocab.setdefault(w, len(vocab))
    return vocab


_TOY_PROBE = ("ctx", "e25", "v3", "e7", "v17")


def speaks_toy_vocab(tok) -> bool:
    """True for a tokenizer that reads the organisms' toy vocabulary word by word (each of `ctx`, `e25`, `v3`, ...
    one known token). A BPE tokenizer spells `v1 v2` too, in pieces, so "no unknown token" is not enough: on
    SmolLM2 the CtxMem pair was organism text, and its top-1 was a newline (issue 25 §4)."""
    unk = getattr(tok, "unk_token_id", None)
    for w in _TOY_PROBE:
        ids = tok(w, add_special_tokens=False)["input_ids"]
        if len(ids) != 1 or ids[0] == unk:
            return False
    return True
