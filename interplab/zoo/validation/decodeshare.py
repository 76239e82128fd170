"""A DecodeShare validation organism built by construction: a 2-layer Llama checkpoint whose weights are written by
hand so that every task's decoding depends on one shared, low-variance, decode-only subspace P (issue 16).

Tasks t = 0..3, values v = 0..5. Prompt `<bos> T_t x_v`; answer: four output tokens o{t}v{w}s{s}, s = 1..4, with
w_s = g_t(w_{s-1}) (w_0 = v, g_t(w) = (w + t + 1) mod 6), then <eos>.

- Embeddings: the task token carries its task one-hot; x_v carries X[v] and an IN flag; o{t}v{w}s{s} carries a
  task-specific value coordinate V[t, w] with amplitude a_t (TASK_AMPLITUDES: the task-specific directions) and the
  step code eps·√2·(cos θ_s, sin θ_s), θ_s = 45° + 90°·(s - 1), in P (2 dims shared by every task, variance
  eps² = 0.0625 each). Pooled over the four tasks a V direction has variance a_t²/24 (0.027, 0.034, 0.082, 0.107):
  P ranks below the top ten variance directions, so "shared" and "top-variance" differ by construction. Two task
  groups also sit below P, in the full pool and in every leave-one-task-out pool (a_t²/18 < eps² for t = 0, 1), so
  no rho cut (0.95) falls inside P's degenerate pair: a cut there would keep one arbitrary direction of P, chosen by
  the SVD's rounding, and the LOTO verdict would depend on the CPU (issue 24).
- Layer 0 has one head: from an IN token it attends to the task token and copies the task one-hot (so the prefill's
  first answer token knows its task); everywhere else it rests on <bos>, whose value is 0. All else is zero.
- lm_head: o{t}v{w}s{s} reads TASKCOPY[t] and X[g_t^-1(w)] (the first token, from the prefill), V[t, g_t^-1(w)]
  (the bigram of decoding) and, for s >= 2, the step s-1 readout from P (logit G·cos(θ_cur - θ_{s-1})), so the step code selects s = current + 1;
  <eos> reads the step-4 readout. Without P every step index ties and <eos> never wins: removing P on decode
  steps breaks every answer, while the prefill (which has no P) and the first answer token are untouched.
The prefill states (last prompt token) vary only in X, shared by the tasks, so a prefill-estimated shared subspace
is X, orthogonal to P.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from interplab.core.errors import ConfigError, DataError

N_TASKS, N_VALUES, N_STEPS = 4, 6, 4
D_MODEL, D_HEAD, N_HEADS = 48, 12, 4
SPECIALS = 6
ONE, PAD, BOS_F, TASK_F, IN_F = 0, 1, 2, 3, 4
TASKID0 = 5
X0 = TASKID0 + N_TASKS
TCOPY0 = X0 + N_VALUES
V0 = TCOPY0 + N_TASKS
P0 = V0 + N_TASKS * N_VALUES
PAD_VALUE = 0.0  # no constant padding dim: a large constant leaks into P under random projections
PLANTED_TRUTH_FILE = "planted_truth.json"
TASK_AMPLITUDES = (0.8, 0.9, 1.4, 1.6)  # see the module docstring for the ordering against eps these must keep


@dataclass
class PlantedDecodeSpec:
    """What is planted: eps (amplitude of the shared step code in P), gain (G, the readout gain of P), value_gain
    (weight of the task and value readouts), layer (the block after which P is read by the estimator; the code is
    written by the embedding, so any block output carries it)."""

    eps: float = 0.25
    gain: float = 20.0
    value_gain: float = 2.0
    beta: float = 80.0

    def validate(self) -> "PlantedDecodeSpec":
        if self.eps <= 0 or self.gain <= self.value_gain or self.beta <= 0:
            raise ConfigError("need eps > 0, gain > value_gain (so <eos> and the next step beat every wrong step) "
                              "and beta > 0")
        return self


def g(t: int, w: int) -> int:
    return (w + t + 1) % N_VALUES


def words() -> list[str]:
    out = [f"T{t}" for t in range(N_TASKS)] + [f"x{v}" for v in range(N_VALUES)]
    out += [f"o{t}v{w}s{s}" for t in range(N_TASKS) for w in range(N_VALUES) for s in range(1, N_STEPS + 1)]
    return out


def _tid(word: str) -> int:
    return SPECIALS + words().index(word)


def _theta(s: int) -> float:
    """Step s = 1..4 sits on a square (45°, 135°, 225°, 315°): over the four answer steps the two P coordinates are
    uncorrelated with equal variance, so both P directions are genuine principal directions, and the next step is 90°
    from every other candidate (margin G - value_gain)."""
    return np.pi / 4 + np.pi / 2 * (s - 1)


def _code(s: int, eps: float) -> tuple[float, float]:
    """eps·√2·(cos θ_s, sin θ_s): variance eps² per P dim over the four steps."""
    return eps * np.sqrt(2) * np.cos(_theta(s)), eps * np.sqrt(2) * np.sin(_theta(s))


def _readout(s: int, gain: float, eps: float) -> tuple[float, float]:
    """Weights whose dot product with _code(s') is gain·cos(θ_s' - θ_s)."""
    return gain * np.cos(_theta(s)) / (eps * np.sqrt(2)), gain * np.sin(_theta(s)) / (eps * np.sqrt(2))


def planted_basis() -> np.ndarray:
    """[d_model, 2] the planted shared subspace P (orthonormal)."""
    q = np.zeros((D_MODEL, 2))
    q[P0, 0] = q[P0 + 1, 1] = 1.0
    return q


def task_prompts(split: str = "all") -> dict[str, list[dict]]:
    """task -> [{"prompt": "T_t x_v", "answer": "o.. o.. o.. o.."}] for every value (6 per task)."""
    out = {}
    for t in range(N_TASKS):
        rows = []
        for v in range(N_VALUES):
            w, ans = v, []
            for s in range(1, N_STEPS + 1):
                w = g(t, w)
                ans.append(f"o{t}v{w}s{s}")
            rows.append({"prompt": f"T{t} x{v}", "answer": " ".join(ans)})
        out[f"task{t}"] = rows
    return out


def build_planted_decode_organism(path, spec: PlantedDecodeSpec | None = None) -> Path:
    """Write the checkpoint and `planted_truth.json` (the spec, the planted basis P, the task maps) to `path`."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from interplab.data.tokenizers import build_word_tokenizer

    spec = (spec or PlantedDecodeSpec()).validate()
    vocab = SPECIALS + len(words()) + 2
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=D_MODEL, intermediate_size=8, num_hidden_layers=2,
                      num_attention_heads=N_HEADS, num_key_value_heads=N_HEADS, head_dim=D_HEAD,
                      max_position_embeddings=32, rms_norm_eps=1e-6, tie_word_embeddings=False,
                      rope_parameters={"rope_type": "default", "rope_theta": 1e20},
                      bos_token_id=1, eos_token_id=2, pad_token_id=0)
    model = LlamaForCausalLM(cfg)
    amp = list(TASK_AMPLITUDES)
    E = torch.zeros(vocab, D_MODEL)
    E[:, ONE], E[:, PAD] = 1.0, PAD_VALUE
    E[1, BOS_F] = 1.0
    for t in range(N_TASKS):
        E[_tid(f"T{t}"), TASK_F] = E[_tid(f"T{t}"), TASKID0 + t] = 1.0
    for v in range(N_VALUES):
        E[_tid(f"x{v}"), IN_F] = E[_tid(f"x{v}"), X0 + v] = 1.0
    U = torch.zeros(vocab, D_MODEL)
    U[:, ONE] = -20.0                                    # only answer tokens and <eos> compete
    for t in range(N_TASKS):
        for w in range(N_VALUES):
            src = next(u for u in range(N_VALUES) if g(t, u) == w)
            for s in range(1, N_STEPS + 1):
                i = _tid(f"o{t}v{w}s{s}")
                E[i, V0 + t * N_VALUES + w] = amp[t]
                E[i, P0], E[i, P0 + 1] = _code(s, spec.eps)
                U[i, ONE] = 0.0
                U[i, V0 + t * N_VALUES + src] = spec.value_gain / amp[t]
                if s > 1:  # s = 1 tokens come from the prefill (IN flag) and never from P
                    U[i, P0], U[i, P0 + 1] = _readout(s - 1, spec.gain, spec.eps)
                if s == 1:  # the prefill's first answer token: task (copied by the head) + input value + IN flag
                    U[i, TCOPY0 + t] = U[i, X0 + src] = spec.value_gain
                    U[i, IN_F] = spec.gain
    U[2, ONE] = 0.0
    U[2, P0], U[2, P0 + 1] = _readout(N_STEPS, spec.gain, spec.eps)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        model.model.embed_tokens.weight.copy_(E)
        for block in model.model.layers:
            block.input_layernorm.weight.fill_(1.0)
            block.post_attention_layernorm.weight.fill_(1.0)
        att = model.model.layers[0].self_attn
        q, k, v, o = (torch.zeros(D_HEAD, D_MODEL), torch.zeros(D_HEAD, D_MODEL), torch.zeros(D_HEAD, D_MODEL),
                      torch.zeros(D_MODEL, D_HEAD))
        q[1, IN_F], k[1, TASK_F] = spec.beta, 1.0        # an input token reads the task token
        q[2, ONE], k[2, BOS_F] = spec.beta / 2, 1.0      # otherwise the <bos> sink (value 0)
        for t in range(N_TASKS):
            v[t, TASKID0 + t] = 1.0
            o[TCOPY0 + t, t] = 1.0
        att.q_proj.weight[:D_HEAD], att.k_proj.weight[:D_HEAD] = q, k
        att.v_proj.weight[:D_HEAD], att.o_proj.weight[:, :D_HEAD] = v, o
        model.model.norm.weight.fill_(1.0)
        model.lm_head.weight.copy_(U)
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(path))
    build_word_tokenizer(words()).save_pretrained(str(path))
    truth = {"kind": "decodeshare planted shared decode-time subspace (by construction)", "spec": asdict(spec),
             "planted_dims": [P0, P0 + 1], "k_planted": 2, "task_amplitudes": amp,
             "task_map": "w_s = (w_{s-1} + t + 1) mod 6"}
    (path / PLANTED_TRUTH_FILE).write_text(json.dumps(truth, indent=1))
    return path


def load_planted_decode_truth(path) -> dict:
    p = Path(path) / PLANTED_TRUTH_FILE
    if not p.exists():
        raise DataError(f"{p} does not exist; build the organism with build_planted_decode_organism")
    return json.loads(p.read_text())
