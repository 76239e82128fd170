"""Logit lens (nostalgebraist 2020) and a trained linear "tuned lens" (Belrose et al. 2023).

The logit lens reads every layer's residual stream (resid_post.L) through the model's own final norm and output
layer (`model.final_norm_module`, `model.unembed`), so its last layer *is* the model's logits. Per layer and
position it reports the top-k tokens, their probabilities, KL(final || layer) and, optionally, the probability and
rank of a target token. A tuned lens learns one affine translator per layer, h -> h + h A_L + b_L (A, b start at zero,
so an untrained tuned lens is the logit lens), by minimising the same KL on a few prompts; all layers train as one
batched tensor program.

    >>> from interplab.probes.lenses import logit_lens, train_tuned_lens
    >>> ll = logit_lens(model, "The capital of France is")
    >>> ll.to_frame().query("position == @ll.n_pos - 1")[["layer", "top1", "kl"]]
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch

from interplab.core import progress
from interplab.core.errors import ConfigError, ShapeError
from interplab.core.result import Result
from interplab.probes.lenses.common import grid_layers, prompt_ids, token_id, token_strings


@dataclass
class TunedLens(Result):
    """Per-layer affine translators: lens_L(h) = h + h @ A[L] + b[L], then the final norm and unembedding.

    A: [n_layers, d_model, d_model]; b: [n_layers, d_model]; loss_curve: mean KL per step; n_tokens: training
    tokens; steps, lr, seed: how it was trained."""

    A: np.ndarray
    b: np.ndarray
    loss_curve: np.ndarray = field(default_factory=lambda: np.zeros(0))
    n_tokens: int = 0
    steps: int = 0
    lr: float = 0.0
    seed: int = 0
    model: str = ""

    def __post_init__(self):
        self.A, self.b = np.asarray(self.A, np.float32), np.asarray(self.b, np.float32)
        if self.A.ndim != 3 or self.A.shape[1] != self.A.shape[2] or self.b.shape != self.A.shape[:2]:
            raise ShapeError(f"A must be [L, d, d] and b [L, d], got {self.A.shape} and {self.b.shape}")

    def translate(self, h: torch.Tensor, layers: Sequence[int]) -> torch.Tensor:
        """h [n_layers_sel, ..., d] (one slice per entry of `layers`) -> translated residual streams."""
        A = torch.as_tensor(self.A[list(layers)], device=h.device, dtype=h.dtype)
        b = torch.as_tensor(self.b[list(layers)], device=h.device, dtype=h.dtype)
        shape = (A.shape[0],) + (1,) * (h.ndim - 2) + (h.shape[-1],)
        return h + torch.einsum("l...d,lde->l...e", h, A) + b.reshape(shape)

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame({"layer": np.arange(self.A.shape[0]),
                             "A_norm": np.linalg.norm(self.A.reshape(self.A.shape[0], -1), axis=1),
                             "b_norm": np.linalg.norm(self.b, axis=1)})


@dataclass
class LogitLensResult(Result):
    """A lens read of one prompt.

    layers: [n_rows] the resid_post layer of each row. tokens: the prompt's tokens.
    top_ids / top_probs: [n_rows, n_pos, k]; top_tokens: the same as strings.
    kl: [n_rows, n_pos] KL(final distribution || lens distribution), nats.
    target_prob / target_rank: [n_rows, n_pos] probability and rank (0 = top) of `target` (empty without one).
    lens: "logit" or "tuned"."""

    layers: np.ndarray
    tokens: list[str]
    top_ids: np.ndarray
    top_probs: np.ndarray
    top_tokens: list
    kl: np.ndarray
    target: str = ""
    target_prob: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    target_rank: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    lens: str = "logit"
    model: str = ""

    def __post_init__(self):
        self.layers = np.asarray(self.layers, np.int64).reshape(-1)
        self.kl = np.asarray(self.kl, np.float64)
        self.top_ids, self.top_probs = np.asarray(self.top_ids, np.int64), np.asarray(self.top_probs, np.float64)
        if self.kl.shape != (self.layers.size, len(self.tokens)):
            raise ShapeError(f"kl must be [n_layers={self.layers.size}, n_pos={len(self.tokens)}], got {self.kl.shape}")
        if self.top_ids.shape[:2] != self.kl.shape or self.top_probs.shape != self.top_ids.shape:
            raise ShapeError(f"top_ids / top_probs must be [{self.kl.shape[0]}, {self.kl.shape[1]}, k], got "
                             f"{self.top_ids.shape} and {self.top_probs.shape}")

    @property
    def n_pos(self) -> int:
        return len(self.tokens)

    def to_frame(self):
        """One row per (layer, position): token, top1..topk with probabilities, kl, target_prob / target_rank."""
        import pandas as pd

        L, P, k = self.top_ids.shape
        layer, pos = np.meshgrid(self.layers, np.arange(P), indexing="ij")
        data = {"lens": self.lens, "layer": layer.ravel(), "position": pos.ravel(),
                "token": [self.tokens[p] for p in pos.ravel()], "kl": self.kl.ravel()}
        for j in range(k):
            data[f"top{j + 1}"] = [self.top_tokens[i][p][j] for i in range(L) for p in range(P)]
            data[f"p{j + 1}"] = self.top_probs[:, :, j].ravel()
        if self.target:
            data["target_prob"], data["target_rank"] = self.target_prob.ravel(), self.target_rank.ravel()
        return pd.DataFrame(data)


def _lens_logits(model, h: torch.Tensor) -> torch.Tensor:
    """h [..., d_model] -> logits through the model's own final norm and output layer."""
    norm = model.final_norm_module
    p = next(norm.parameters())
    with torch.no_grad():
        return model.unembed(norm(h.to(device=p.device, dtype=p.dtype))).double()


def _stack_layers(model, prompt, layers, edits) -> tuple[list[int], torch.Tensor, torch.Tensor]:
    ids = prompt_ids(model, prompt)
    out = model.run([ids], capture=[f"resid_post.{layer}" for layer in layers], edits=list(edits or []))
    h = torch.stack([out.cache[f"resid_post.{layer}"][0] for layer in layers])  # [n_rows, p, d]
    return ids, h, out.logits[0].double()


def logit_lens(model, prompt, *, layers: Sequence[int] | None = None, top_k: int = 5, target=None,
               tuned: TunedLens | None = None, edits=None) -> LogitLensResult:
    """Read resid_post of every layer in `layers` (default all) through the final norm and unembedding (after the
    tuned lens's translator when `tuned` is given). `target` (a token or id) adds its probability and rank."""
    if top_k < 1:
        raise ConfigError(f"top_k must be >= 1, got {top_k}")
    layers = grid_layers(model, layers)
    ids, h, final = _stack_layers(model, prompt, layers, edits)
    if tuned is not None:
        if tuned.A.shape[0] != model.n_layers or tuned.A.shape[1] != model.d_model:
            raise ShapeError(f"the tuned lens is for [{tuned.A.shape[0]} layers, d={tuned.A.shape[1]}], the model has "
                             f"[{model.n_layers}, {model.d_model}]; train one for this model")
        h = tuned.translate(h.float(), layers)
    logp_final = torch.log_softmax(final, -1)
    t = None if target is None else token_id(model, target)
    # one layer at a time: [positions x vocabulary] in float64 per layer, never [layers x positions x vocabulary]
    rows = [_lens_row(model, h[i], logp_final, min(top_k, model.d_vocab), t) for i in range(len(layers))]
    kl, probs, top = (torch.stack([r[j] for r in rows]) for j in range(3))
    vocab = {int(i): s for i, s in zip(top.unique().tolist(), token_strings(model, top.unique().tolist()))}
    top_tokens = [[[vocab[int(i)] for i in row] for row in layer] for layer in top.tolist()]
    res = dict(target="", target_prob=np.zeros((0, 0)), target_rank=np.zeros((0, 0)))
    if t is not None:
        res = dict(target=token_strings(model, [t])[0], target_prob=torch.stack([r[3] for r in rows]).numpy(),
                   target_rank=torch.stack([r[4] for r in rows]).numpy())
    return LogitLensResult(np.array(layers), token_strings(model, ids), top.numpy(), probs.numpy(),
                           top_tokens, kl.numpy(), lens="logit" if tuned is None else "tuned", model=model.name,
                           **res)


def _lens_row(model, h: torch.Tensor, logp_final: torch.Tensor, k: int, target: int | None) -> tuple:
    """One layer's read of h [p, d]: (kl [p], top probs [p, k], top ids [p, k], target prob [p], target rank [p])."""
    logp = torch.log_softmax(_lens_logits(model, h), -1)                   # [p, V]
    lf = logp_final.to(logp.device)
    kl = (lf.exp() * (lf - logp)).sum(-1)
    probs, top = logp.exp().topk(k, -1)
    tp = tr = torch.zeros(0)
    if target is not None:
        tp = logp[..., target]
        tr = (logp > tp[..., None]).sum(-1).cpu()
        tp = tp.exp().cpu()
    return kl.cpu(), probs.cpu(), top.cpu(), tp, tr


TUNED_CHUNK_ELEMENTS = 1 << 24   # logits of at most this many (token, vocabulary) entries at once: 64 MB in fp32


def train_tuned_lens(model, prompts: Sequence, *, steps: int = 200, lr: float = 1e-3, seed: int = 0,
                     edits=None, chunk_tokens: int | None = None) -> TunedLens:
    """Fit one affine translator per layer so that lens_L(resid_post.L) matches the model's final distribution
    (mean KL over every real token of `prompts`). The model is frozen; only A, b train (Adam, full batch).

    Memory (issue 48): the loss is a mean over (layer, token) of terms that each depend on one layer's translator,
    so its gradient is accumulated one layer and one chunk of tokens at a time (`chunk_tokens`, default: as many as
    keep a chunk's logits under TUNED_CHUNK_ELEMENTS entries), with the gradient through the unembedding written
    out (d KL / d logits = softmax - target) into the chunk's one logits buffer. It holds the target distribution
    [tokens x vocabulary] once and a chunk's logits, never [layers x tokens x vocabulary] (the batched version held
    12 GB on SmolLM2), so memory does not grow with the number of layers. Same loss, gradients and Adam steps as
    the batched version up to float summation order (tests/lenses/test_lens_memory.py)."""
    if steps < 1 or lr <= 0:
        raise ConfigError(f"need steps >= 1 and lr > 0, got steps={steps}, lr={lr}")
    torch.manual_seed(seed)
    L, d = model.n_layers, model.d_model
    # The last layer's lens is the model itself: it keeps A = 0, b = 0 and only layers 0..L-2 train.
    out = model.run(list(prompts), capture=[f"resid_post.{layer}" for layer in range(L - 1)],
                    edits=list(edits or []))
    real = out.batch.attention_mask.bool().to(out.logits.device)
    h = torch.stack([out.cache[f"resid_post.{layer}"][real] for layer in range(L - 1)]).float().cpu()  # [L-1, n, d]
    W_U, b_U = model.unembedding()
    W_U = W_U.float()
    b_U = None if b_U is None else b_U.float()
    chunk = chunk_tokens or max(1, TUNED_CHUNK_ELEMENTS // max(1, W_U.shape[-1]))
    target = _TargetChunks(out.logits[real], chunk)
    del out
    n = target.n
    A = torch.zeros(L - 1, d, d, requires_grad=True)
    b = torch.zeros(L - 1, d, requires_grad=True)
    opt = torch.optim.Adam([A, b], lr=lr)
    curve = []
    norm_f = _float_norm(model.final_norm_module)
    scale = 1.0 / ((L - 1) * n)                                              # the mean over (layer, token)
    with progress.task(steps, "steps", phase="tuned lens") as bar:
        for _ in range(steps):
            opt.zero_grad()
            total = 0.0
            for layer in range(L - 1):
                for c in range(target.n_chunks):
                    total += _tuned_chunk_loss(h[layer, target.rows(c)], A[layer], b[layer], target, c, norm_f,
                                               W_U, b_U, scale)
            opt.step()
            curve.append(total)
            bar.advance()
    A_all = torch.cat([A.detach(), torch.zeros(1, d, d)]).numpy()
    b_all = torch.cat([b.detach(), torch.zeros(1, d)]).numpy()
    return TunedLens(A_all, b_all, np.array(curve), int(n), steps, lr, seed, model.name)


class _TargetChunks:
    """The model's final distribution over the training tokens, in token chunks: probabilities p [n, V] (held
    once, float32), and per token sum(p log p) and sum(p), so KL(p || q) = sum(p log p) - p . log q needs no
    second vocabulary-wide tensor."""

    def __init__(self, logits: torch.Tensor, chunk: int):
        self.n, self.chunk = int(logits.shape[0]), int(chunk)
        self.n_chunks = max(1, -(-self.n // self.chunk))
        self.p = torch.empty(logits.shape, dtype=torch.float32)
        self.neg_entropy = torch.empty(self.n, dtype=torch.float32)
        self.p_sum = torch.empty(self.n, dtype=torch.float32)
        for c in range(self.n_chunks):
            r = self.rows(c)
            lp = torch.log_softmax(logits[r].float().cpu(), -1)
            p = lp.exp()
            self.neg_entropy[r] = (p * lp).sum(-1)
            self.p_sum[r] = p.sum(-1)
            self.p[r] = p

    def rows(self, c: int) -> slice:
        return slice(c * self.chunk, min(self.n, (c + 1) * self.chunk))


def _tuned_chunk_loss(h, A, b, target: _TargetChunks, c: int, norm_f, W_U, b_U, scale: float) -> float:
    """Backpropagate one (layer, token chunk) share of the mean KL into A, b; return that share. Only the small
    [tokens, d_model] part goes through autograd; the logits' gradient is written into their own buffer."""
    r = target.rows(c)
    p, p_sum = target.p[r], target.p_sum[r]
    z = norm_f(h + h @ A + b)
    with torch.no_grad():
        buf = z.detach() @ W_U                                              # logits [tokens, V]
        if b_U is not None:
            buf += b_U
        buf -= torch.logsumexp(buf, -1, keepdim=True)                       # log q, in place
        loss = (target.neg_entropy[r].sum() - torch.vdot(p.reshape(-1), buf.reshape(-1))) * scale
        buf.exp_().mul_(p_sum[:, None]).sub_(p).mul_(scale)                 # d loss / d logits = q sum(p) - p
        grad_z = buf @ W_U.T
    z.backward(grad_z)
    return float(loss)


def _float_norm(norm: torch.nn.Module):
    """The final norm as a differentiable float32 function (a float32 copy, so the model itself is untouched)."""
    import copy

    f = copy.deepcopy(norm).float().cpu()
    for p in f.parameters():
        p.requires_grad_(False)
    return f
