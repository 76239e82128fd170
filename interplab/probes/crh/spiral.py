"""Spiral probe through a model: norm-constrained steering-vector optimisation (`optim_vecs`, spec methods/crh.md
§2.4 steps 1-3) and the helix fit of the resulting trajectory (steps 4-5, `helix.fit_helix`).

`optimise_steering_vectors(model, prompt_ori, prompt_tgt, layer)`:

1. Both prompts are tokenised (chat-templated as one user turn when the model has a template and the prompt is a
   string; message lists always go through the template; token-id lists are used as given). They must have the same
   length and differ somewhere; t* = the first differing position.
2. Δ = resid_pre.L(tgt) − resid_pre.L(ori) at t* (the **input** of block L, the repo's pre-hook), dist = ‖Δ‖.
3. For every norm budget w: v_w starts at w·dist·Δ̂ and takes `steps` Adam steps (lr 0.1), steering ori at t* only
   (resid_pre.L, the same point Δ was read at), with v_w projected onto the ball ‖v‖ ≤ w·dist after each step.
   Loss = Σ_src −log(1 − p + ε) + Σ_dst −log(p + ε), p = softmax(temperature·logits) (the repo's 0.7·logits).
   All w are optimised at once as one batch (one steering vector per row): the loss is a sum of per-row terms and
   Adam is element-wise, so this is exactly one independent optimiser per w.

**Loss position** (the spec is silent; interplab's choice): by default the loss is read where ori's and tgt's
unsteered greedy continuations first diverge. The common greedy prefix (at most `max_prefix` tokens) is appended to
ori, the loss is read at the last position of that sequence, src = ori's greedy token there and dst = tgt's. With
a chat template the first answer token is often the same for both prompts (toy-chat answers "the …" either way), so
the plain "next token after the prompt" would give src = dst and a degenerate loss. With explicit `src_tokens` /
`dst_tokens` no continuation is used: the loss is read at ori's last prompt position.

The repo reads the loss at the block-L *output* while steering at its input (B1 within §7); here the loss is on the
logits, so the read site does not enter. The steering vector is the only tensor that receives gradients
(`torch.autograd.grad` w.r.t. the vector; model weights are never touched, their `.grad` stays as it was)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from interplab.core.errors import ConfigError, DataError, InputError
from interplab.core.result import Result
from interplab.probes.crh.helix import HelixConfig, HelixFits, fit_helix

DEFAULT_WS = tuple(np.round(np.arange(1, 31) * 0.1, 10))     # the repo's default sweep 0.1 … 3.0


def budget_grid(w_min: float, w_max: float, w_step: float) -> np.ndarray:
    """Norm budgets w = w_min, w_min + w_step, …, w_max (rounded to 10 decimals)."""
    if not w_step > 0 or not w_max >= w_min >= 0:
        raise ConfigError("need w_step > 0 and 0 ≤ w_min ≤ w_max")
    return np.round(np.arange(w_min, w_max + w_step / 2, w_step), 10)


def _prompt_ids(model, prompt, chat) -> list[int]:
    if isinstance(prompt, (list, tuple)) and prompt and all(isinstance(t, (int, np.integer)) for t in prompt):
        return [int(t) for t in prompt]
    has_template = getattr(model.tokenizer, "chat_template", None) is not None
    if isinstance(prompt, (list, tuple)) and prompt and all(isinstance(m, dict) for m in prompt):
        return model.apply_chat_template(list(prompt), add_generation_prompt=True)
    if isinstance(prompt, str):
        if not prompt:
            raise InputError("spiral probe: empty prompt")
        use = has_template if chat == "auto" else bool(chat)
        if use:
            return model.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True)
        return model.tokenizer(prompt)["input_ids"]
    raise InputError(f"a spiral-probe prompt is a string, a list of chat messages or a list of token ids; "
                     f"got {type(prompt).__name__}")


def first_difference(ids_ori: Sequence[int], ids_tgt: Sequence[int]) -> int:
    """t*: the first position where two equal-length token sequences differ. InputError when they are identical
    or differ in length (the spiral probe compares prompts that differ in one token)."""
    if len(ids_ori) != len(ids_tgt):
        raise InputError(f"the spiral probe needs prompts of equal token length (they should differ in one token); "
                         f"got {len(ids_ori)} and {len(ids_tgt)} tokens")
    diff = [i for i, (a, b) in enumerate(zip(ids_ori, ids_tgt)) if a != b]
    if not diff:
        raise InputError("the two prompts tokenise identically: nothing to steer towards; change one token")
    return diff[0]


@dataclass
class SteeringVectors(Result):
    """Result of `optimise_steering_vectors` (one prompt pair, one layer).

    vectors [n_w, d]: optimised vectors in w order; ws [n_w]; dist = ‖Δ‖; delta [d] = Δ; reference [n_w, d]: the
    LRH reference w·dist·Δ̂ (the initialisation); losses [n_w, steps + 1]: loss of each w before every step and after
    the last; p_src, p_dst [n_w]: final total probability of the src / dst tokens at the loss position (under
    softmax(temperature·logits)); p_src0, p_dst0: the same unsteered; t_star; loss_ids: the sequence the loss is
    read on (ori + common greedy prefix); src_tokens, dst_tokens; config (layer, site, steps, lr, …)."""

    vectors: np.ndarray
    ws: np.ndarray
    dist: float
    delta: np.ndarray
    reference: np.ndarray
    losses: np.ndarray
    p_src: np.ndarray
    p_dst: np.ndarray
    p_src0: float
    p_dst0: float
    t_star: int
    loss_ids: list
    src_tokens: list
    dst_tokens: list
    config: dict = field(default_factory=dict)

    @property
    def norms(self) -> np.ndarray:
        return np.linalg.norm(self.vectors, axis=1)

    def cos_to_reference(self) -> np.ndarray:
        """cos(v_w, Δ̂) per w (NaN where v_w = 0): how far each optimised vector turned away from the LRH line."""
        n = self.norms
        u = self.delta / max(float(np.linalg.norm(self.delta)), 1e-300)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(n > 0, self.vectors @ u / np.where(n > 0, n, 1.0), np.nan)

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame({"w": self.ws, "budget": self.ws * self.dist, "norm": self.norms,
                             "cos_to_delta": self.cos_to_reference(), "loss_init": self.losses[:, 0],
                             "loss_final": self.losses[:, -1], "p_src": self.p_src, "p_dst": self.p_dst})

    def summary(self) -> dict:
        return {"dist": self.dist, "t_star": self.t_star, "n_w": int(self.ws.size), "p_src0": self.p_src0,
                "p_dst0": self.p_dst0, "src_tokens": list(self.src_tokens), "dst_tokens": list(self.dst_tokens),
                "loss_ids": list(self.loss_ids)}


def _token_list(x, name) -> list[int]:
    if isinstance(x, (int, np.integer)):
        return [int(x)]
    out = [int(t) for t in x]
    if not out:
        raise InputError(f"{name} must name at least one token id")
    return out


def _delta_at(model, ids_o: list[int], ids_tgt: list[int], site: str, t_star: int):
    """Δ = site(tgt) − site(ori) at t* (float64 tensor) and dist = ‖Δ‖ > 0."""
    import torch

    with torch.no_grad():
        res = model.run([ids_o, ids_tgt], capture=[site], logits=False)
        acts = res.cache[site]                                       # equal lengths: no padding
        delta = (acts[1, t_star] - acts[0, t_star]).double()
    dist = float(delta.norm())
    if not dist > 0:
        raise DataError(f"Δ at {site}, position {t_star} is zero: block {site.split('.')[-1]} does not see the "
                        "differing token yet (pick a later layer)")
    return delta, dist


def _loss_targets(model, ids_o: list[int], ids_t: list[int], src_tokens, dst_tokens, max_prefix: int):
    """(loss_ids, src, dst): the sequence the loss is read on and the token ids pushed away from / towards
    (see "Loss position" in the module docstring)."""
    if (src_tokens is None) != (dst_tokens is None):
        raise InputError("give both src_tokens and dst_tokens, or neither (then they are the diverging greedy tokens)")
    if src_tokens is None:
        g = model.generate([ids_o, ids_t], max_new_tokens=max_prefix + 1, stop_at_eos=False)
        go, gt = g.new_tokens[0], g.new_tokens[1]
        k = next((i for i, (a, b) in enumerate(zip(go, gt)) if a != b), None)
        if k is None:
            raise InputError(f"ori and tgt continue identically for {max_prefix + 1} greedy tokens; pass "
                             "src_tokens/dst_tokens explicitly or raise max_prefix")
        loss_ids = list(ids_o) + list(go[:k])
        src, dst = [int(go[k])], [int(gt[k])]
    else:
        loss_ids = list(ids_o)
        src, dst = _token_list(src_tokens, "src_tokens"), _token_list(dst_tokens, "dst_tokens")
    bad = [t for t in src + dst if not 0 <= t < model.d_vocab]
    if bad:
        raise InputError(f"token ids {bad} out of range [0, {model.d_vocab})")
    if set(src) & set(dst):
        raise InputError(f"src and dst tokens overlap ({sorted(set(src) & set(dst))}): the loss would be degenerate")
    return loss_ids, src, dst


def optimise_steering_vectors(model, prompt_ori, prompt_tgt, layer: int, *, ws: Sequence[float] = DEFAULT_WS,
                              steps: int = 20, lr: float = 0.1, temperature: float = 0.7, eps: float = 1e-6,
                              src_tokens=None, dst_tokens=None, max_prefix: int = 16,
                              chat: Any = "auto") -> SteeringVectors:
    """The spiral probe's `optim_vecs` (spec §2.4 steps 1-3); see the module docstring.

    prompt_ori / prompt_tgt: strings (one user turn, chat-templated when the model has a template; `chat=False`
    for raw text), chat message lists, or token-id lists; equal length, differing at t*. layer: block L (steering
    and Δ at resid_pre.L). ws: norm budgets (multiples of dist). src_tokens / dst_tokens: token ids (int or list)
    to push away from / towards; default: the first diverging greedy tokens of ori / tgt (see "Loss position")."""
    import torch

    from interplab.interventions import Steer

    ws_arr = np.asarray(list(ws), dtype=np.float64)
    if ws_arr.ndim != 1 or ws_arr.size == 0 or np.any(ws_arr < 0) or not np.all(np.isfinite(ws_arr)):
        raise ConfigError(f"ws must be a non-empty list of finite budgets ≥ 0; got {list(ws)!r:.80}")
    if steps < 0 or lr <= 0 or temperature <= 0 or eps <= 0:
        raise ConfigError("need steps ≥ 0, lr > 0, temperature > 0 and eps > 0")
    L = int(layer)
    if not 0 <= L < model.n_layers:
        raise InputError(f"layer {layer} out of range 0..{model.n_layers - 1}")
    site = f"resid_pre.{L}"
    ids_o, ids_t = _prompt_ids(model, prompt_ori, chat), _prompt_ids(model, prompt_tgt, chat)
    t_star = first_difference(ids_o, ids_t)

    delta, dist = _delta_at(model, ids_o, ids_t, site, t_star)
    u = delta / dist
    loss_ids, src, dst = _loss_targets(model, ids_o, ids_t, src_tokens, dst_tokens, max_prefix)

    n_w = ws_arr.size
    dtype = model.dtype if model.dtype in (torch.float32, torch.float64) else torch.float32
    budgets = torch.as_tensor(ws_arr * dist, dtype=dtype, device=model.device)
    src_t = torch.as_tensor(src, device=model.device)
    dst_t = torch.as_tensor(dst, device=model.device)
    batch = [loss_ids] * n_w

    def probs(vec):
        out = model.run(batch, edits=[Steer(site, vec, positions=t_star)], grad=vec.requires_grad)
        p = torch.softmax(temperature * out.logits[:, -1].float(), -1)
        return p[:, src_t].sum(-1), p[:, dst_t].sum(-1)

    def loss_terms(vec):
        p = torch.softmax(temperature * model.run(batch, edits=[Steer(site, vec, positions=t_star)],
                                                  grad=vec.requires_grad).logits[:, -1].float(), -1)
        return (-torch.log(1 - p[:, src_t] + eps).sum(-1) - torch.log(p[:, dst_t] + eps).sum(-1))

    with torch.no_grad():
        p_s0, p_d0 = probs(torch.zeros(1, model.d_model, dtype=dtype, device=model.device).expand(n_w, -1).clone())

    vec = (budgets[:, None] * u.to(dtype=dtype, device=model.device)[None]).clone().requires_grad_(True)
    reference = vec.detach().clone()
    opt = torch.optim.Adam([vec], lr=lr)
    hist = []
    for _ in range(int(steps)):
        per_w = loss_terms(vec)
        hist.append(per_w.detach().double().cpu().numpy())
        (grad,) = torch.autograd.grad(per_w.sum(), [vec])              # the vector is the only gradient target
        vec.grad = grad
        opt.step()
        opt.zero_grad(set_to_none=True)
        with torch.no_grad():                                           # project onto ‖v‖ ≤ w·dist
            n = vec.norm(dim=1)
            scale = torch.where(n > budgets, budgets / n.clamp_min(1e-30), torch.ones_like(n))
            vec.mul_(scale[:, None])
            vec[budgets == 0] = 0.0
    final = vec.detach()
    with torch.no_grad():
        hist.append(loss_terms(final).double().cpu().numpy())
        p_s, p_d = probs(final)
    cfg = {"layer": L, "site": site, "steps": int(steps), "lr": lr, "temperature": temperature, "eps": eps,
           "max_prefix": max_prefix, "loss_position": "divergence" if src_tokens is None else "prompt_end",
           "ids_ori": list(ids_o), "ids_tgt": list(ids_t), "model": getattr(model, "name", None)}
    return SteeringVectors(vectors=final.double().cpu().numpy(), ws=ws_arr, dist=dist,
                           delta=delta.cpu().numpy(), reference=reference.double().cpu().numpy(),
                           losses=np.stack(hist, 1), p_src=p_s.double().cpu().numpy(),
                           p_dst=p_d.double().cpu().numpy(), p_src0=float(p_s0[0]), p_dst0=float(p_d0[0]),
                           t_star=int(t_star), loss_ids=loss_ids, src_tokens=src, dst_tokens=dst, config=cfg)


@dataclass
class SpiralProbe(Result):
    """One prompt pair's spiral probe: the optimised `SteeringVectors` and a `HelixFit` per mode
    ('fixed' and/or 'faithful'), plus two controls fitted the same way: the LRH reference line w·dist·Δ̂
    (`reference_fits`) and the trajectory flattened onto its own top-2 PCs (`planar_fits`: a planar curve cannot
    turn about an axis, so a helix fit to it that is as good as `fits` means the "helix" is only a bend)."""

    vectors: SteeringVectors
    fits: HelixFits
    reference_fits: HelixFits
    planar_fits: HelixFits = field(default_factory=HelixFits)

    def summary(self) -> dict:
        return {"vectors": self.vectors.summary(), "fits": {k: v.summary() for k, v in self.fits.items()},
                "reference_fits": {k: v.summary() for k, v in self.reference_fits.items()},
                "planar_fits": {k: v.summary() for k, v in self.planar_fits.items()}}

    def to_frame(self):
        return self.vectors.to_frame()


def spiral_probe(model, prompt_ori, prompt_tgt, layer: int, *, modes: Sequence[str] = ("fixed", "faithful"),
                 helix: HelixConfig | None = None, drop_zero: bool = True, **optim_kw) -> SpiralProbe:
    """`optimise_steering_vectors` then `fit_helix` in each mode (spec §2.4 steps 1-5). Rows with w = 0 (the zero
    vector) are dropped from the fit when `drop_zero`. Two controls are fitted the same way: the LRH reference line
    w·dist·Δ̂ (collinear) and the trajectory's projection onto its own top-2 PCs (planar: same bend, no turn)."""
    from dataclasses import replace

    sv = optimise_steering_vectors(model, prompt_ori, prompt_tgt, layer, **optim_kw)
    keep = sv.ws > 0 if drop_zero else np.ones(sv.ws.size, bool)
    base = helix or HelixConfig()
    X = sv.vectors[keep]
    mean = X.mean(0)
    _, _, Vt = np.linalg.svd(X - mean, full_matrices=False)
    planar = mean + (X - mean) @ Vt[:2].T @ Vt[:2]
    fits, ref, flat = {}, {}, {}
    for mode in modes:
        cfg = replace(base, mode=mode)
        fits[mode] = fit_helix(X, cfg)
        ref[mode] = fit_helix(sv.reference[keep], cfg)
        flat[mode] = fit_helix(planar, cfg)
    return SpiralProbe(vectors=sv, fits=HelixFits(**fits), reference_fits=HelixFits(**ref),
                       planar_fits=HelixFits(**flat))
