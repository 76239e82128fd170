"""Architecture configs for organisms: a small dataclass turned into a transformers `LlamaConfig` / `Qwen2Config`."""
from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class ArchConfig:
    """A Llama/Qwen2-style decoder (RoPE, RMSNorm, SwiGLU MLP, grouped-query attention).

    family: "llama" or "qwen2".
    n_layers, d_model, d_mlp: depth, residual width, MLP hidden width.
    n_heads, n_kv_heads, d_head: query heads, key/value heads (GQA when n_kv_heads < n_heads), head size. d_head is
        set explicitly (transformers 5.x would otherwise derive d_model // n_heads).
    n_ctx: max_position_embeddings. rope_theta: RoPE base. tie_embeddings: share W_E and W_U.
    """

    family: str = "llama"
    n_layers: int = 4
    d_model: int = 128
    d_mlp: int = 384
    n_heads: int = 4
    n_kv_heads: int = 2
    d_head: int = 32
    n_ctx: int = 256
    rope_theta: float = 10000.0
    tie_embeddings: bool = False

    def to_dict(self) -> dict:
        return asdict(self)

    def hf_config(self, vocab_size: int, bos_id: int | None = None, eos_id=None, pad_id: int | None = None):
        from interplab.core.errors import ConfigError

        if self.n_heads % self.n_kv_heads:
            raise ConfigError(f"n_heads {self.n_heads} must be a multiple of n_kv_heads {self.n_kv_heads}")
        kw = dict(
            vocab_size=int(vocab_size), hidden_size=self.d_model, intermediate_size=self.d_mlp,
            num_hidden_layers=self.n_layers, num_attention_heads=self.n_heads,
            num_key_value_heads=self.n_kv_heads, head_dim=self.d_head, max_position_embeddings=self.n_ctx,
            rope_parameters={"rope_type": "default", "rope_theta": float(self.rope_theta)},
            tie_word_embeddings=self.tie_embeddings, bos_token_id=bos_id, eos_token_id=eos_id, pad_token_id=pad_id,
        )
        if self.family == "llama":
            from transformers import LlamaConfig

            return LlamaConfig(**kw)
        if self.family == "qwen2":
            from transformers import Qwen2Config

            return Qwen2Config(**kw)
        raise ConfigError(f"architecture family {self.family!r} must be 'llama' or 'qwen2'")


def build_model(arch: ArchConfig, tokenizer, seed: int = 0):
    """A freshly initialised causal LM for `tokenizer` (init seeded by `seed`, fp32)."""
    import torch
    from transformers import AutoModelForCausalLM

    cfg = arch.hf_config(len(tokenizer), tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    return model


def count_params(model) -> int:
    return sum(p.numel() for p in model.parameters())
