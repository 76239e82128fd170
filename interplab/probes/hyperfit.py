"""Hyperfitting controls and rank analyses (spec methods/hyperfit_geometry.md §2.1-2.3, §4.4-4.5).

* Entropy-matched temperature. H(p) = -sum_v p_v log p_v (nats), p_T = softmax(z / T). H_target = mean over held-out
  teacher-forced positions of the target (hyperfitted) model's entropy; T* solves mean_t H(softmax(z_base,t / T*)) =
  H_target by bisection on log T in [1e-2, 1e2] until |H - H_target| <= 1e-4 nats (H is increasing in T). The
  per-position variant solves H(softmax(z_base,t / T_t)) = H_target,t for every position separately. Temperature never
  changes the argsort, so greedy decoding is identical at every T: the control is evaluated by sampling.
* Ranks. rank_t(v) = 1 + #{u : z_t,u > z_t,v} with ties broken by lower token id first. Teacher-forced top-1 agreement;
  Kendall tau-b between base and target logits on the base's (and the target's) top-50 tokens of each position;
  per-token rank change Delta r_t(v) = rank_base,t(v) - rank_target,t(v) (> 0: the target promotes v), its mean and its
  standard deviation across contexts (context dependence); along the target's greedy generations, the base model's rank
  of every chosen token given the same prefix, binned {1, 2-10, 11-200, >200}; override rate = P(rank > 1).
* Static vocabulary reweighting. delta_v = mean_t(l_target,t,v - l_base,t,v) on log-softmax values l for the top-K
  tokens by mean rank change, 0 elsewhere (apply with interplab.interventions.logit_bias.StaticLogitBias).
* Logit lens on the last layers: ln_final(resid_post_l) W_U (+ b_U) of the target model at each overriding step; the
  first layer at which the chosen token enters the top-k.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np
import torch

from interplab.core.errors import ConfigError, DataError, InputError, ShapeError
from interplab.probes.geometry import tokenize_texts

__all__ = [
    "entropy", "entropy_curve", "matched_temperature_from_logits", "per_position_temperature_from_logits",
    "entropy_matched_temperature", "match_temperature", "TemperatureMatch", "per_position_matched_temperature",
    "PerPositionTemperature", "token_ranks", "full_ranks", "kendall_tau_b", "topk_kendall_tau", "rank_bins",
    "RANK_BINS", "TeacherForcedComparison", "compare_teacher_forced", "static_delta", "RankReorderingConfig",
    "RankReorderingResult", "rank_reordering", "context_prompts", "generate_continuations", "final_norm_module",
    "unembed", "logit_lens",
]

RANK_BINS = ("1", "2-10", "11-200", ">200")
_BIN_EDGES = (1, 10, 200)


# ----------------------------------------------------------------------------------------------------------------
# entropy and temperature
# ----------------------------------------------------------------------------------------------------------------
def entropy(logits: torch.Tensor, temperature: float | torch.Tensor = 1.0) -> torch.Tensor:
    """Entropy (nats) of softmax(logits / T) over the last axis, computed in float64. `temperature` may be a tensor
    broadcastable to logits.shape[:-1] (per-position temperatures)."""
    z = logits.to(torch.float64)
    T = torch.as_tensor(temperature, dtype=torch.float64, device=z.device)
    if T.ndim > 0:
        T = T[..., None]
    logp = torch.log_softmax(z / T, dim=-1)
    p = logp.exp()
    return -(p * logp).nan_to_num(0.0).sum(-1)


def _as_chunks(logits) -> list[torch.Tensor]:
    if isinstance(logits, torch.Tensor):
        logits = [logits]
    chunks = [torch.as_tensor(c) for c in logits]
    if not chunks:
        raise InputError("no logits given")
    for c in chunks:
        if c.ndim != 2:
            raise ShapeError(f"logit chunks must be [n_positions, vocab]; got {tuple(c.shape)}")
    return chunks


def entropy_curve(logits, temperatures: Sequence[float]) -> np.ndarray:
    """Mean entropy over positions at each temperature (for the H(T) figure). logits: [N, V] or a list of chunks."""
    chunks = _as_chunks(logits)
    n = sum(c.shape[0] for c in chunks)
    return np.array([sum(float(entropy(c, T).sum()) for c in chunks) / n for T in temperatures])


def _bisect_log_t(f: Callable[[float], float], target: float, bounds: tuple[float, float], tol: float,
                  max_iter: int = 200) -> tuple[float, float, int]:
    """Solve f(T) = target for increasing f by bisection on log T. Returns (T, f(T), iterations); clamps to a bound
    when the target lies outside [f(lo), f(hi)]."""
    lo, hi = math.log(bounds[0]), math.log(bounds[1])
    f_lo, f_hi = f(math.exp(lo)), f(math.exp(hi))
    if target <= f_lo + tol:
        return math.exp(lo), f_lo, 0
    if target >= f_hi - tol:
        return math.exp(hi), f_hi, 0
    mid, f_mid = lo, f_lo
    for it in range(1, max_iter + 1):
        mid = 0.5 * (lo + hi)
        f_mid = f(math.exp(mid))
        if abs(f_mid - target) <= tol:
            return math.exp(mid), f_mid, it
        if f_mid < target:
            lo = mid
        else:
            hi = mid
    return math.exp(mid), f_mid, max_iter


def matched_temperature_from_logits(logits, target_entropy: float, *, bounds=(1e-2, 1e2),
                                    tol: float = 1e-4) -> float:
    """T such that the mean entropy of softmax(logits / T) over positions equals `target_entropy` (nats) to `tol`."""
    chunks = _as_chunks(logits)
    n = sum(c.shape[0] for c in chunks)

    def f(T: float) -> float:
        return sum(float(entropy(c, T).sum()) for c in chunks) / n

    return _bisect_log_t(f, float(target_entropy), bounds, tol)[0]


def per_position_temperature_from_logits(logits: torch.Tensor, target_entropies: torch.Tensor, *,
                                         bounds=(1e-2, 1e2), tol: float = 1e-4, max_iter: int = 100) -> torch.Tensor:
    """Per-position T_t with H(softmax(z_t / T_t)) = H_target,t (vectorised bisection on log T; clamped to `bounds`
    where the target entropy is unreachable, e.g. above log V)."""
    z = torch.as_tensor(logits)
    h = torch.as_tensor(target_entropies, dtype=torch.float64, device=z.device)
    if z.ndim != 2 or h.shape != z.shape[:1]:
        raise ShapeError(f"logits must be [N, V] and target_entropies [N]; got {tuple(z.shape)} and {tuple(h.shape)}")
    lo = torch.full_like(h, math.log(bounds[0]))
    hi = torch.full_like(h, math.log(bounds[1]))
    f_lo, f_hi = entropy(z, lo.exp()), entropy(z, hi.exp())
    mid = 0.5 * (lo + hi)
    done = torch.zeros_like(h, dtype=torch.bool)
    result = torch.empty_like(h)
    below, above = h <= f_lo + tol, h >= f_hi - tol
    result[below], result[above] = lo[below], hi[above]
    done |= below | above
    for _ in range(max_iter):
        if bool(done.all()):
            break
        mid = 0.5 * (lo + hi)
        f_mid = entropy(z, mid.exp())
        hit = (f_mid - h).abs() <= tol
        newly = hit & ~done
        result[newly] = mid[newly]
        done |= hit
        go_up = f_mid < h
        lo = torch.where(go_up, mid, lo)
        hi = torch.where(go_up, hi, mid)
    result[~done] = mid[~done]
    return result.exp()


# ----------------------------------------------------------------------------------------------------------------
# teacher-forced streaming over held-out texts
# ----------------------------------------------------------------------------------------------------------------
def _tf_batches(model_base, model_target, texts, batch_size: int, max_tokens: int | None,
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


@dataclass
class TemperatureMatch:
    """Result of the entropy-matched temperature control.

    Fields: T (T*), target_entropy (mean teacher-forced entropy of the target), base_entropy (base at T = 1),
    matched_entropy (base at T*), n_positions, tol, temperatures/curve (base mean entropy on a log-spaced T grid,
    for the H(T) figure), model_base/model_target (names)."""

    T: float
    target_entropy: float
    base_entropy: float
    matched_entropy: float
    n_positions: int
    tol: float
    temperatures: list = field(default_factory=list)
    curve: list = field(default_factory=list)
    model_base: str = ""
    model_target: str = ""

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame({"temperature": self.temperatures, "base_entropy": self.curve})

    def save(self, path) -> Path:
        from interplab.core.io import write_json

        path = Path(path)
        write_json(path / "temperature_match.json", asdict(self))
        return path

    @classmethod
    def load(cls, path) -> "TemperatureMatch":
        from interplab.core.io import read_json

        return cls(**read_json(Path(path) / "temperature_match.json"))


def match_temperature(model_base, model_target, texts: Sequence[str], *, batch_size: int = 16,
                      max_tokens: int | None = None, bounds=(1e-2, 1e2), tol: float = 1e-4,
                      cache_bytes: int = 2 * 2**30, curve_points: int = 41) -> TemperatureMatch:
    """Entropy-matched temperature with details. Base logits are kept on the CPU (float32) when they fit in
    `cache_bytes`; otherwise every bisection step re-runs the base model over the texts (slower, O(batch) memory)."""
    chunks: list[torch.Tensor] | None = []
    h_sum, n, size = 0.0, 0, 0
    for zb, zt, _ in _tf_batches(model_base, model_target, texts, batch_size, max_tokens):
        h_sum += float(entropy(zt).sum())
        n += zb.shape[0]
        if chunks is not None:
            size += zb.numel() * 4
            chunks = chunks + [zb.cpu()] if size <= cache_bytes else None
    if n == 0:
        raise InputError("the texts produced no teacher-forced positions (every text needs >= 2 tokens)")
    h_target = h_sum / n

    if chunks is not None:
        def mean_h(T: float) -> float:
            return sum(float(entropy(c, T).sum()) for c in chunks) / n
    else:
        def mean_h(T: float) -> float:
            tot = 0.0
            for zb, _, _ in _tf_batches(model_base, None, texts, batch_size, max_tokens):
                tot += float(entropy(zb, T).sum())
            return tot / n

    T, h_matched, _ = _bisect_log_t(mean_h, h_target, bounds, tol)
    temps = np.exp(np.linspace(math.log(bounds[0]), math.log(bounds[1]), curve_points)).tolist() \
        if chunks is not None else []
    curve = [mean_h(t) for t in temps]
    return TemperatureMatch(T=T, target_entropy=h_target, base_entropy=mean_h(1.0), matched_entropy=h_matched,
                            n_positions=n, tol=tol, temperatures=temps, curve=curve,
                            model_base=str(getattr(model_base, "name", "")),
                            model_target=str(getattr(model_target, "name", "")))


def entropy_matched_temperature(model_base, model_target, texts: Sequence[str], *, batch_size: int = 16,
                                max_tokens: int | None = None, bounds=(1e-2, 1e2), tol: float = 1e-4) -> float:
    """T* such that the base model's mean teacher-forced entropy at temperature T* equals the target's mean entropy
    at T = 1 (to `tol` nats), by bisection on log T. See `match_temperature` for the details object."""
    return match_temperature(model_base, model_target, texts, batch_size=batch_size, max_tokens=max_tokens,
                             bounds=bounds, tol=tol, curve_points=0).T


@dataclass
class PerPositionTemperature:
    """Per-position matched temperatures T_t (one per teacher-forced position) with the target entropies."""

    T: np.ndarray
    target_entropy: np.ndarray
    base_entropy: np.ndarray

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame({"T": self.T, "target_entropy": self.target_entropy, "base_entropy": self.base_entropy})

    def summary(self) -> dict[str, float]:
        logt = np.log(self.T)
        return {"T_geomean": float(np.exp(logt.mean())), "T_median": float(np.median(self.T)),
                "T_p10": float(np.quantile(self.T, 0.1)), "T_p90": float(np.quantile(self.T, 0.9)),
                "n_positions": int(self.T.size)}

    def save(self, path) -> Path:
        from interplab.core.io import write_arrays

        return write_arrays(Path(path) / "per_position_temperature.safetensors",
                            {"T": self.T, "target_entropy": self.target_entropy, "base_entropy": self.base_entropy})

    @classmethod
    def load(cls, path) -> "PerPositionTemperature":
        from interplab.core.io import read_arrays

        a = read_arrays(Path(path) / "per_position_temperature.safetensors")
        return cls(a["T"], a["target_entropy"], a["base_entropy"])


def per_position_matched_temperature(model_base, model_target, texts: Sequence[str], *, batch_size: int = 16,
                                     max_tokens: int | None = None, bounds=(1e-2, 1e2),
                                     tol: float = 1e-4) -> PerPositionTemperature:
    """The stronger control: T_t for every teacher-forced position, matching the target's entropy there."""
    Ts, hts, hbs = [], [], []
    for zb, zt, _ in _tf_batches(model_base, model_target, texts, batch_size, max_tokens):
        ht = entropy(zt)
        Ts.append(per_position_temperature_from_logits(zb, ht, bounds=bounds, tol=tol).cpu())
        hts.append(ht.cpu())
        hbs.append(entropy(zb).cpu())
    if not Ts:
        raise InputError("the texts produced no teacher-forced positions")
    return PerPositionTemperature(torch.cat(Ts).numpy(), torch.cat(hts).numpy(), torch.cat(hbs).numpy())


# ----------------------------------------------------------------------------------------------------------------
# ranks
# ----------------------------------------------------------------------------------------------------------------
def token_ranks(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Rank (1 = top) of token ids[...] under logits[..., V]; ties broken by lower token id first."""
    if logits.shape[:-1] != ids.shape:
        raise ShapeError(f"ids shape {tuple(ids.shape)} must equal logits.shape[:-1] {tuple(logits.shape[:-1])}")
    zv = logits.gather(-1, ids[..., None].long())
    vocab = torch.arange(logits.shape[-1], device=logits.device)
    higher = (logits > zv).sum(-1)
    tied_before = ((logits == zv) & (vocab < ids[..., None])).sum(-1)
    return 1 + higher + tied_before


def full_ranks(logits: torch.Tensor) -> torch.Tensor:
    """Ranks of every token: [..., V] long, 1 = argmax, ties broken by lower token id first."""
    order = torch.sort(logits, dim=-1, descending=True, stable=True).indices
    ranks = torch.empty_like(order)
    ar = torch.arange(1, logits.shape[-1] + 1, device=logits.device).expand_as(order)
    ranks.scatter_(-1, order, ar)
    return ranks


def kendall_tau_b(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Kendall tau-b between a[..., n] and b[..., n] along the last axis (scipy.stats.kendalltau's default)."""
    if a.shape != b.shape:
        raise ShapeError(f"shapes differ: {tuple(a.shape)} vs {tuple(b.shape)}")
    n = a.shape[-1]
    sa = torch.sign(a[..., :, None] - a[..., None, :])
    sb = torch.sign(b[..., :, None] - b[..., None, :])
    iu = torch.triu_indices(n, n, 1, device=a.device)
    sa, sb = sa[..., iu[0], iu[1]], sb[..., iu[0], iu[1]]
    num = (sa * sb).sum(-1).to(torch.float64)
    den = ((sa != 0).sum(-1).to(torch.float64) * (sb != 0).sum(-1).to(torch.float64)).sqrt()
    return torch.where(den > 0, num / den.clamp_min(1e-300), torch.full_like(num, float("nan")))


def topk_kendall_tau(z_ref: torch.Tensor, z_other: torch.Tensor, k: int = 50) -> torch.Tensor:
    """Per-position Kendall tau-b between two logit vectors restricted to z_ref's top-k tokens: [N]."""
    k = min(k, z_ref.shape[-1])
    idx = z_ref.topk(k, dim=-1).indices
    return kendall_tau_b(z_ref.gather(-1, idx), z_other.gather(-1, idx))


def rank_bins(ranks) -> dict[str, int]:
    """Counts of ranks in the bins {1, 2-10, 11-200, >200}."""
    r = torch.as_tensor(ranks).flatten()
    return {"1": int((r == 1).sum()), "2-10": int(((r >= 2) & (r <= 10)).sum()),
            "11-200": int(((r >= 11) & (r <= 200)).sum()), ">200": int((r > 200).sum())}


class TeacherForcedComparison:
    """Streaming statistics of paired teacher-forced logits (base vs target) over positions, float64 on the CPU:
    entropies, NLL of the true next token, top-1 agreement, Kendall tau on top-k, and per-token rank-change and
    log-softmax-change sums (mean and variance across contexts). Memory O(V)."""

    def __init__(self, vocab: int, tau_k: int = 50, chunk: int = 256):
        self.V, self.tau_k, self.chunk = int(vocab), int(tau_k), int(chunk)
        self.n = 0
        self.sums = {k: 0.0 for k in ("h_base", "h_target", "nll_base", "nll_target", "top1", "tau_base",
                                       "tau_target")}
        self.dr_sum = torch.zeros(self.V, dtype=torch.float64)
        self.dr_sq = torch.zeros(self.V, dtype=torch.float64)
        self.dl_sum = torch.zeros(self.V, dtype=torch.float64)

    def update(self, zb: torch.Tensor, zt: torch.Tensor, nxt: torch.Tensor | None = None) -> None:
        if zb.shape != zt.shape or zb.ndim != 2 or zb.shape[1] != self.V:
            raise ShapeError(f"paired logits must both be [N, {self.V}]; got {tuple(zb.shape)}, {tuple(zt.shape)}")
        for s in range(0, zb.shape[0], self.chunk):
            a, b = zb[s:s + self.chunk].to(torch.float64), zt[s:s + self.chunk].to(torch.float64)
            la, lb = torch.log_softmax(a, -1), torch.log_softmax(b, -1)
            self.n += a.shape[0]
            S = self.sums
            S["h_base"] += float(-(la.exp() * la).sum())
            S["h_target"] += float(-(lb.exp() * lb).sum())
            if nxt is not None:
                y = nxt[s:s + self.chunk].to(a.device)[:, None]
                S["nll_base"] += float(-la.gather(-1, y).sum())
                S["nll_target"] += float(-lb.gather(-1, y).sum())
            S["top1"] += float((a.argmax(-1) == b.argmax(-1)).sum())
            S["tau_base"] += float(topk_kendall_tau(a, b, self.tau_k).nan_to_num(0.0).sum())
            S["tau_target"] += float(topk_kendall_tau(b, a, self.tau_k).nan_to_num(0.0).sum())
            dr = (full_ranks(a) - full_ranks(b)).to(torch.float64)
            self.dr_sum += dr.sum(0).cpu()
            self.dr_sq += (dr * dr).sum(0).cpu()
            self.dl_sum += (lb - la).sum(0).cpu()

    def summary(self) -> dict[str, float]:
        if self.n == 0:
            raise DataError("no positions were accumulated")
        n = self.n
        out = {k: v / n for k, v in self.sums.items()}
        out["top1_agreement"] = out.pop("top1")
        out["n_positions"] = n
        std = self.dr_std()
        out["rank_change_std_mean"] = float(std.mean())
        out["rank_change_var_mean"] = float((std ** 2).mean())
        return out

    def dr_mean(self) -> torch.Tensor:
        return self.dr_sum / max(self.n, 1)

    def dr_std(self) -> torch.Tensor:
        n = max(self.n, 1)
        var = (self.dr_sq / n - self.dr_mean() ** 2).clamp_min(0.0)
        return var.sqrt()

    def dl_mean(self) -> torch.Tensor:
        return self.dl_sum / max(self.n, 1)


def compare_teacher_forced(model_base, model_target, texts: Sequence[str], *, batch_size: int = 16,
                           max_tokens: int | None = None, tau_k: int = 50) -> TeacherForcedComparison:
    """Run both models teacher-forced over `texts` and accumulate a TeacherForcedComparison."""
    acc = TeacherForcedComparison(model_base.d_vocab, tau_k)
    for zb, zt, nxt in _tf_batches(model_base, model_target, texts, batch_size, max_tokens):
        acc.update(zb.cpu(), zt.cpu(), nxt.cpu())
    if acc.n == 0:
        raise InputError("the texts produced no teacher-forced positions (every text needs >= 2 tokens)")
    return acc


def static_delta(comparison: TeacherForcedComparison, top_k: int = 500) -> torch.Tensor:
    """Static reweighting vector delta [V]: mean log-softmax change (target - base) on the top-K tokens by mean rank
    change (most promoted by the target), 0 elsewhere."""
    if top_k < 1:
        raise ConfigError(f"top_k must be >= 1, got {top_k}")
    k = min(top_k, comparison.V)
    idx = comparison.dr_mean().topk(k).indices
    delta = torch.zeros(comparison.V, dtype=torch.float32)
    delta[idx] = comparison.dl_mean()[idx].float()
    return delta


# ----------------------------------------------------------------------------------------------------------------
# generation helpers
# ----------------------------------------------------------------------------------------------------------------
def context_prompts(model, texts: Sequence[str], context_tokens: int = 32, *, per_text: int = 1) -> list[list[int]]:
    """Prompts of exactly `context_tokens` token ids from held-out texts: the first window of each text and, with
    `per_text` > 1, up to that many consecutive non-overlapping windows (a later window keeps the text's leading BOS
    when the tokenizer adds one, followed by the next context_tokens - 1 tokens), ordered so that every text's first
    window comes before any second window. Texts that are too short are skipped; InputError when none is left."""
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
    out = [w for _, _, w in sorted(found, key=lambda x: (x[0], x[1]))]  # every text's first window comes first
    if not out:
        raise InputError(f"no text has {context_tokens} tokens; pass longer held-out texts or lower context_tokens")
    return out


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
                           temperature=temperature, seed=None if seed is None else seed + i,
                           stop_at_eos=not pin_length, return_logits=False)
        toks.extend(g.new_tokens)
        texts.extend(g.text)
    return toks, texts


# ----------------------------------------------------------------------------------------------------------------
# logit lens
# ----------------------------------------------------------------------------------------------------------------
def final_norm_module(model) -> torch.nn.Module:
    """The HF final norm module of a LabModel's hf_model (Llama/Qwen2/Mistral: model.norm; GPT-2: transformer.ln_f)."""
    hf = model.hf_model
    for path in ("model.norm", "transformer.ln_f", "model.final_layernorm", "gpt_neox.final_layer_norm",
                 "model.decoder.final_layer_norm"):
        mod = hf
        try:
            for part in path.split("."):
                mod = getattr(mod, part)
            return mod
        except AttributeError:
            continue
    raise InputError(f"could not find the final norm of {type(hf).__name__}; supported: Llama/Qwen2/Mistral/GPT-2 "
                     "style models")


def unembed(model, x: torch.Tensor) -> torch.Tensor:
    """x [..., d] (final-norm output) -> logits [..., V] through the HF output embedding (W_U and b_U if any)."""
    head = model.hf_model.get_output_embeddings()
    with torch.no_grad():
        return head(x.to(head.weight.dtype).to(head.weight.device))


def logit_lens(model, resid: torch.Tensor) -> torch.Tensor:
    """ln_final(resid) W_U + b_U with the model's own final norm (raw HF weights)."""
    norm = final_norm_module(model)
    with torch.no_grad():
        return unembed(model, norm(resid.to(next(norm.parameters()).device)))


# ----------------------------------------------------------------------------------------------------------------
# rank reordering
# ----------------------------------------------------------------------------------------------------------------
@dataclass
class RankReorderingConfig:
    """Fields: context_tokens (prompt length taken from each held-out text), max_new_tokens (greedy tokens the
    target generates), tau_k (top-k set for Kendall tau), lens_layers (how many final layers the logit lens scans),
    lens_k (top-k threshold for "entered"), static_k (K for the static delta), batch_size, max_tokens (teacher-forcing
    truncation), prompts_per_text / max_prompts (context windows per prompt text, cap on prompts),
    model_base/model_target (names)."""

    context_tokens: int = 32
    max_new_tokens: int = 96
    tau_k: int = 50
    lens_layers: int = 5
    lens_k: int = 10
    static_k: int = 500
    batch_size: int = 16
    max_tokens: int | None = None
    prompts_per_text: int = 1
    max_prompts: int | None = None
    model_base: str = ""
    model_target: str = ""


@dataclass
class RankReorderingResult:
    """Rank reordering of a target (hyperfitted) model relative to its base.

    summary: override_rate, top1_agreement (teacher-forced), tau_base/tau_target (Kendall tau-b on the base's /
        target's top-k), h_base/h_target (mean entropy), nll_base/nll_target, rank_change_std_mean / _var_mean
        (context dependence), n_steps, frac_rank_gt10_of_overrides, frac_rank_gt200_of_overrides.
    histogram: counts over RANK_BINS of the base rank of each token the target chose greedily.
    base_ranks / step_index / chosen: per generated step (flattened over prompts).
    dr_mean / dr_std / dl_mean: per-token mean and std of the rank change and mean log-softmax change ([V]).
    lens_entry: for every overriding step, the first of the last `lens_layers` layers (absolute index) at which the
        chosen token is in the target's logit-lens top-`lens_k` (-1: never before the output).
    generations: the target's greedy generations (token ids), for the token view."""

    config: RankReorderingConfig
    summary: dict
    histogram: dict
    base_ranks: np.ndarray
    step_index: np.ndarray
    chosen: np.ndarray
    dr_mean: np.ndarray
    dr_std: np.ndarray
    dl_mean: np.ndarray
    lens_entry: np.ndarray
    generations: list = field(default_factory=list)

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame([{"metric": k, "value": v} for k, v in self.summary.items()])

    def histogram_frame(self):
        import pandas as pd

        tot = max(sum(self.histogram.values()), 1)
        return pd.DataFrame({"bin": list(RANK_BINS), "count": [self.histogram[b] for b in RANK_BINS],
                             "fraction": [self.histogram[b] / tot for b in RANK_BINS]})

    def token_frame(self, tokenizer=None):
        """Per-token context dependence (mean and std of the rank change), for the scatter figure."""
        import pandas as pd

        df = pd.DataFrame({"token_id": np.arange(self.dr_mean.size), "dr_mean": self.dr_mean, "dr_std": self.dr_std,
                           "dl_mean": self.dl_mean})
        if tokenizer is not None:
            df["token"] = [tokenizer.convert_ids_to_tokens(int(i)) for i in df["token_id"]]
        return df

    def save(self, path) -> Path:
        from interplab.core.io import write_arrays, write_json

        path = Path(path)
        write_json(path / "rank_reordering.json", {"config": asdict(self.config), "summary": self.summary,
                                                   "histogram": self.histogram, "generations": self.generations})
        write_arrays(path / "rank_reordering.safetensors", {
            k: getattr(self, k) for k in ("base_ranks", "step_index", "chosen", "dr_mean", "dr_std", "dl_mean",
                                          "lens_entry")})
        return path

    @classmethod
    def load(cls, path) -> "RankReorderingResult":
        from interplab.core.io import read_arrays, read_json

        path = Path(path)
        if not (path / "rank_reordering.json").exists():
            raise DataError(f"{path} has no rank_reordering.json")
        meta = read_json(path / "rank_reordering.json")
        arr = read_arrays(path / "rank_reordering.safetensors")
        return cls(RankReorderingConfig(**meta["config"]), meta["summary"], meta["histogram"], arr["base_ranks"],
                   arr["step_index"], arr["chosen"], arr["dr_mean"], arr["dr_std"], arr["dl_mean"], arr["lens_entry"],
                   meta.get("generations", []))


def rank_reordering(model_base, model_target, prompts: Sequence[str], *, texts: Sequence[str] | None = None,
                    config: RankReorderingConfig | None = None, **overrides) -> RankReorderingResult:
    """Rank reordering analyses (a)-(e) of spec §2.3.

    `prompts` are held-out texts: their first `context_tokens` tokens seed the target's greedy generations (pinned
    to `max_new_tokens` by suppressing EOS, so base ranks and logit-lens ranks are taken with EOS excluded too); the
    teacher-forced statistics use `texts` (default: the full prompts)."""
    cfg = config or RankReorderingConfig()
    for k, v in overrides.items():
        if not hasattr(cfg, k):
            raise ConfigError(f"unknown RankReorderingConfig field {k!r}")
        setattr(cfg, k, v)
    cfg.model_base = str(getattr(model_base, "name", ""))
    cfg.model_target = str(getattr(model_target, "name", ""))
    # (a, c, d) teacher-forced
    comp = compare_teacher_forced(model_base, model_target, list(texts if texts is not None else prompts),
                                  batch_size=cfg.batch_size, max_tokens=cfg.max_tokens, tau_k=cfg.tau_k)
    summary = comp.summary()
    # (b) along the target's greedy generations
    ctx = context_prompts(model_target, prompts, cfg.context_tokens, per_text=cfg.prompts_per_text)
    ctx = ctx[:cfg.max_prompts] if cfg.max_prompts else ctx
    gens, _ = generate_continuations(model_target, ctx, max_new_tokens=cfg.max_new_tokens,
                                     batch_size=cfg.batch_size)
    L = model_target.n_layers
    lens_layers = list(range(max(0, L - cfg.lens_layers), L))
    eos = getattr(model_base, "eos_token_id", None)
    ranks, steps, chosen, entries = [], [], [], []
    for i in range(0, len(ctx), cfg.batch_size):
        seqs = [c + g for c, g in zip(ctx[i:i + cfg.batch_size], gens[i:i + cfg.batch_size])]
        P = len(ctx[0])
        n_new = cfg.max_new_tokens
        with torch.no_grad():
            out_b = model_base.run(seqs, logits=True)
            out_t = model_target.run(seqs, logits=False, capture=[f"resid_post.{l}" for l in lens_layers])
        # every sequence has the same length (fixed context, pinned generation), so no padding here
        zb = out_b.logits[:, P - 1:P - 1 + n_new].float()
        if eos is not None:  # generations were pinned by suppressing EOS: rank among the tokens that could be chosen
            zb[..., eos] = float("-inf")
        y = out_b.batch.input_ids[:, P:P + n_new]
        r = token_ranks(zb, y)
        ranks.append(r.flatten().cpu())
        steps.append(torch.arange(n_new).expand_as(r).flatten())
        chosen.append(y.flatten().cpu())
        over = r > 1
        entry = torch.full_like(r, -1)
        for l in reversed(lens_layers):  # earliest layer wins: scan from the last one down
            h = out_t.cache[f"resid_post.{l}"][:, P - 1:P - 1 + n_new]
            zl = logit_lens(model_target, h).float()
            if eos is not None:
                zl[..., eos] = float("-inf")
            rl = token_ranks(zl, y)
            entry = torch.where(rl <= cfg.lens_k, torch.full_like(entry, l), entry)
        entries.append(entry[over].cpu())
    base_ranks = torch.cat(ranks)
    hist = rank_bins(base_ranks)
    n_steps = int(base_ranks.numel())
    n_over = int((base_ranks > 1).sum())
    summary.update({
        "override_rate": n_over / max(n_steps, 1), "n_steps": n_steps,
        "frac_rank_gt10_of_overrides": float((base_ranks > 10).sum()) / max(n_over, 1),
        "frac_rank_gt200_of_overrides": float((base_ranks > 200).sum()) / max(n_over, 1),
    })
    return RankReorderingResult(cfg, summary, hist, base_ranks.numpy(), torch.cat(steps).numpy(),
                                torch.cat(chosen).numpy(), comp.dr_mean().numpy(), comp.dr_std().numpy(),
                                comp.dl_mean().numpy(), torch.cat(entries).numpy(), [list(g) for g in gens])
