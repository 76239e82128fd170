"""What the two models see: held-out texts, their token ids, teacher-forced logits of both models on identical
inputs, context prompts cut from held-out texts, and generations pinned to an exact length."""
from __future__ import annotations

from typing import Iterator, Sequence

import torch

from interplab.core.errors import InputError, ShapeError

__all__ = ["heldout_texts", "tokenize_texts", "teacher_forced_logits", "context_prompts", "generate_continuations"]


def heldout_texts(n: int | None = None, sources: Sequence[str] = ("pydoc",), heldout_frac: float = 0.1,
                  corpus_seed: int = 0) -> list[str]:
    """Held-out paragraphs of the offline corpus (the split no zoo text organism trained on)."""
    from interplab.data.corpus import load_corpus

    held = load_corpus(tuple(sources), heldout_frac, corpus_seed).heldout
    return held if n is None else held[:n]


def user_texts(path, n: int | None = None, *, seed: int | None = None, field: str = "text",
               split: str | None = None) -> list[str]:
    """Texts of a user file (a `text` column; CSV/JSONL/JSON/Parquet/Arrow) or of a hub text source by name
    (`interplab.data.adapters.text_corpus.TEXT_SOURCES`, needs the hub): the first n non-empty texts (seed
    shuffles the stream first)."""
    from interplab.core.errors import InputError
    from interplab.data.adapters.text_corpus import texts

    out = list(texts(path, field=field, limit=n, seed=seed, split=split))
    if not out:
        raise InputError(f"{path}: no non-empty texts in field {field!r}")
    return out


def tokenize_texts(model, texts: Sequence[str], max_tokens: int | None = None) -> list[list[int]]:
    """Token ids of each text as the model's tokenizer produces them (special tokens included, e.g. BOS), truncated
    to `max_tokens` (default: the model's context length). Token-id lists are taken as they are (no BOS added).
    Empty texts raise InputError."""
    if isinstance(texts, str):
        texts = [texts]
    if len(texts) == 0:
        raise InputError("texts is empty; pass at least one string")
    limit = int(max_tokens or getattr(model, "n_ctx", 0) or 10**9)
    limit = min(limit, int(getattr(model, "n_ctx", limit) or limit))
    out = []
    for t in texts:
        if isinstance(t, (list, tuple)) or (hasattr(t, "tolist") and not isinstance(t, str)):
            ids = [int(x) for x in (t.tolist() if hasattr(t, "tolist") else t)]  # already token ids: used as is
            if not ids:
                raise InputError("an input token-id list is empty")
        elif isinstance(t, str) and t.strip():
            ids = model.tokenizer(t)["input_ids"]
        else:
            raise InputError(f"every text must be a non-empty string or a list of token ids; got {t!r}")
        out.append(list(ids[:limit]))
    return out


def teacher_forced_logits(model_base, model_target, texts, batch_size: int, max_tokens: int | None,
                          ) -> Iterator[tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]]:
    """Yield (base logits [n, V], target logits [n, V] or None, next-token ids [n]) at every real position that has a
    real next token, for identical inputs to both models."""
    ids = tokenize_texts(model_base, texts, max_tokens)
    if model_target is not None:
        if tokenize_texts(model_target, texts, max_tokens) != ids:
            raise InputError("the two models tokenize the texts differently; the comparison needs identical inputs")
        if model_target.d_vocab != model_base.d_vocab:
            raise ShapeError(f"vocabulary sizes differ: {model_base.d_vocab} vs {model_target.d_vocab}")
    for i in range(0, len(ids), batch_size):
        chunk = [r for r in ids[i:i + batch_size] if len(r) >= 2]
        if not chunk:
            continue
        with torch.no_grad():
            out_b = model_base.run(chunk, logits=True)
            out_t = model_target.run(chunk, logits=True) if model_target is not None else None
        mask = out_b.batch.attention_mask.bool()
        pred = mask[:, :-1] & mask[:, 1:]  # position has a real next token
        nxt = out_b.batch.input_ids[:, 1:][pred]
        zb = out_b.logits[:, :-1][pred].float()
        zt = out_t.logits[:, :-1][pred].float() if out_t is not None else None
        yield zb, zt, nxt


def context_prompts(model, texts: Sequence[str], context_tokens: int = 32, *, per_text: int = 1,
                    with_sources: bool = False):
    """Prompts of exactly `context_tokens` token ids from held-out texts: the first window of each
    text and, with `per_text` > 1, up to that many consecutive non-overlapping windows (a later
    window keeps the text's leading BOS when the tokenizer adds one, followed by the next
    context_tokens - 1 tokens), ordered so that every text's first window comes before any second
    window. Texts that are too short are skipped; InputError when none is left. with_sources: return
    (prompts, the index in `texts` each prompt was cut from)."""
    ids = tokenize_texts(model, texts, 10**9)
    bos = getattr(model.tokenizer, "bos_token_id", None)
    found = []
    for i, r in enumerate(ids):
        has_bos = bos is not None and len(r) > 0 and r[0] == bos
        head, body = (r[:1], r[1:]) if has_bos else ([], r)
        step = context_tokens - len(head)
        for j in range(per_text):
            w = body[j * step:(j + 1) * step]
            if len(w) < step:
                break
            found.append((j, i, head + w))
    found.sort(key=lambda x: (x[0], x[1]))  # every text's first window comes first
    out = [w for _, _, w in found]
    if not out:
        raise InputError(f"no text has {context_tokens} tokens; pass longer held-out texts or lower context_tokens")
    return (out, [i for _, i, _ in found]) if with_sources else out


def generate_continuations(model, prompts: list[list[int]], *, max_new_tokens: int = 96, greedy: bool = True,
                           temperature: float = 1.0, seed: int | None = None, edits: Sequence = (),
                           batch_size: int = 32, pin_length: bool = True) -> tuple[list[list[int]], list[str]]:
    """Generate exactly `max_new_tokens` per prompt (with `pin_length`, EOS is suppressed as in HF's min_new_tokens)
    using the KV cache. Returns (new token ids per prompt, decoded texts)."""
    from interplab.interventions.logit_bias import SuppressTokens

    edits = list(edits)
    if pin_length and getattr(model, "eos_token_id", None) is not None:
        edits.append(SuppressTokens([model.eos_token_id]))
    toks, texts = [], []
    for i in range(0, len(prompts), batch_size):
        chunk = prompts[i:i + batch_size]
        g = model.generate(chunk, max_new_tokens=max_new_tokens, edits=edits, greedy=greedy,
                           temperature=None if greedy else temperature, seed=None if seed is None else seed + i,
                           stop_at_eos=not pin_length, return_logits=False)
        toks.extend(g.new_tokens)
        texts.extend(g.text)
    return toks, texts
