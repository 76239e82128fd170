"""A CRH validation organism built by construction: a 2-layer Llama checkpoint whose weights are written by hand so
that (a) concept difference vectors lie on a known cylinder (axis u, normal plane (e1, e2)) at `resid_post.0`, and
(b) a concept detector reads the residual at that site with a known sector map (spec crh.md §2.3; issue 16).

Language (word-level, ids after the six specials): neutral prompt words w0..w15, per-sample "without concept"
endings n0..n{S-1} and "with concept" endings k0..k{S-1}, the answer words `ok` (normal) and `concept` (the word the
judge looks for). A pair is (`w_a n_j`, `w_a k_j`).

Residual stream (d_model 64): ONE, PAD (a constant 8 that pins every RMSNorm scale near 1), DET (the detector's
output), then a random orthonormal (u, e1, e2) inside the remaining dims (a new draw per seed), and a small random
identity for every word in the rest.

- Azimuths φ_j are evenly spread (jittered, shuffled) around the circle.
- Embedding of k_j = identity + α_j·u + ρ_j(cos φ_j·e1 + sin φ_j·e2): the diff k_j − n_j is a point on the cylinder.
  n_j, w_a, `ok`, `concept` have no component on (u, e1, e2).
- Layer 0 is the identity (attention and MLP zero), so `resid_post.0` at the last token is that token's embedding
  plus whatever steering adds there.
- Layer 1's MLP is the detector. Gated neuron: silu(s·⟨x̂, e_ψ⟩)·⟨x̂, u⟩ with e_ψ = cos ψ·e1 + sin ψ·e2 and a
  steep s, so its output is ≈ s·‖Px̂‖·max(0, cos(β − ψ))·⟨x̂, u⟩ (x̂ the RMS-normalised residual, P the plane
  projector, β the in-plane angle). Written to DET with weight κ/s. Attention is zero.
- lm_head: logit(`ok`) = ONE, logit(`concept`) = DET, everything else −5. So the concept is emitted iff
  κ·⟨x̂, u⟩·‖Px̂‖·g(β) > 1 with the planted sector map **g(β) = max(0, cos(β − ψ))** (centre ψ).
- `sector_blind=True` (the negative control): the gate reads the constant ONE dim instead of e_ψ, so the detector
  is κ'·⟨x̂, u⟩, with g ≡ 1: the same cylinder geometry, no sector mechanism.
RoPE theta is irrelevant (attention is zero). Deterministic given the spec.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from interplab.core.errors import ConfigError, DataError

D_MODEL = 64
SPECIALS = 6
ONE, PAD, DET = 0, 1, 2
FREE0 = 3                      # first dim not reserved
PAD_VALUE = 8.0
N_WORDS = 16
PLANTED_TRUTH_FILE = "planted_truth.json"


@dataclass
class PlantedCrhSpec:
    """What is planted.

    n_samples: number of concept pairs (k_j / n_j endings).
    seed: draws the (u, e1, e2) frame, ψ, and the per-sample α_j, ρ_j, φ_j.
    alpha_range: α_j ~ U(alpha_range) (height along the axis).
    rho_range: ρ_j ~ U(rho_range) (radius in the normal plane).
    kappa: detector gain (the concept wins when κ·⟨x̂,u⟩·‖Px̂‖·g(β) > 1).
    steepness: s of the gate (silu(s z) ≈ s·max(0, z) for s·|z| ≫ 1).
    identity_scale: norm of the random identity of every word (noise off the cylinder).
    sector_blind: negative control, g ≡ 1 (the detector reads only the axis).
    """

    n_samples: int = 48
    seed: int = 0
    alpha_range: tuple[float, float] = (1.0, 3.0)
    rho_range: tuple[float, float] = (1.0, 2.0)
    kappa: float = 0.5
    steepness: float = 40.0
    identity_scale: float = 0.15
    sector_blind: bool = False

    def validate(self) -> "PlantedCrhSpec":
        if self.n_samples < 4:
            raise ConfigError(f"n_samples must be ≥ 4, got {self.n_samples}")
        if not (0 < self.alpha_range[0] <= self.alpha_range[1]) or not (0 < self.rho_range[0] <= self.rho_range[1]):
            raise ConfigError("alpha_range and rho_range must be positive (lo, hi) pairs")
        if self.kappa <= 0 or self.steepness <= 0:
            raise ConfigError("kappa and steepness must be positive")
        return self


def words(n_samples: int) -> list[str]:
    return ([f"w{i}" for i in range(N_WORDS)] + [f"n{j}" for j in range(n_samples)]
            + [f"k{j}" for j in range(n_samples)] + ["ok", "concept"])


def planted_geometry(spec: PlantedCrhSpec) -> dict:
    """The planted frame and per-sample cylinder coordinates (numpy, float64)."""
    rng = np.random.default_rng(spec.seed)
    q, _ = np.linalg.qr(rng.standard_normal((D_MODEL - FREE0, 3)))
    frame = np.zeros((D_MODEL, 3))
    frame[FREE0:] = q
    S = spec.n_samples
    return {"axis": frame[:, 0], "e1": frame[:, 1], "e2": frame[:, 2],
            "psi": float(rng.uniform(-math.pi, math.pi)),
            "alpha": rng.uniform(*spec.alpha_range, S), "rho": rng.uniform(*spec.rho_range, S),
            # azimuths spread evenly around the cylinder (jittered, shuffled): the diffmean axis is then not tilted
            # by a chance in-plane mean of the sample, which the spec's axis estimator cannot tell from the axis
            "phi": rng.permutation(2 * math.pi * (np.arange(S) + rng.uniform(-0.4, 0.4, S)) / S - math.pi)}


def planted_g(beta) -> np.ndarray:
    """The planted sector map g(β − ψ) = max(0, cos(β − ψ)) (pass β − ψ, radians)."""
    return np.maximum(0.0, np.cos(np.asarray(beta, np.float64)))


def _embedding(spec: PlantedCrhSpec, geo: dict, vocab: int) -> torch.Tensor:
    rng = np.random.default_rng(spec.seed + 10_000)
    frame = np.stack([geo["axis"], geo["e1"], geo["e2"]], 1)
    W = np.zeros((vocab, D_MODEL))
    ident = rng.standard_normal((vocab, D_MODEL))
    ident[:, :FREE0] = 0.0
    ident -= (ident @ frame) @ frame.T                         # identities live off the cylinder's 3-D span
    ident *= spec.identity_scale / np.linalg.norm(ident, axis=1, keepdims=True)
    W += ident
    W[:, ONE], W[:, PAD] = 1.0, PAD_VALUE
    for j in range(spec.n_samples):
        t = SPECIALS + words(spec.n_samples).index(f"k{j}")
        W[t] += geo["alpha"][j] * geo["axis"] + geo["rho"][j] * (math.cos(geo["phi"][j]) * geo["e1"]
                                                                 + math.sin(geo["phi"][j]) * geo["e2"])
    return torch.tensor(W, dtype=torch.float32)


def build_planted_crh_organism(path, spec: PlantedCrhSpec | None = None) -> Path:
    """Write the checkpoint (config.json, model.safetensors, tokenizer) and `planted_truth.json` (axis, plane,
    sector centre ψ, the sector map's formula, per-sample α/ρ/φ) to `path`; returns the path."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from interplab.data.tokenizers import build_word_tokenizer

    spec = (spec or PlantedCrhSpec()).validate()
    geo = planted_geometry(spec)
    vocab_words = words(spec.n_samples)
    vocab = SPECIALS + len(vocab_words)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=D_MODEL, intermediate_size=4, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=4, head_dim=16, max_position_embeddings=64,
                      rms_norm_eps=1e-6, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    model = LlamaForCausalLM(cfg)
    s, k = spec.steepness, spec.kappa
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        model.model.embed_tokens.weight.copy_(_embedding(spec, geo, vocab))
        for block in model.model.layers:
            block.input_layernorm.weight.fill_(1.0)
            block.post_attention_layernorm.weight.fill_(1.0)
        mlp = model.model.layers[1].mlp
        e_psi = math.cos(geo["psi"]) * geo["e1"] + math.sin(geo["psi"]) * geo["e2"]
        if spec.sector_blind:
            gate = np.zeros(D_MODEL)
            gate[ONE] = s                       # x̂[ONE] ≈ 1: the gate is always open, g ≡ 1
        else:
            gate = s * e_psi
        mlp.gate_proj.weight[0] = torch.tensor(gate, dtype=torch.float32)
        mlp.up_proj.weight[0] = torch.tensor(geo["axis"], dtype=torch.float32)
        mlp.down_proj.weight[DET, 0] = k / s
        model.model.norm.weight.fill_(1.0)
        head = torch.zeros(vocab, D_MODEL)
        head[:, ONE] = -5.0
        ok, cc = SPECIALS + vocab_words.index("ok"), SPECIALS + vocab_words.index("concept")
        head[ok, ONE] = 1.0
        head[cc, ONE], head[cc, DET] = 0.0, 1.0
        model.lm_head.weight.copy_(head)
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(path))
    build_word_tokenizer(vocab_words).save_pretrained(str(path))
    truth = {"kind": "crh planted cylinder + sector detector (by construction)", "spec": asdict(spec),
             "site": "resid_post.0", "concept_word": "concept",
             "sector_map": "none (g = 1)" if spec.sector_blind else "g(beta) = max(0, cos(beta - psi))",
             "axis": geo["axis"].tolist(), "e1": geo["e1"].tolist(), "e2": geo["e2"].tolist(), "psi": geo["psi"],
             "alpha": geo["alpha"].tolist(), "rho": geo["rho"].tolist(), "phi": geo["phi"].tolist()}
    (path / PLANTED_TRUTH_FILE).write_text(json.dumps(truth, indent=1))
    return path


def load_planted_crh(path) -> dict:
    """The planted truth recorded next to a CRH validation checkpoint, arrays as numpy."""
    p = Path(path) / PLANTED_TRUTH_FILE
    if not p.exists():
        raise DataError(f"{p} does not exist; build the organism with build_planted_crh_organism")
    t = json.loads(p.read_text())
    for key in ("axis", "e1", "e2", "alpha", "rho", "phi"):
        t[key] = np.asarray(t[key], np.float64)
    return t


def planted_crh_pairs(n_samples: int, seed: int = 0) -> tuple[list[tuple[str, str]], list[str]]:
    """(pairs [(without, with)], prompts) for the n_samples planted concept samples: pair j is (`w_a n_j`,
    `w_a k_j`) with a random neutral word w_a; prompt j (the steered one) is the without-concept text."""
    rng = np.random.default_rng(seed)
    a = rng.integers(N_WORDS, size=n_samples)
    pairs = [(f"w{a[j]} n{j}", f"w{a[j]} k{j}") for j in range(n_samples)]
    return pairs, [p[0] for p in pairs]
