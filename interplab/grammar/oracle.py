"""The grammar itself as a causal LM: logits = log p_G(next | prefix), for tests and as the ideal reference model.

`GrammarOracleLM(g, tokenizer)` is an `nn.Module` with the Hugging Face call convention
(``model(input_ids=..., attention_mask=...)`` returns an object with ``.logits``), so
`interplab.train.grammar_eval.grammar_kl` reads it like a plain causal LM under training. It has no layers, so it
is no `LabModel`: the probes (`interplab.probes.pcfg`) do not take it. ``mix`` blends the exact distribution with a
uniform one over the grammar's symbols (a planted, known miscalibration).
"""
from __future__ import annotations

from types import SimpleNamespace

import torch

from interplab.grammar.algorithms import next_token_logprobs
from interplab.grammar.pcfg import PCFG


class GrammarOracleLM(torch.nn.Module):
    """Exact grammar next-token distribution over the tokenizer's vocabulary (other tokens get log-prob -inf → a
    large negative number). Input rows must be BOS w_1 ... (right-padded)."""

    def __init__(self, g: PCFG, tokenizer, mix: float = 0.0):
        super().__init__()
        self.g = g.to(torch.float64)
        self.mix = float(mix)
        vocab = tokenizer.get_vocab()
        self.term_ids = torch.tensor([vocab[t] for t in g.terminals], dtype=torch.long)
        self.eos_id = int(tokenizer.eos_token_id)
        self.vocab_size = len(tokenizer)
        inv = torch.full((self.vocab_size,), -1, dtype=torch.long)
        inv[self.term_ids] = torch.arange(g.V)
        self.register_buffer("inv", inv, persistent=False)
        self.config = SimpleNamespace(num_hidden_layers=0)

    @torch.no_grad()
    def forward(self, input_ids, attention_mask=None, **kw):
        ids = torch.as_tensor(input_ids)
        B, T = ids.shape
        att = torch.ones_like(ids) if attention_mask is None else torch.as_tensor(attention_mask)
        g = self.g
        toks = self.inv[ids[:, 1:]]  # grammar ids (or -1)
        is_t = (toks >= 0) & att[:, 1:].bool()
        lengths = torch.cumprod(is_t.long(), 1).sum(1)
        n = max(1, T - 1)
        tk = torch.where(toks >= 0, toks, torch.zeros_like(toks))
        safe_len = lengths.clamp_min(1)
        lp = next_token_logprobs(g, tk if tk.shape[1] else torch.zeros(B, 1, dtype=torch.long), safe_len)
        # an empty prefix (length 0): position 0 row is valid for any length >= 1
        p = lp.exp()
        if self.mix:
            p = (1 - self.mix) * p + self.mix / (g.V + 1)
        out = torch.full((B, T, self.vocab_size), -1e4, dtype=torch.float64)
        cols = torch.cat([self.term_ids, torch.tensor([self.eos_id])])
        k = min(T, lp.shape[1])
        vals = torch.log(p[:, :k].clamp_min(1e-300))
        vals = torch.where(vals < -1e4, torch.full_like(vals, -1e4), vals)
        out[:, :k, cols] = vals
        return SimpleNamespace(logits=out.float(), attentions=None)
