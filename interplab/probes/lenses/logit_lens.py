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
    logp = torch.log_softmax(_lens_logits(model, h), -1)  # [n_rows, p, V]
    logp_final = torch.log_softmax(final, -1).to(logp.device)
    kl = (logp_final.exp() * (logp_final - logp)).sum(-1)
    probs, top = logp.exp().topk(min(top_k, model.d_vocab), -1)
    vocab = {int(t): s for t, s in zip(top.unique().tolist(), token_strings(model, top.unique().tolist()))}
    top_tokens = [[[vocab[int(t)] for t in row] for row in layer] for layer in top.tolist()]
    res = dict(target="", target_prob=np.zeros((0, 0)), target_rank=np.zeros((0, 0)))
    if target is not None:
        t = token_id(model, target)
        tp = logp[..., t]
        res = dict(target=token_strings(model, [t])[0], target_prob=tp.exp().cpu().numpy(),
                   target_rank=(logp > tp[..., None]).sum(-1).cpu().numpy())
    return LogitLensResult(np.array(layers), token_strings(model, ids), top.cpu().numpy(), probs.cpu().numpy(),
                           top_tokens, kl.cpu().numpy(), lens="logit" if tuned is None else "tuned", model=model.name,
                           **res)


def train_tuned_lens(model, prompts: Sequence, *, steps: int = 200, lr: float = 1e-3, seed: int = 0,
                     edits=None) -> TunedLens:
    """Fit one affine translator per layer so that lens_L(resid_post.L) matches the model's final distribution
    (mean KL over every real token of `prompts`). The model is frozen; only A, b train (Adam, full batch)."""
    if steps < 1 or lr <= 0:
        raise ConfigError(f"need steps >= 1 and lr > 0, got steps={steps}, lr={lr}")
    torch.manual_seed(seed)
    L, d = model.n_layers, model.d_model
    out = model.run(list(prompts), capture=[f"resid_post.{layer}" for layer in range(L)], edits=list(edits or []))
    real = out.batch.attention_mask.bool().to(out.logits.device)
    h = torch.stack([out.cache[f"resid_post.{layer}"][real] for layer in range(L)]).float().cpu()  # [L, n, d]
    target = torch.log_softmax(out.logits[real].float().cpu(), -1)
    norm, W_U, b_U = model.final_norm_module, *model.unembedding()
    W_U = W_U.float()
    b_U = None if b_U is None else b_U.float()
    # The last layer's lens is the model itself: it keeps A = 0, b = 0 and only layers 0..L-2 train.
    h = h[: L - 1]
    A = torch.zeros(L - 1, d, d, requires_grad=True)
    b = torch.zeros(L - 1, d, requires_grad=True)
    opt = torch.optim.Adam([A, b], lr=lr)
    curve = []
    norm_f = _float_norm(norm)
    for _ in range(steps):
        opt.zero_grad()
        z = norm_f(h + torch.einsum("lnd,lde->lne", h, A) + b[:, None])
        logits = z @ W_U + (b_U if b_U is not None else 0)
        logp = torch.log_softmax(logits, -1)
        loss = (target.exp() * (target - logp)).sum(-1).mean()
        loss.backward()
        opt.step()
        curve.append(float(loss.detach()))
    A_all = torch.cat([A.detach(), torch.zeros(1, d, d)]).numpy()
    b_all = torch.cat([b.detach(), torch.zeros(1, d)]).numpy()
    return TunedLens(A_all, b_all, np.array(curve), int(real.sum()), steps, lr, seed,
                     model.name)


def _float_norm(norm: torch.nn.Module):
    """The final norm as a differentiable float32 function (a float32 copy, so the model itself is untouched)."""
    import copy

    f = copy.deepcopy(norm).float().cpu()
    for p in f.parameters():
        p.requires_grad_(False)
    return f
