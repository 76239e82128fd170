"""Metrics on a forward's logits that know about padding: per-token loss, logit difference, answer probability
and rank. Each takes a `RunOutput` (tokens and padding read from its batch) or plain tensors.

    out = m.run(["The capital of France is", "Rome is the capital of"])
    loss = token_loss(out)                      # [b, p-1], NaN where the target is padding
    token_loss(out, reduce="mean")              # mean over real targets only
    logit_diff(out, m.token_id(" Paris"), m.token_id(" Rome"))   # [b] at each row's last real token

Positions: `position=-1` (default) is every row's last real token (batches are left-padded, so the last column).
`position=k >= 0` counts real tokens from each row's start (0 = its first real token), whatever its padding.
"""
from __future__ import annotations

from typing import Sequence

import torch

from interplab.core.errors import InputError, ShapeError

__all__ = ["token_loss", "logit_diff", "answer_prob", "answer_rank", "position_logits", "reply_loss"]



def _unpack(logits, tokens=None, attention_mask=None):
    """(logits [b, p, V], tokens [b, p] or None, attention mask [b, p] bool) from a RunOutput or tensors."""
    batch = getattr(logits, "batch", None)
    if batch is not None:
        if logits.logits is None:
            raise InputError("this RunOutput has no logits (run(..., logits=False)); run with logits=True")
        lg = logits.logits
        tokens = batch.input_ids if tokens is None else tokens
        attention_mask = batch.attention_mask if attention_mask is None else attention_mask
    else:
        lg = logits
    if not isinstance(lg, torch.Tensor) or lg.ndim != 3:
        raise ShapeError(f"logits must be [batch, pos, vocab], got {getattr(lg, 'shape', type(lg).__name__)}")
    b, p, _ = lg.shape
    if attention_mask is None:
        attention_mask = torch.ones(b, p, dtype=torch.bool, device=lg.device)
    attention_mask = torch.as_tensor(attention_mask, device=lg.device).bool()
    if attention_mask.shape != (b, p):
        raise ShapeError(f"attention_mask is {list(attention_mask.shape)}, logits are [{b}, {p}, vocab]")
    if tokens is not None:
        tokens = torch.as_tensor(tokens, device=lg.device).long()
        if tokens.shape != (b, p):
            raise ShapeError(f"tokens are {list(tokens.shape)}, logits are [{b}, {p}, vocab]; pass the ids the "
                             "forward saw (out.batch.input_ids)")
    return lg, tokens, attention_mask


def token_loss(logits, tokens=None, *, attention_mask=None, mask=None, reduce: str = "none"):
    """Cross-entropy of each next token: loss[b, i] = -log p(tokens[b, i+1] | tokens[b, :i+1]), [b, p-1].

    logits: a RunOutput, or [b, p, V] with `tokens` [b, p] (and `attention_mask` [b, p] when padded). A target
    that is padding, or outside `mask` ([b, p] bool over the *targets' own* positions, e.g. the answer span),
    gives NaN, so nothing is averaged in by accident. reduce: 'none' | 'mean' (over the kept targets) | 'sum'."""
    lg, tok, real = _unpack(logits, tokens, attention_mask)
    if tok is None:
        raise InputError("token_loss needs the tokens: pass a RunOutput or tokens=[b, p] ids")
    keep = real[:, 1:] & real[:, :-1]
    if mask is not None:
        m = torch.as_tensor(mask, device=lg.device).bool()
        if m.shape != real.shape:
            raise ShapeError(f"mask is {list(m.shape)}; it must be [b, p] like the tokens {list(real.shape)}")
        keep = keep & m[:, 1:]
    logp = torch.log_softmax(lg[:, :-1].float(), -1)
    nll = -logp.gather(-1, tok[:, 1:, None]).squeeze(-1)
    nll = torch.where(keep, nll, torch.full_like(nll, float("nan")))
    if reduce == "none":
        return nll
    if reduce in ("mean", "sum"):
        kept = nll[keep]
        if kept.numel() == 0:
            raise InputError("no target token is kept (all padding or outside mask)")
        return kept.mean() if reduce == "mean" else kept.sum()
    raise InputError(f"reduce must be 'none', 'mean' or 'sum', got {reduce!r}")


def position_logits(logits, position: int | Sequence[int] | torch.Tensor = -1, *, attention_mask=None):
    """[b, V] logits at `position` of each row: -1 = the last real token; k >= 0 = the k-th real token of the row
    (padding skipped); a [b] tensor gives one position per row. Out-of-range positions raise."""
    lg, _, real = _unpack(logits, None, attention_mask)
    b, p, _ = lg.shape
    lengths = real.long().sum(1)
    pos = torch.as_tensor(position, device=lg.device).long()
    if pos.ndim == 0:
        pos = pos.expand(b)
    if pos.shape != (b,):
        raise ShapeError(f"position must be an int or [batch] ({b}), got {list(pos.shape)}")
    rel = torch.where(pos < 0, lengths + pos, pos)
    if bool(((rel < 0) | (rel >= lengths)).any()):
        raise InputError(f"position {position} is outside some row's real tokens (lengths {lengths.tolist()})")
    cols = p - lengths + rel   # left padding: a row's k-th real token sits at column p - length + k
    return lg[torch.arange(b, device=lg.device), cols]


def _ids(ids, b: int, device) -> torch.Tensor:
    t = torch.as_tensor(ids, device=device).long()
    if t.ndim == 0:
        return t.expand(b)
    if t.shape != (b,):
        raise ShapeError(f"answer ids must be one id or one per row ({b}), got shape {list(t.shape)}")
    return t


def logit_diff(logits, correct, wrong, *, position=-1, attention_mask=None) -> torch.Tensor:
    """[b] logit(correct) − logit(wrong) at `position` (default each row's last real token). correct / wrong:
    a token id or one per row (e.g. `LabModel.token_id(" Paris")`)."""
    x = position_logits(logits, position, attention_mask=attention_mask).float()
    b = x.shape[0]
    r = torch.arange(b, device=x.device)
    return x[r, _ids(correct, b, x.device)] - x[r, _ids(wrong, b, x.device)]


def answer_prob(logits, answer, *, position=-1, attention_mask=None) -> torch.Tensor:
    """[b] softmax probability of `answer` (an id or one per row) at `position`."""
    x = torch.softmax(position_logits(logits, position, attention_mask=attention_mask).float(), -1)
    return x[torch.arange(x.shape[0], device=x.device), _ids(answer, x.shape[0], x.device)]


def answer_rank(logits, answer, *, position=-1, attention_mask=None) -> torch.Tensor:
    """[b] rank of `answer` among the vocabulary at `position` (0 = the top token; ties count against it)."""
    x = position_logits(logits, position, attention_mask=attention_mask).float()
    a = _ids(answer, x.shape[0], x.device)
    own = x[torch.arange(x.shape[0], device=x.device), a]
    return (x > own[:, None]).sum(-1)


def reply_loss(model, gen, *, edits=None, reduce: str = "mean") -> torch.Tensor:
    """NLL of each generated reply under `model` given its prompt (default: the unedited model, the usual
    fluency read-out of a steered reply): [b] mean per reply token (reduce='mean'), or [b] sums ('sum').
    gen: a `GenerateOutput`; the reply is each row's new tokens up to and including its stop token. An empty
    reply gives NaN. The prompt's own tokens are never scored."""
    if reduce not in ("mean", "sum"):
        raise InputError(f"reduce must be 'mean' or 'sum', got {reduce!r}")
    rows, starts = [], []
    for i, new in enumerate(gen.new_tokens):
        prompt = gen.batch.row_tokens(i)
        rows.append(prompt + list(new))
        starts.append(len(prompt))
    with torch.no_grad():
        out = model.run(rows, edits=edits)
    width = out.batch.input_ids.shape[1]
    lengths = out.batch.lengths.to(out.logits.device)
    pos = torch.arange(width, device=out.logits.device)[None] - (width - lengths[:, None])   # real-token index
    mask = pos >= torch.as_tensor(starts, device=pos.device)[:, None]
    nll = token_loss(out, mask=mask)
    kept = ~torch.isnan(nll)
    total = torch.where(kept, nll, torch.zeros_like(nll)).sum(1)
    n = kept.sum(1)
    if reduce == "sum":
        return torch.where(n > 0, total, torch.full_like(total, float("nan")))
    return total / n.clamp_min(1) + torch.where(n > 0, 0.0, float("nan"))
