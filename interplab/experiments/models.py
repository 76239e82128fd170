"""Model inspection shared by the Models page and the built-in `next-token` experiment.

`model_summary(model)` gives the architecture numbers; `next_token_report(model, prompt, layer=..., top_k=...)`
runs one forward, capturing only `attn_pattern.<layer>`, and returns the top-k next tokens and that layer's
attention patterns (all heads) at the prompt's tokens."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from interplab.core.errors import ConfigError, InputError
from interplab.experiments.registry import register_experiment
from interplab.figures.export import save_figure

__all__ = ["model_summary", "suggest_prompt", "suggest_chat", "prompt_input", "next_token_report", "NextTokenResult", "NextTokenConfig", "next_token"]


def model_summary(model) -> dict[str, Any]:
    """Architecture numbers of a LabModel (what the Models page shows)."""
    hf = getattr(model, "hf_model", None)
    n_params = int(sum(p.numel() for p in hf.parameters())) if hf is not None else None
    return {
        "name": str(getattr(model, "name", "")),
        "backend": str(getattr(model, "backend", "")),
        "architecture": type(hf).__name__ if hf is not None else "",
        "n_layers": int(model.n_layers),
        "n_heads": int(model.n_heads),
        "n_kv_heads": int(model.n_kv_heads),
        "d_model": int(model.d_model),
        "d_head": int(model.d_head),
        "d_vocab": int(model.d_vocab),
        "n_ctx": int(model.n_ctx),
        "n_params": n_params,
        "device": str(getattr(model, "device", "")),
        "dtype": str(getattr(model, "dtype", "")).replace("torch.", ""),
    }


DEFAULT_PROMPT = "the cat sat on the"


def suggest_prompt(model_or_tokenizer, default: str = DEFAULT_PROMPT, n_words: int = 5) -> str:
    """`default` when the tokenizer knows all its words, else a few ordinary words from the vocabulary
    (word-level organism tokenizers map unknown words to <unk>)."""
    tok = getattr(model_or_tokenizer, "tokenizer", model_or_tokenizer)
    try:
        ids = tok(default, add_special_tokens=False)["input_ids"]
        unk = getattr(tok, "unk_token_id", None)
        if ids and (unk is None or unk not in ids):
            return default
        special = set(getattr(tok, "all_special_tokens", []) or [])
        vocab = sorted(tok.get_vocab().items(), key=lambda kv: kv[1])
        words = [w for w, _ in vocab if w not in special and w.isalnum() and not w.startswith(("<", "["))]
        roles = {"system", "user", "assistant"}
        words = [w for w in words if w not in roles] or words
        return " ".join(words[:n_words]) if words else default
    except Exception:  # noqa: BLE001 - a suggestion must never fail a page
        return default


@dataclass
class NextTokenResult:
    """Top next tokens after a prompt plus one layer's attention patterns.

    prompt: the text; tokens: the prompt's tokens as run (BOS included when the tokenizer adds one);
    input_ids: their ids; top: DataFrame rank/token_id/token/prob/logit; pattern: [n_heads, q, k] post-softmax
    attention of `layer`; config: what produced it."""

    prompt: str
    tokens: list[str]
    input_ids: list[int]
    layer: int
    top: Any  # pandas DataFrame
    pattern: np.ndarray
    config: dict = field(default_factory=dict)

    def to_frame(self):
        return self.top.copy()

    def save(self, directory) -> Path:
        from interplab.core.io import write_arrays, write_json, write_table

        d = Path(directory)
        write_table(d / "top_tokens.csv", self.top)
        write_arrays(d / "attention.safetensors", {"pattern": np.ascontiguousarray(self.pattern, dtype=np.float32),
                                                  "input_ids": np.asarray(self.input_ids, dtype=np.int64)})
        write_json(d / "next_token.json", {"prompt": self.prompt, "tokens": self.tokens, "layer": self.layer,
                                           "config": self.config})
        return d

    @classmethod
    def load(cls, directory) -> "NextTokenResult":
        from interplab.core.io import read_arrays, read_json, read_table

        d = Path(directory)
        meta = read_json(d / "next_token.json")
        arr = read_arrays(d / "attention.safetensors")
        return cls(prompt=meta["prompt"], tokens=list(meta["tokens"]), input_ids=arr["input_ids"].tolist(),
                   layer=int(meta["layer"]), top=read_table(d / "top_tokens.csv"), pattern=arr["pattern"],
                   config=meta.get("config", {}))


def suggest_chat(model) -> tuple[str, str]:
    """(system, user) turns for a chat model's first prompt: a task the toy organisms were tuned on when the
    tokenizer knows its words (instruction = system turn, docs/zoo.md), else no system turn and `suggest_prompt`."""
    try:
        vocab = model.tokenizer.get_vocab()
        if all(w in vocab for w in ("copy", "s1", "s2", "s3", "sep")):
            return "copy", "s1 s2 s3 sep"
    except Exception:  # noqa: BLE001 - a suggestion must never fail a page
        pass
    return "", suggest_prompt(model)


def prompt_input(model, prompt: str, system: str = "", chat: bool | None = None):
    """What `model.run` is given for a (system, user) prompt: a conversation when a system turn is set (chat
    models), else the user text, read by the model's prompt rule (docs/hook_layer.md, "Prompts: text and chat")."""
    if system.strip() and chat is not False and model.is_chat:
        return [{"role": "system", "content": system.strip()}, {"role": "user", "content": prompt}]
    return prompt


def next_token_report(model, prompt: str, *, layer: int = 0, top_k: int = 10, system: str = "",
                      chat: bool | None = None) -> NextTokenResult:
    """One forward of `prompt`: the `top_k` most likely next tokens and `attn_pattern.<layer>` for every head.
    `system` (chat models) adds a system turn; `chat` as in `LabModel.run` (None: the model's default)."""
    import pandas as pd
    import torch

    if not isinstance(prompt, str) or not prompt.strip():
        raise InputError("the prompt is empty; type some text")
    if not 1 <= int(top_k):
        raise InputError(f"top_k must be >= 1, got {top_k}")
    top_k = min(int(top_k), int(model.d_vocab))
    site = f"attn_pattern.{int(layer)}"
    with torch.no_grad():
        out = model.run(prompt_input(model, prompt, system, chat), capture=[site], chat=chat)
    ids = out.batch.input_ids[0]
    mask = out.batch.attention_mask[0].bool()
    ids = ids[mask].tolist()  # one prompt: no padding, but be exact
    logits = out.logits[0, -1].float()
    probs = torch.softmax(logits, -1)
    p, idx = torch.topk(probs, top_k)
    tok = model.tokenizer
    tokens = [str(t) for t in tok.convert_ids_to_tokens(ids)]
    top = pd.DataFrame({
        "rank": np.arange(top_k),
        "token_id": idx.cpu().numpy().astype(np.int64),
        "token": [str(t) for t in tok.convert_ids_to_tokens(idx.tolist())],
        "prob": p.cpu().numpy().astype(np.float64),
        "logit": logits[idx].cpu().numpy().astype(np.float64),
    })
    pat = out.cache[site][0].float()  # [h, q, k]
    pat = pat[:, mask][:, :, mask].cpu().numpy()
    return NextTokenResult(prompt=prompt, tokens=tokens, input_ids=ids, layer=int(layer), top=top, pattern=pat,
                           config={"model": str(getattr(model, "name", "")), "layer": int(layer), "top_k": top_k,
                                   "system": system, "chat": chat})


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
        raise ConfigError(f"head {cfg.head} does not exist: {model.name} has {model.n_heads} heads (0..{model.n_heads - 1})")
    res = next_token_report(model, cfg.prompt, layer=cfg.layer, top_k=cfg.top_k)
    run.save_table("top_tokens", res.top)
    run.save_arrays("attention", {"pattern": res.pattern.astype(np.float32),
                                  "input_ids": np.asarray(res.input_ids, dtype=np.int64)})
    run.save_json("summary", {"model": model_summary(model), "tokens": res.tokens, "config": asdict(cfg)})
    save_figure(run, "top_tokens", top_tokens_figure(res.top, title=f"Top next tokens after {cfg.prompt!r}"))
    save_figure(run, "attention", attention_figure(res.pattern[cfg.head], res.tokens, layer=cfg.layer, head=cfg.head))
