"""Direct logit attribution (DLA): each head's and each MLP's direct contribution to a logit or logit difference.

The final residual stream at the read position is a sum of components: the embeddings (resid_pre.0), for every layer
each query head's output z_h @ W_O[h] (from attn_z and `model.attention_weights()`), the attention output's bias
(attn_out minus the heads' sum), and the MLP output. On Gemma-2/3 the heads' sum passes a post-attention norm before
it is added (attn_out is that norm's output): its scale is frozen too (`post_attention_scale`), so the heads carry
their share of attn_out and the attention-bias term is zero, as the model has no bias. As TransformerLens does
(`apply_ln_to_stack`), the final norm's scale is frozen at its value on the real residual stream, so the norm
becomes linear: a component c contributes ((c - mean(c)) for LayerNorm, or c for RMSNorm) / scale . (gamma * u),
with u = W_U[:, answer] - W_U[:, wrong]; the norm's bias and the unembedding bias form one constant term. The
contributions then sum exactly to the model's logit difference (the test checks it to 1e-4 in float32). Heads are
query heads; under GQA, head h reads KV group h // (n_heads / n_kv_heads), shown in `to_frame`.

    >>> from interplab.probes.lenses import direct_logit_attribution
    >>> dla = direct_logit_attribution(model, prompts, answer=" Paris", wrong=" Rome")
    >>> dla.heads.shape        # [n_prompts, n_layers, n_heads]
"""
from __future__ import annotations

from dataclasses import dataclass, field
import numpy as np
import torch

from interplab.core.errors import InputError, ShapeError
from interplab.core.result import Result
from interplab.probes.lenses.common import token_id, token_strings


@dataclass
class DLAResult(Result):
    """Direct contributions to logit[answer] - logit[wrong] at each prompt's last real token.

    heads: [n_prompts, n_layers, n_heads]; mlp, attn_bias: [n_prompts, n_layers]; embed, const, total: [n_prompts]
    (const = final-norm bias and unembedding bias; total = the model's own logit difference).
    answers / wrongs: the tokens per prompt (wrong "" = the answer's logit alone). n_kv_heads: KV groups."""

    heads: np.ndarray
    mlp: np.ndarray
    attn_bias: np.ndarray
    embed: np.ndarray
    const: np.ndarray
    total: np.ndarray
    answers: list[str] = field(default_factory=list)
    wrongs: list[str] = field(default_factory=list)
    n_kv_heads: int = 0
    model: str = ""

    def __post_init__(self):
        for name in ("heads", "mlp", "attn_bias", "embed", "const", "total"):
            setattr(self, name, np.asarray(getattr(self, name), np.float64))
        n, L = self.heads.shape[:2]
        if self.heads.ndim != 3 or self.mlp.shape != (n, L) or self.attn_bias.shape != (n, L):
            raise ShapeError(f"heads must be [n, L, H] and mlp / attn_bias [n, L]; got {self.heads.shape}, "
                             f"{self.mlp.shape}, {self.attn_bias.shape}")
        if not self.embed.shape == self.const.shape == self.total.shape == (n,):
            raise ShapeError(f"embed, const and total must be [{n}]")

    @property
    def component_sum(self) -> np.ndarray:
        """[n_prompts] the sum of every direct contribution (equals `total` up to float error)."""
        return (self.heads.sum((1, 2)) + self.mlp.sum(1) + self.attn_bias.sum(1) + self.embed + self.const)

    def mean_heads(self) -> np.ndarray:
        return self.heads.mean(0)

    def to_frame(self):
        """One row per component (mean over prompts): kind (head / mlp / attn_bias / embed / const), layer, head,
        kv_group, contribution."""
        import pandas as pd

        n, L, H = self.heads.shape
        group = max(1, H // max(1, self.n_kv_heads or H))
        rows = [dict(kind="head", layer=layer, head=h, kv_group=h // group,
                     contribution=float(self.heads[:, layer, h].mean())) for layer in range(L) for h in range(H)]
        rows += [dict(kind="mlp", layer=layer, contribution=float(self.mlp[:, layer].mean())) for layer in range(L)]
        rows += [dict(kind="attn_bias", layer=layer, contribution=float(self.attn_bias[:, layer].mean()))
                 for layer in range(L)]
        rows += [dict(kind="embed", contribution=float(self.embed.mean())),
                 dict(kind="const", contribution=float(self.const.mean()))]
        return pd.DataFrame(rows)


def frozen_norm(model, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, bool]:
    """(scale [n, 1], gamma [d], beta [d], centred) of the final norm at residual streams x [n, d], float64.

    The parameters are read from the module and checked against its own output on x, so an unsupported norm fails
    loudly instead of giving a wrong decomposition."""
    norm = model.final_norm_module
    w = getattr(norm, "weight", None)
    gamma = (w.detach().double().cpu() if w is not None else torch.ones(x.shape[-1], dtype=torch.float64))
    if type(norm).__name__.startswith("Gemma"):
        gamma = 1.0 + gamma  # Gemma's RMSNorm scales by (1 + weight)
    b = getattr(norm, "bias", None)
    beta = b.detach().double().cpu() if b is not None else torch.zeros_like(gamma)
    eps = float(getattr(norm, "eps", None) or getattr(norm, "variance_epsilon", None) or 1e-5)
    centred = isinstance(norm, torch.nn.LayerNorm) or "LayerNorm" in type(norm).__name__
    xc = x - x.mean(-1, keepdim=True) if centred else x
    scale = torch.sqrt(xc.pow(2).mean(-1, keepdim=True) + eps)
    with torch.no_grad():
        p = next(norm.parameters())
        ref = norm(x.to(device=p.device, dtype=p.dtype)).double().cpu()
    mine = xc / scale * gamma + beta
    if not torch.allclose(mine, ref, rtol=1e-3, atol=1e-3 * float(ref.abs().max())):
        raise InputError(f"DLA supports LayerNorm and RMSNorm final norms; {type(norm).__name__} does not match "
                         "either form, so its scale cannot be frozen")
    return scale, gamma, beta, centred


def post_attention_scale(model, raw: torch.Tensor) -> torch.Tensor | None:
    """[n, L, d] factors of a post-attention RMSNorm frozen at the heads' summed output raw [n, L, d] (Gemma-2/3's
    "sandwich" norm, whose output is attn_out), or None for a model without one. Frozen like the final norm, the
    norm is linear, so each head's write times the factor is its share of attn_out, and the heads sum to attn_out
    instead of leaving the norm's effect in the attention-bias term. Checked against the module's own output."""
    from interplab.models.layout import get_module, paths_for

    hf = getattr(model, "hf_model", None)
    try:
        paths = paths_for(hf)
    except Exception:   # noqa: BLE001 - a model without a module map has no sandwich norm to fold
        return None
    if hf is None or paths.attn_out is None:
        return None
    out = torch.empty_like(raw)
    for layer in range(raw.shape[1]):
        norm = get_module(hf, f"{paths.layers}.{layer}.{paths.attn_out}")
        norm = getattr(norm, "original_component", None) or norm
        w = getattr(norm, "weight", None)
        if w is None:
            return None
        gamma = w.detach().double().cpu()
        gamma = 1.0 + gamma if type(norm).__name__.startswith("Gemma") else gamma
        eps = float(getattr(norm, "eps", None) or getattr(norm, "variance_epsilon", None) or 1e-6)
        x = raw[:, layer]
        factor = gamma / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        with torch.no_grad():
            ref = norm(x.to(device=w.device, dtype=w.dtype)).double().cpu()
        if not torch.allclose(x * factor, ref, rtol=1e-3, atol=1e-3 * float(ref.abs().max())):
            return None   # not an RMSNorm of this form: leave the heads unscaled (the rest stays a remainder)
        out[:, layer] = factor
    return out


def direct_logit_attribution(model, prompts, answer, wrong=None, *, edits=None) -> DLAResult:
    """DLA of logit[answer] - logit[wrong] (or logit[answer]) at each prompt's last real token.

    prompts: a string or a list of them (left-padded as one batch); answer / wrong: one token each, or one per
    prompt. `edits` are applied in the forward that produces the components, so the DLA is that of the edited
    model."""
    prompts = [prompts] if isinstance(prompts, str) else list(prompts)
    n, L = len(prompts), model.n_layers
    ans = _per_prompt(model, answer, n, "answer")
    wr = _per_prompt(model, wrong, n, "wrong") if wrong is not None else [None] * n
    caps = ["resid_pre.0"] + [f"{k}.{layer}" for layer in range(L) for k in ("attn_z", "attn_out", "mlp_out")]
    out = model.run(prompts, capture=caps + [f"resid_post.{L - 1}"], edits=list(edits or []))
    last = {s: out.cache.last(s).double().cpu() for s in caps + [f"resid_post.{L - 1}"]}
    W_O = model.attention_weights()["W_O"]  # [L, H, d_head, d_model]
    W_U, b_U = model.unembedding()
    has_wrong = torch.tensor([w is not None for w in wr], dtype=torch.float64)  # no wrong token: the logit alone
    wrong_ids = [w if w is not None else 0 for w in wr]
    u = W_U[:, ans].T - W_U[:, wrong_ids].T * has_wrong[:, None]  # [n, d]
    scale, gamma, beta, centred = frozen_norm(model, last[f"resid_post.{L - 1}"])

    def contrib(c: torch.Tensor) -> torch.Tensor:  # c [n, ..., d] -> [n, ...]
        c = c - c.mean(-1, keepdim=True) if centred else c
        s = scale.reshape(n, *([1] * (c.ndim - 1)))
        gu = (gamma * u).reshape(n, *([1] * (c.ndim - 2)), -1)
        return (c / s * gu).sum(-1)

    z = torch.stack([last[f"attn_z.{layer}"] for layer in range(L)], 1)  # [n, L, H, d_head]
    head_out = torch.einsum("nlhe,lhed->nlhd", z, W_O)  # [n, L, H, d_model]
    post = post_attention_scale(model, head_out.sum(2))
    if post is not None:   # Gemma's sandwich norm: each head's write passes the frozen post-attention norm
        head_out = head_out * post[:, :, None, :]
    attn_out = torch.stack([last[f"attn_out.{layer}"] for layer in range(L)], 1)
    mlp = torch.stack([last[f"mlp_out.{layer}"] for layer in range(L)], 1)
    const = (beta * u).sum(-1)
    if b_U is not None:
        const = const + b_U[ans] - b_U[wrong_ids] * has_wrong
    logits = out.logits[:, -1].double().cpu()
    rows = torch.arange(n)
    total = logits[rows, ans] - logits[rows, wrong_ids] * has_wrong
    return DLAResult(contrib(head_out).numpy(), contrib(mlp).numpy(), contrib(attn_out - head_out.sum(2)).numpy(),
                     contrib(last["resid_pre.0"]).numpy(), const.numpy(), total.numpy(),
                     token_strings(model, ans), ["" if w is None else token_strings(model, [w])[0] for w in wr],
                     model.n_kv_heads, model.name)


def _per_prompt(model, tok, n: int, what: str) -> list[int]:
    if isinstance(tok, (list, tuple)):
        if len(tok) != n:
            raise InputError(f"{what} has {len(tok)} entries for {n} prompts; give one token or one per prompt")
        return [token_id(model, t) for t in tok]
    return [token_id(model, tok)] * n

