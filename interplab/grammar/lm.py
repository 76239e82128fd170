"""A grammar as a language model sees it: token ids for its terminals, model inputs, held-out sets and n-gram
baselines. Shared by PCFG training (`interplab.zoo.recipes.pcfg`, `interplab.train.grammar_eval`) and the probes
(`interplab.probes.pcfg`)."""
from __future__ import annotations

import numpy as np
import torch

from interplab.core.errors import InputError
from interplab.grammar.pcfg import PCFG

__all__ = ["grammar_vocab", "to_model_ids", "sample_eval_set", "ngram_baselines"]


def grammar_vocab(g: PCFG, tokenizer) -> dict:
    """Model token ids for the grammar: {"terminals": LongTensor [V], "eos", "bos", "pad"}. Raises `InputError`
    when a terminal is not a single token of the tokenizer."""
    vocab = tokenizer.get_vocab()
    missing = [t for t in g.terminals if t not in vocab]
    if missing:
        raise InputError(f"the model's tokenizer lacks grammar terminals {missing[:5]}; train the model on this grammar "
                         "(interplab.zoo.recipes.pcfg builds a word tokenizer from g.terminals).")
    if tokenizer.bos_token_id is None or tokenizer.eos_token_id is None:
        raise InputError("the tokenizer needs BOS and EOS tokens.")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    return {"terminals": torch.tensor([vocab[t] for t in g.terminals], dtype=torch.long),
            "eos": int(tokenizer.eos_token_id), "bos": int(tokenizer.bos_token_id), "pad": int(pad)}


def to_model_ids(g: PCFG, tokens: torch.Tensor, lengths: torch.Tensor, gv: dict, *, eos: bool = True):
    """Grammar tokens [B, n] -> right-padded model ids [B, n+2] = BOS w_1..w_len EOS PAD..., and the attention mask.
    Position p (0-based) of the model input holds BOS for p = 0 and w_p otherwise; the prediction made there is
    compared with p_G(· | w≤p)."""
    B, n = tokens.shape
    ids = torch.full((B, n + 2), gv["pad"], dtype=torch.long)
    ids[:, 0] = gv["bos"]
    pos = torch.arange(n)[None]
    real = pos < lengths[:, None]
    mapped = gv["terminals"][tokens.clamp(0, g.V - 1)]
    ids[:, 1:n + 1] = torch.where(real, mapped, torch.full_like(mapped, gv["pad"]))
    att = torch.zeros(B, n + 2, dtype=torch.long)
    att[:, 0] = 1
    att[:, 1:n + 1] = real.long()
    if eos:
        ids[torch.arange(B), lengths + 1] = gv["eos"]
        att[torch.arange(B), lengths + 1] = 1
    return ids, att


def sample_eval_set(g: PCFG, n: int, seed: int, max_len: int | None = None):
    """Held-out grammar samples (tokens, lengths, trees). Long strings are truncated (exact prefixes), never
    re-sampled; truncated rows have no EOS step."""
    max_len = max_len or 64
    toks, trees = g.sample(n, seed=seed, max_len=max_len, on_long="truncate")
    lengths = torch.tensor([t.length for t in trees], dtype=torch.long)
    return toks, lengths, trees


def ngram_baselines(g: PCFG, n_samples: int = 20000, seed: int = 10_101, alpha: float = 0.01,
                    max_len: int = 64) -> dict:
    """Unigram and bigram next-token models over V+1 symbols (EOS last), counted from grammar samples with add-α
    smoothing. Bigram contexts: BOS (index V+1) or the previous terminal. Returns {"unigram": [V+1] log-probs,
    "bigram": [V+2, V+1] log-probs}."""
    toks, trees = g.sample(n_samples, seed=seed, max_len=max_len, on_long="truncate")
    V = g.V
    uni = np.full(V + 1, alpha)
    bi = np.full((V + 2, V + 1), alpha)
    for b, tr in enumerate(trees):
        seq = toks[b, :tr.length].tolist() + ([] if tr.truncated else [V])
        prev = V + 1
        for x in seq:
            uni[x] += 1
            bi[prev, x] += 1
            prev = x
    return {"unigram": torch.tensor(np.log(uni / uni.sum())), "bigram": torch.tensor(np.log(bi / bi.sum(1, keepdims=True)))}
