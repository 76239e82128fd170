"""Plain-text corpora for hyperfitting and layer geometry (hyperfit_geometry.md §4.1), and BT(P)'s pretraining text
(fast_sae.md §2.1).

Carlsson et al. hyperfit on 2000 random 256-token sequences of Fiction-Stories, WikiText or BBC News and prompt with
32-token contexts; the sources here read a `text` field (WikiText's empty lines and `= Heading =` lines dropped by
`min_chars`). Offline, the organisms use `interplab.data.corpus.load_corpus` (texts bundled with installed packages).
"""
from __future__ import annotations

from typing import Iterator

from interplab.core.errors import DataError
from interplab.data.files import open_source

__all__ = ["TEXT_SOURCES", "texts", "token_sequences"]

#: name -> (hub id, config, split, text field)
TEXT_SOURCES = {
    "wikitext-103": ("Salesforce/wikitext", "wikitext-103-raw-v1", "train", "text"),
    "wikitext-2": ("Salesforce/wikitext", "wikitext-2-raw-v1", "train", "text"),
    "pile-uncopyrighted": ("monology/pile-uncopyrighted", None, "train", "text"),
}


def texts(source="wikitext-103", *, split: str | None = None, field: str | None = None, limit: int | None = None,
          seed: int | None = None, min_chars: int = 1) -> Iterator[str]:
    """Texts (stripped, at least `min_chars` long) from a named source, another hub id or a local file."""
    hub, config, default_split, default_field = TEXT_SOURCES.get(str(source), (None, None, "train", "text"))
    key = field or default_field
    rows = open_source(None if hub else source, hub=hub, config=config, split=split or default_split, seed=seed,
                       file_split=split is not None)
    n = 0
    for i, row in enumerate(rows):
        if key not in row:
            raise DataError(f"text row {i} has no {key!r} field (has {sorted(row)}); pass field=... to pick one")
        t = str(row[key] or "").strip()
        if len(t) < min_chars or (t.startswith("=") and t.endswith("=")):
            continue
        yield t
        n += 1
        if limit is not None and n >= limit:
            return


def token_sequences(text_iter, tokenizer, *, length: int = 256, limit: int | None = None) -> Iterator[list[int]]:
    """Token-id sequences of exactly `length` tokens: each text's first `length` tokens, shorter texts dropped
    (the Hyperfitting skeleton keeps sequences of exactly 256 tokens)."""
    n = 0
    for t in text_iter:
        ids = tokenizer(t, add_special_tokens=False)["input_ids"]
        if len(ids) < length:
            continue
        yield list(ids[:length])
        n += 1
        if limit is not None and n >= limit:
            return
