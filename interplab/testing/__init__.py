"""Random Hugging Face checkpoints built from configs, for tests and benchmarks (no downloads).

`make_random_checkpoint("llama", dir)` writes an ordinary checkpoint directory (config.json, model.safetensors,
word-level tokenizer with the ChatML chat template) that `interplab.load_model(dir)` and
`transformers.AutoModelForCausalLM.from_pretrained(dir)` both load."""
from __future__ import annotations

from pathlib import Path

import torch

from interplab.core.paths import cache_root
from interplab.data.tokenizers import build_word_tokenizer

ARCHS = ("gpt2", "llama", "qwen2", "mistral", "gemma3")


def test_words(vocab: int) -> list[str]:
    """The word list of a random checkpoint: chat role names first, then w0, w1, ..."""
    base = ["system", "user", "assistant"]
    return base + [f"w{i}" for i in range(max(0, vocab - 6 - len(base)))]


def make_config(arch: str, *, n_layers=2, d_model=64, n_heads=4, n_kv_heads=2, vocab=64, n_ctx=128, d_mlp=None):
    from transformers import Gemma3TextConfig, GPT2Config, LlamaConfig, MistralConfig, Qwen2Config

    d_head = d_model // n_heads
    d_mlp = d_mlp or 2 * d_model
    special = dict(bos_token_id=1, eos_token_id=2, pad_token_id=0)
    if arch == "gpt2":
        return GPT2Config(vocab_size=vocab, n_embd=d_model, n_layer=n_layers, n_head=n_heads, n_positions=n_ctx,
                          n_inner=d_mlp, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, **special)
    common = dict(vocab_size=vocab, hidden_size=d_model, intermediate_size=d_mlp, num_hidden_layers=n_layers,
                  num_attention_heads=n_heads, num_key_value_heads=n_kv_heads, head_dim=d_head,
                  max_position_embeddings=n_ctx, tie_word_embeddings=False, **special)
    if arch == "llama":
        return LlamaConfig(**common)
    if arch == "qwen2":
        return Qwen2Config(**common)
    if arch == "mistral":
        return MistralConfig(sliding_window=None, **common)
    if arch == "gemma3":
        # Gemma-3 text: QK-norm, sandwich norms, scaled embeddings, local (sliding) and global layers with their own
        # RoPE bases; a 4-token window so a short test prompt already reaches past it on the local layers.
        kinds = ["sliding_attention", "full_attention"]
        return Gemma3TextConfig(sliding_window=4, layer_types=[kinds[i % 2] for i in range(n_layers)],
                                query_pre_attn_scalar=d_head, **common)
    raise ValueError(f"unknown arch {arch!r}; use one of {ARCHS}")


def make_random_checkpoint(arch: str, path, *, n_layers: int = 2, d_model: int = 64, n_heads: int = 4,
                           n_kv_heads: int = 2, vocab: int = 64, n_ctx: int = 128, seed: int = 0,
                           init_std: float | None = None) -> Path:
    """Write a randomly initialised checkpoint of `arch` to `path` and return the path.

    init_std defaults to 0.2 (larger than HF's 0.02) so random models have non-trivial attention and varied
    next-token predictions, which makes parity and edit tests able to fail."""
    from transformers import AutoModelForCausalLM

    path = Path(path)
    cfg = make_config(arch, n_layers=n_layers, d_model=d_model, n_heads=n_heads, n_kv_heads=n_kv_heads, vocab=vocab,
                      n_ctx=n_ctx)
    cfg.initializer_range = 0.2 if init_std is None else init_std
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg)
    tok = build_word_tokenizer(test_words(vocab))
    assert len(tok) <= vocab, (len(tok), vocab)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(path))
    tok.save_pretrained(str(path))
    return path


# ------------------------------------------------------------------------------------ real architectures, random weights
CONFIG_DIR = Path(__file__).resolve().parent / "configs"


def real_configs() -> list[str]:
    """Names of the committed real-architecture configs (GPT-2 small, Qwen2.5-0.5B, Llama-3.2-1B, Gemma-2-2B, ...)."""
    return sorted(p.stem for p in CONFIG_DIR.glob("*.json"))


def real_size_config(name: str, **overrides):
    """The transformers config of committed architecture `name` (its `config.json` fields, no weights)."""
    import json

    from transformers import AutoConfig

    path = CONFIG_DIR / f"{name}.json"
    if not path.is_file():
        raise ValueError(f"no committed config {name!r}; known: {real_configs()}")
    fields = {k: v for k, v in json.loads(path.read_text()).items() if not k.startswith("_")}
    fields.update(overrides)
    return AutoConfig.for_model(fields.pop("model_type"), **fields)


def real_size_checkpoint(name: str, *, seed: int = 0, dtype: str = "float32", cache_dir=None, **overrides) -> Path:
    """A checkpoint of a real architecture with seeded random weights, built once and cached.

    Cached under `cache_dir` (default `cache_root()/random-models`: $INTERPLAB_CACHE, else ~/.cache/interplab),
    keyed on name, seed, dtype and overrides; the folder appears only when complete (built next to it, renamed).
    The tokenizer is the toy organisms' word-level one (`build_toy_tokenizer`, 161 words with the ChatML template),
    so every method's main experiment, whose data is written in the toy vocabulary, runs on these models; ids
    beyond it are still valid model inputs (pass token-id lists)."""
    import hashlib
    import shutil
    import tempfile

    key = hashlib.sha1(repr((seed, dtype, sorted(overrides.items()), "toy-tokenizer", "normal-init")).encode()
                       ).hexdigest()[:10]
    root = Path(cache_dir) if cache_dir else cache_root() / "random-models"
    out = root / f"{name}-{key}"
    if (out / "config.json").is_file() and any(out.glob("*.safetensors")):
        return out
    cfg = real_size_config(name, **overrides)
    model = _seeded_random_model(cfg, seed=seed, dtype=getattr(torch, dtype))
    from interplab.data.toy_vocab import build_toy_tokenizer

    tok = build_toy_tokenizer()
    if len(tok) > cfg.vocab_size:
        tok = build_word_tokenizer(test_words(min(cfg.vocab_size, 512)))
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=root))
    try:
        model.save_pretrained(str(tmp))
        tok.save_pretrained(str(tmp))
        tmp.rename(out)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not (out / "config.json").is_file():
            raise
        # else another process (an xdist worker) finished the same build first: renaming onto its non-empty
        # folder fails with ENOTEMPTY, and its copy is identical
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _seeded_random_model(cfg, *, seed: int, dtype):
    """`from_config` weights without transformers' own init, which costs 36 s for a 1B model on 2 cores (nn.Linear's
    kaiming init, then `_init_weights` again): every matrix is N(0, initializer_range²) in place, biases zero, and
    every other parameter (norm scales) gets the model's own `_init_weights`, so norms are exactly as transformers
    makes them."""
    from torch import nn
    from transformers import AutoModelForCausalLM
    from transformers.initialization import no_init_weights
    from transformers.pytorch_utils import Conv1D

    with no_init_weights():
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    g = torch.Generator().manual_seed(seed)
    std = getattr(cfg, "initializer_range", 0.02)
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, (nn.Linear, nn.Embedding, Conv1D)):
                mod.weight.normal_(0.0, std, generator=g)
                if getattr(mod, "bias", None) is not None:
                    mod.bias.zero_()
            elif any(True for _ in mod.parameters(recurse=False)):
                model._init_weights(mod)
    return model


# Minimal settings of every method's main experiment on a checkpoint directory ({m}); {dtype}/{device} where the
# experiment has those fields. Used by the real-size test and scripts/gpu_check.py: results are meaningless on
# random weights, the point is that each runs end to end at real size. The methods' own come from their
# declarations (`MethodSpec.smoke`); next-token belongs to no method.
NEXT_TOKEN_SMOKE = ("model={m}", "prompt=the cat and the dog see the", "dtype={dtype}", "device={device}")


def smoke_experiments() -> dict[str, tuple[str, ...]]:
    """experiment -> its `key=value` templates: next-token, then every method's (`interplab.methods`)."""
    from interplab.methods import methods

    out = {"next-token": NEXT_TOKEN_SMOKE}
    for spec in methods():
        out.update(spec.smoke)
    return out


def __getattr__(name: str):
    if name == "SMOKE_EXPERIMENTS":  # computed on access: includes methods plugged in after this import
        return smoke_experiments()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def smoke_experiment_args(name: str, model_dir, *, dtype: str = "float32", device: str = "cpu") -> list[str]:
    """`--set key=value` arguments of experiment `name`'s minimal settings on `model_dir`."""
    sets = [s.format(m=model_dir, dtype=dtype, device=device) for s in smoke_experiments()[name]]
    return [a for s in sets for a in ("--set", s)]


# ----------------------------------------------------------------------------- float64 comparisons across shapes
# transformers' eager attention computes its softmax in float32 even in a float64 model
# (`softmax(..., dtype=torch.float32)` in llama/qwen2/mistral/gemma; GPT-2 keeps the input dtype). float32 exp is
# vectorised for rows of at least one SIMD width (8 lanes on AVX2, 16 on AVX-512) and scalar below it, and the two
# round differently; so the same token's state computed from a different number of keys (KV-cached decode vs a full
# recompute, a padded batch vs one prompt) agrees to float32 rounding, not float64: measured 2.3e-6..4.5e-6 absolute
# on AMD EPYC (AVX2, 8-key rows) and 0 on an AVX-512 Xeon, where every test row is shorter than 16 (issue 24: a
# verdict must not depend on the CPU). Same-shape comparisons (bridge vs nnsight) stay bit-exact and keep 1e-9.
CROSS_SHAPE_REL = 1e-5   # x max|expected|: ~100x the float32 effect; a KV-cache bug (a wrong position) is >= 1e-2


def assert_same_across_shapes(actual, expected, *, rel: float = CROSS_SHAPE_REL, msg: str = "") -> None:
    """`actual` equals `expected` up to the float32 softmax rounding of eager attention (see CROSS_SHAPE_REL)."""
    a, e = torch.as_tensor(actual), torch.as_tensor(expected)
    scale = float(e.abs().max()) if e.numel() else 1.0
    torch.testing.assert_close(a, e, atol=rel * max(scale, 1.0), rtol=0, msg=msg or None)
