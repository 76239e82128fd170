"""A Truth-Score validation organism built by construction: a 4-layer Llama checkpoint whose weights are written by
hand so that a designated set of attention heads, and only those, carry the verdict "the candidate answer is the
context's value" at the candidate token (spec truth_scores.md §8 test 2, planted at the model level; DESIGN.md
"Ground truth").

Language (word-level, ids after the six specials): context values c0..c7, query entities q0..q7, answer/candidate
values a0..a7. A fixed memory map M: q_e -> a_{M(e)} lives in the query token's embedding with an entity-dependent
strength m_e (the model's "parametric memory").

- Verification prompt (the Truth-Score set): `<bos> c_x q_e a_y`, label 1 iff y == x (the candidate is the
  context's value), 0 when y = M(e) (memory, the "hallucination") or another value. Probed at a_y.
- Conflict prompt (the gating task): `<bos> c_x q_e` with x != M(e); the next token is a_x (context) when the
  planted heads' summed copy outweighs m_e, else a_{M(e)} (memory).

Residual stream (d_model 64): ONE, PAD (a constant 8 that pins the RMSNorm scale near 1), the flags BOS / CTX / QRY /
CAND, identity blocks C (context value), A (candidate), E (entity), U (answer readout, what lm_head reads), VERDICT,
NO_MATCH and junk dims that only the decoy heads write and nothing reads.

- Planted head: query = CAND identity (A_k -> key C_k, weight beta) + QRY flag (-> CTX flag) + ONE (-> BOS flag, a
  sink at half strength). At a_y it attends to c_x iff x == y, else to <bos>; at q_e it always attends to c_x. Its
  value copies the CTX flag and the C identity; W_O writes the flag to VERDICT and the identity to U with weight
  context_weight / |planted heads|. So its z at a_y is (1, onehot x) on a match and 0 otherwise: linearly decodable.
- Decoy heads (every other head) attend to one kind of position by its flag and copy one token's identity (C, E, A,
  or U at the query), or the BOS sink, or C and A together (all the information, but equality is not linear), into
  junk dims. Each copies a token whose distribution does not depend on the label, so its Truth Score is at chance.
RoPE uses theta = 1e20 and the planted QK dims avoid the first rotary pair, so the hand-set scores do not depend on
position. The MLPs are zero. Everything is deterministic given the spec.
"""
from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from interplab.core.errors import ConfigError, DataError

N_VALUES = 8
N_ENTITIES = 8
D_MODEL = 64
D_HEAD = 16
SPECIALS = 6  # <pad> <bos> <eos> <unk> <|im_start|> <|im_end|> (build_word_tokenizer's order)
# residual layout
ONE, PAD, BOS_F, CTX_F, QRY_F, CAND_F = 0, 1, 2, 3, 4, 5
C0, A0, E0, U0 = 6, 6 + N_VALUES, 6 + 2 * N_VALUES, 6 + 3 * N_VALUES
VERDICT = U0 + N_VALUES
NO_MATCH = VERDICT + 1
JUNK0 = NO_MATCH + 1
PAD_VALUE = 8.0
# head dims used for query-key matching: skip rotary pair 0 (dims 0 and 8), the only fast-rotating one at theta 1e20
QK_ID = (1, 2, 3, 4, 5, 6, 7, 9)
QK_FLAG, QK_SINK = 10, 11
DECOY_KINDS = ("ctx", "query", "cand", "sink", "ctx+cand", "query-memory")
PLANTED_TRUTH_FILE = "planted_truth.json"


@dataclass
class PlantedTruthSpec:
    """What is planted.

    heads: the designated evidence heads as (layer, head).
    n_layers, n_heads: the architecture (d_model 64, d_head 16, MHA).
    beta: query weight of the hand-set attention (attention logit = beta/4 on a match, beta/8 on the <bos> sink).
    context_weight: total weight with which the planted heads copy the context value into U (split evenly).
    memory_strengths: m_e per entity (default linspace(0.6, 1.8, 8)): the conflict prompt follows the context when
        context_weight * (gate of the planted heads) > m_e, so the ungated context-following rate is 3/8.
    memory_seed: seed of the memory permutation M.
    """

    heads: list[tuple[int, int]] = field(default_factory=lambda: [(0, 5), (1, 2), (2, 6), (3, 1)])
    n_layers: int = 4
    n_heads: int = 8
    beta: float = 80.0
    context_weight: float = 1.0
    memory_strengths: list[float] = field(default_factory=lambda: np.linspace(0.6, 1.8, N_ENTITIES).tolist())
    memory_seed: int = 0

    def validate(self) -> "PlantedTruthSpec":
        self.heads = [tuple(int(v) for v in h) for h in self.heads]
        if not self.heads or len(set(self.heads)) != len(self.heads):
            raise ConfigError(f"heads must be a non-empty list of distinct (layer, head) pairs, got {self.heads}")
        bad = [h for h in self.heads if not (0 <= h[0] < self.n_layers and 0 <= h[1] < self.n_heads)]
        if bad:
            raise ConfigError(f"heads {bad} are outside the {self.n_layers} x {self.n_heads} model")
        if self.n_heads * D_HEAD > 4 * D_MODEL or self.n_heads < 2:
            raise ConfigError(f"n_heads must be in [2, {4 * D_MODEL // D_HEAD}], got {self.n_heads}")
        if len(self.memory_strengths) != N_ENTITIES or min(self.memory_strengths) <= 0:
            raise ConfigError(f"memory_strengths needs {N_ENTITIES} positive values")
        if self.beta <= 0 or self.context_weight <= 0:
            raise ConfigError("beta and context_weight must be positive")
        return self

    def memory_map(self) -> list[int]:
        """M: entity e -> value M[e] (a fixed permutation)."""
        return np.random.default_rng(self.memory_seed).permutation(N_VALUES).tolist()

    def planted_mask(self) -> np.ndarray:
        """[n_layers, n_heads] bool, True at the designated heads."""
        m = np.zeros((self.n_layers, self.n_heads), dtype=bool)
        for layer, head in self.heads:
            m[layer, head] = True
        return m


def words() -> list[str]:
    return ([f"c{i}" for i in range(N_VALUES)] + [f"q{i}" for i in range(N_ENTITIES)]
            + [f"a{i}" for i in range(N_VALUES)])


def _token_id(word: str) -> int:
    return SPECIALS + words().index(word)


def _embedding(spec: PlantedTruthSpec, vocab: int) -> torch.Tensor:
    W = torch.zeros(vocab, D_MODEL)
    W[:, ONE], W[:, PAD] = 1.0, PAD_VALUE
    W[1, BOS_F] = 1.0
    M = spec.memory_map()
    for i in range(N_VALUES):
        W[_token_id(f"c{i}"), CTX_F] = W[_token_id(f"c{i}"), C0 + i] = 1.0
        W[_token_id(f"a{i}"), CAND_F] = W[_token_id(f"a{i}"), A0 + i] = 1.0
    for e in range(N_ENTITIES):
        t = _token_id(f"q{e}")
        W[t, QRY_F] = W[t, E0 + e] = 1.0
        W[t, U0 + M[e]] = float(spec.memory_strengths[e])
    return W


def _planted_head(spec: PlantedTruthSpec):
    """(W_Q, W_K, W_V [d_head, d_model], W_O [d_model, d_head]) of a designated evidence head."""
    q, k, v = (torch.zeros(D_HEAD, D_MODEL) for _ in range(3))
    o = torch.zeros(D_MODEL, D_HEAD)
    for i, d in enumerate(QK_ID):
        q[d, A0 + i], k[d, C0 + i] = spec.beta, 1.0       # candidate a_i looks for context c_i
    q[QK_FLAG, QRY_F], k[QK_FLAG, CTX_F] = spec.beta, 1.0  # the query token always reads the context value
    q[QK_SINK, ONE], k[QK_SINK, BOS_F] = spec.beta / 2, 1.0  # otherwise: the <bos> sink
    c_h = spec.context_weight / len(spec.heads)
    v[0, CTX_F] = 1.0
    for i in range(N_VALUES):
        v[1 + i, C0 + i] = 1.0
        o[U0 + i, 1 + i] = c_h
    o[VERDICT, 0] = 1.0
    # on the <bos> sink write a NO_MATCH dim of the same norm as a match's VERDICT + U write, so the residual norm
    # (and so every later RMSNorm) does not depend on the verdict: no side channel into the decoy heads
    v[9, BOS_F] = 1.0
    o[NO_MATCH, 9] = float(np.sqrt(1.0 + c_h ** 2))
    return q, k, v, o


def _decoy_head(spec: PlantedTruthSpec, kind: str, gen: torch.Generator):
    """A head that attends to one kind of position and copies label-independent content into junk dims."""
    q, k, v = (torch.zeros(D_HEAD, D_MODEL) for _ in range(3))
    flags = {"ctx": [CTX_F], "query": [QRY_F], "cand": [CAND_F], "sink": [BOS_F], "ctx+cand": [CTX_F, CAND_F],
             "query-memory": [QRY_F]}[kind]
    q[QK_FLAG, ONE] = spec.beta
    for f in flags:
        k[QK_FLAG, f] = 1.0
    blocks = {"ctx": [C0], "query": [E0], "cand": [A0], "sink": [], "ctx+cand": [C0, A0], "query-memory": [U0]}[kind]
    rows = 0
    for b in blocks:
        for i in range(N_VALUES):
            v[rows, b + i] = 1.0
            rows += 1
    if not blocks:
        v[0, ONE] = 1.0
    n_junk = D_MODEL - JUNK0
    o = torch.zeros(D_MODEL, D_HEAD)
    o[JUNK0:] = 0.3 * torch.randn(n_junk, D_HEAD, generator=gen) / np.sqrt(D_HEAD)
    return q, k, v, o


def build_planted_truth_organism(path, spec: PlantedTruthSpec | None = None) -> Path:
    """Write the checkpoint (config.json, model.safetensors, tokenizer) and `planted_truth.json` (the spec, the
    memory map and every head's role) to `path`; returns the path. Deterministic given the spec."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from interplab.data.tokenizers import build_word_tokenizer

    spec = (spec or PlantedTruthSpec()).validate()
    vocab = SPECIALS + len(words()) + 2
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=D_MODEL, intermediate_size=8, num_hidden_layers=spec.n_layers,
                      num_attention_heads=spec.n_heads, num_key_value_heads=spec.n_heads, head_dim=D_HEAD,
                      max_position_embeddings=32, rms_norm_eps=1e-6, tie_word_embeddings=False,
                      rope_parameters={"rope_type": "default", "rope_theta": 1e20},
                      bos_token_id=1, eos_token_id=2, pad_token_id=0)
    model = LlamaForCausalLM(cfg)
    gen = torch.Generator().manual_seed(1234)
    roles = {}
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        model.model.embed_tokens.weight.copy_(_embedding(spec, vocab))
        for layer, block in enumerate(model.model.layers):
            block.input_layernorm.weight.fill_(1.0)
            block.post_attention_layernorm.weight.fill_(1.0)
            att, n_decoy = block.self_attn, 0
            for h in range(spec.n_heads):
                if (layer, h) in spec.heads:
                    ws, role = _planted_head(spec), "planted"
                else:
                    role = DECOY_KINDS[(n_decoy + layer) % len(DECOY_KINDS)]
                    ws, n_decoy = _decoy_head(spec, role, gen), n_decoy + 1
                sl = slice(h * D_HEAD, (h + 1) * D_HEAD)
                att.q_proj.weight[sl], att.k_proj.weight[sl], att.v_proj.weight[sl] = ws[0], ws[1], ws[2]
                att.o_proj.weight[:, sl] = ws[3]
                roles[f"{layer}.{h}"] = role
        model.model.norm.weight.fill_(1.0)
        head = torch.zeros(vocab, D_MODEL)
        head[:, ONE] = -5.0                       # non-answer tokens never win
        for i in range(N_VALUES):
            head[_token_id(f"a{i}"), ONE] = 0.0
            head[_token_id(f"a{i}"), U0 + i] = 10.0
        model.lm_head.weight.copy_(head)
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(path))
    build_word_tokenizer(words()).save_pretrained(str(path))
    truth = {"kind": "truth-scores planted evidence heads (by construction)", "spec": asdict(spec),
             "planted_heads": [list(h) for h in spec.heads], "memory_map": spec.memory_map(), "head_roles": roles}
    (path / PLANTED_TRUTH_FILE).write_text(json.dumps(truth, indent=1))
    return path


def load_planted_truth(path) -> dict:
    """The planted truth recorded next to a validation checkpoint (`planted_truth.json`)."""
    p = Path(path) / PLANTED_TRUTH_FILE
    if not p.exists():
        raise DataError(f"{p} does not exist; build the organism with build_planted_truth_organism")
    return json.loads(p.read_text())


def perturb_checkpoint(src, dst, *, scale: float = 0.05, seed: int = 0) -> Path:
    """A descendant of the checkpoint at `src`: every 2-D weight W gets W + scale * rms(W) * N(0, 1) noise (the
    norms' gains are kept), written to `dst` with the same config, tokenizer and planted truth."""
    from safetensors.torch import load_file, save_file

    src, dst = Path(src), Path(dst)
    if not (src / "model.safetensors").exists():
        raise DataError(f"{src} has no model.safetensors")
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst)
    sd = load_file(str(src / "model.safetensors"))
    gen = torch.Generator().manual_seed(int(seed))
    for name in sorted(sd):
        w = sd[name]
        if w.ndim == 2 and w.is_floating_point():
            rms = w.float().pow(2).mean().sqrt()
            sd[name] = (w + scale * rms * torch.randn(w.shape, generator=gen)).to(w.dtype).contiguous()
    save_file(sd, str(dst / "model.safetensors"), metadata={"format": "pt"})
    truth = load_planted_truth(dst)
    truth["descendant_of"] = {"source": src.name, "scale": scale, "seed": int(seed)}
    (dst / PLANTED_TRUTH_FILE).write_text(json.dumps(truth, indent=1))
    return dst


def planted_truth_items(n: int = 292, seed: int = 0, *, memory_map: Sequence[int] | None = None,
                        p_gold: float = 0.5, p_memory_negative: float = 0.5) -> list[dict]:
    """n verification items {"text": "c_x q_e a_y", "label", "evidence": [1], "candidate_kind"} (the tokenizer
    prepends <bos>, so c_x is token 1). Every prompt is a conflict (x != M(e)); negatives are a_{M(e)} (memory)
    with probability p_memory_negative, else a random value other than x."""
    M = list(memory_map) if memory_map is not None else PlantedTruthSpec().memory_map()
    rng = np.random.default_rng(seed)
    items = []
    for _ in range(n):
        e = int(rng.integers(N_ENTITIES))
        x = int(rng.choice([v for v in range(N_VALUES) if v != M[e]]))
        if rng.random() < p_gold:
            y, kind = x, "gold"
        elif rng.random() < p_memory_negative:
            y, kind = M[e], "memory"
        else:
            y, kind = int(rng.choice([v for v in range(N_VALUES) if v != x])), "random"
        items.append({"text": f"c{x} q{e} a{y}", "label": int(y == x), "evidence": [1], "candidate_kind": kind})
    return items


def planted_conflict_items(n: int = 128, seed: int = 1, *, memory_map: Sequence[int] | None = None) -> list[dict]:
    """n conflict prompts {"text": "c_x q_e", "context_value": "a_x", "memory_value": "a_M(e)", "query_entity"},
    entities cycled so each appears n/8 times (context-following moves in steps of one entity's share)."""
    M = list(memory_map) if memory_map is not None else PlantedTruthSpec().memory_map()
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        e = i % N_ENTITIES
        x = int(rng.choice([v for v in range(N_VALUES) if v != M[e]]))
        out.append({"text": f"c{x} q{e}", "context_value": f"a{x}", "memory_value": f"a{M[e]}",
                    "query_entity": f"q{e}"})
    return out
