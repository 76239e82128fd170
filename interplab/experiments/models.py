"""The built-in `next-token` experiment: a prompt's top next tokens and one layer's attention patterns."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from interplab.core.errors import ConfigError
from interplab.experiments.registry import register_experiment
from interplab.figures.export import save_figure
from interplab.probes.next_token import model_summary, next_token_report

__all__ = ["NextTokenConfig", "next_token"]


@dataclass
class NextTokenConfig:
    """Config of the `next-token` experiment.

    model: zoo name (`zoo:NAME`), local Hugging Face checkpoint directory or hub id.
    prompt: the text to continue.
    layer: the layer whose attention pattern is saved (all heads) and plotted.
    head: the head shown in the figure.
    top_k: how many next tokens to list.
    backend: "bridge" (TransformerBridge) or "nnsight".
    device, dtype: where and in which precision to load the model.
    seed: torch seed set before loading (the forward itself is deterministic).
    """

    model: str = "zoo:toy-chat"
    prompt: str = "the cat sat on the"
    layer: int = 0
    head: int = 0
    top_k: int = 10
    backend: str = "bridge"
    device: str = "cpu"
    dtype: str = "float32"
    seed: int = 0

    def __post_init__(self):
        if self.top_k < 1:
            raise ConfigError(f"top_k must be >= 1, got {self.top_k}")
        if self.layer < 0 or self.head < 0:
            raise ConfigError("layer and head must be >= 0")
        if self.backend not in ("bridge", "nnsight"):
            raise ConfigError(f"backend must be 'bridge' or 'nnsight', got {self.backend!r}")


@register_experiment("next-token", config=NextTokenConfig,
                     help="Top-k next tokens and one layer's attention pattern for a prompt (table + figures).")
def next_token(cfg: NextTokenConfig, run) -> None:
    import torch

    import interplab
    from interplab.figures.models import attention_figure, top_tokens_figure

    torch.manual_seed(cfg.seed)
    model = interplab.load_model(cfg.model, backend=cfg.backend, device=cfg.device, dtype=cfg.dtype)
    if cfg.head >= model.n_heads:
        raise ConfigError(f"head {cfg.head} does not exist: {model.name} has {model.n_heads} heads "
                          f"(0..{model.n_heads - 1})")
    res = next_token_report(model, cfg.prompt, layer=cfg.layer, top_k=cfg.top_k)
    run.save_result("next_token", res)
    run.save_json("summary", {"model": model_summary(model), "tokens": res.tokens, "config": asdict(cfg)})
    save_figure(run, "top_tokens", top_tokens_figure(res.top, title=f"Top next tokens after {cfg.prompt!r}"))
    save_figure(run, "attention", attention_figure(res.pattern[cfg.head], res.tokens, layer=cfg.layer, head=cfg.head))
