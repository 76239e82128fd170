"""Resolve a model name to a checkpoint directory and load it under the chosen backend.

Accepted names: `zoo:NAME` (a model organism), a local Hugging Face checkpoint directory, or a hub id (only where
the hub is reachable; offline it fails fast with a message that says what to do). Weights load from safetensors only;
`trust_remote_code` is off unless asked for."""
from __future__ import annotations

import copy
import json
import os
from pathlib import Path

from interplab.core.errors import CheckpointError, InputError, ModelNotFoundError

# Name resolution runs before torch is imported (a cold torch import alone takes seconds here), so a bad name
# fails fast.
BACKENDS = ("bridge", "nnsight")
_DTYPES = ("float32", "fp32", "float16", "fp16", "bfloat16", "bf16", "float64")


def resolve_dtype(dtype):
    import torch

    if dtype is None:
        return torch.float32
    if isinstance(dtype, torch.dtype):
        return dtype
    name = str(dtype).replace("torch.", "")
    if name not in _DTYPES:
        raise InputError(f"unknown dtype {dtype!r}; use one of {sorted(_DTYPES)}")
    return {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}.get(name) or getattr(torch, name)


def resolve_device(device):
    import torch

    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")


def check_checkpoint_dir(path: Path) -> Path:
    """A directory must hold config.json and safetensors weights; anything else is a clear CheckpointError."""
    if not (path / "config.json").is_file():
        raise CheckpointError(f"{path} has no config.json: it is not a Hugging Face checkpoint directory "
                              "(save one with model.save_pretrained(dir) and tokenizer.save_pretrained(dir))")
    try:
        json.loads((path / "config.json").read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path / 'config.json'} is not valid JSON ({e}); the checkpoint is corrupt") from None
    single = path / "model.safetensors"
    index = path / "model.safetensors.index.json"
    if single.is_file():
        _check_safetensors(single)
    elif index.is_file():
        shards = set(json.loads(index.read_text())["weight_map"].values())
        for shard in shards:
            if not (path / shard).is_file():
                raise CheckpointError(f"{path} is missing weight shard {shard} listed in {index.name}")
            _check_safetensors(path / shard)
    else:
        legacy = [p.name for p in path.glob("*.bin")]
        hint = (f" It has {legacy}: interplab loads safetensors only; convert with "
                "model.save_pretrained(dir, safe_serialization=True).") if legacy else ""
        raise CheckpointError(f"{path} has no model.safetensors weights.{hint} If this is a zoo organism, rebuild it "
                              "with `interplab zoo train NAME`.")
    return path


def _check_safetensors(file: Path) -> None:
    from safetensors import safe_open

    try:
        with safe_open(str(file), framework="pt") as fh:
            fh.keys()
    except Exception as e:  # safetensors raises several types for truncated/corrupt headers
        raise CheckpointError(f"{file} is corrupt or truncated ({type(e).__name__}: {e}); delete the directory and "
                              "re-save or retrain it") from None


def resolve_checkpoint(name_or_path) -> tuple[str, Path]:
    """-> (display name, local checkpoint directory)."""
    if isinstance(name_or_path, Path):
        name_or_path = str(name_or_path)
    if not isinstance(name_or_path, str) or not name_or_path.strip():
        raise InputError(f"model name must be a non-empty string, got {name_or_path!r}")
    name = name_or_path.strip()
    if name.startswith("zoo:"):
        from interplab.models.zoo_dirs import organism_dir

        return name, check_checkpoint_dir(organism_dir(name[4:]))
    path = Path(name).expanduser()
    if path.is_dir():
        return path.name, check_checkpoint_dir(path)
    if path.exists():
        raise ModelNotFoundError(f"{name} is a file, not a checkpoint directory")
    looks_like_path = name.startswith((".", "/", "~")) or os.sep in name.strip("/").split("/", 1)[-1] \
        or name.count("/") > 1
    if looks_like_path:
        raise ModelNotFoundError(f"no checkpoint directory at {name}; pass an existing directory, a zoo name "
                                 f"(zoo:NAME; see `interplab zoo list`) or a hub id")
    return name, _hub_snapshot(name)


def _hub_snapshot(repo_id: str) -> Path:
    from huggingface_hub import snapshot_download

    try:
        local = snapshot_download(repo_id, local_files_only=True, allow_patterns=["*.json", "*.safetensors", "*.txt",
                                                                                   "*.model", "*.jinja"])
        return check_checkpoint_dir(Path(local))
    except CheckpointError:
        raise
    except Exception:
        pass
    if _offline():
        raise ModelNotFoundError(
            f"model {repo_id!r} is not a zoo organism, not a local directory, and not in the local Hugging Face cache, "
            "and HF_HUB_OFFLINE=1 forbids downloading it. Use `zoo:NAME` (see `interplab zoo list`), pass a local "
            "checkpoint directory, or download it on a machine with network access "
            "(`huggingface-cli download ID`) and unset HF_HUB_OFFLINE.")
    try:
        local = snapshot_download(repo_id, allow_patterns=["*.json", "*.safetensors", "*.txt", "*.model", "*.jinja"],
                                  etag_timeout=2)
    except Exception as e:
        raise ModelNotFoundError(f"could not fetch {repo_id!r} from the Hugging Face hub ({type(e).__name__}). "
                                 "Check the id and your network, or pass a local checkpoint directory / zoo:NAME."
                                 ) from None
    return check_checkpoint_dir(Path(local))


def load_tokenizer(path: Path):
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    cls = AutoTokenizer
    cfg_file = path / "tokenizer_config.json"
    if cfg_file.is_file():
        # transformers 5 maps a generic tokenizers-backed tokenizer to the model type's own class (e.g. Qwen2's
        # byte-level pre-tokenizer), which silently re-tokenizes word-level vocabularies; keep the generic class.
        if json.loads(cfg_file.read_text()).get("tokenizer_class") in ("TokenizersBackend", "PreTrainedTokenizerFast"):
            cls = PreTrainedTokenizerFast
    try:
        tok = cls.from_pretrained(str(path))
    except Exception as e:
        raise CheckpointError(f"could not load the tokenizer from {path} ({type(e).__name__}: {e}); a checkpoint "
                              "directory must include tokenizer files (tokenizer.save_pretrained(dir))") from None
    tok.padding_side = "left"
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def load_hf_model(path: Path, *, device, dtype, trust_remote_code: bool = False, verbose: bool | None = None):
    from transformers import AutoModelForCausalLM

    from interplab.core.quiet import hf_progress

    try:
        with hf_progress(verbose):
            model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype, attn_implementation="eager",
                                                         use_safetensors=True, trust_remote_code=trust_remote_code)
    except Exception as e:
        raise CheckpointError(f"could not load weights from {path} ({type(e).__name__}: {e})") from None
    return model.to(device).eval()


def load_model(name_or_path, backend: str = "bridge", device=None, dtype=None, *, trust_remote_code: bool = False,
               verbose: bool | None = None):
    """Load a model as a `LabModel` on the chosen backend ("bridge" = TransformerBridge, "nnsight"). Third-party
    progress bars show only with verbose=True (default: $INTERPLAB_VERBOSE)."""
    if backend not in BACKENDS:
        raise InputError(f"unknown backend {backend!r}; use one of {BACKENDS}")
    display, path = resolve_checkpoint(name_or_path)
    dtype, device = resolve_dtype(dtype), resolve_device(device)
    tok = load_tokenizer(path)
    hf = load_hf_model(path, device=device, dtype=dtype, trust_remote_code=trust_remote_code, verbose=verbose)
    return _lab_model(hf, tok, backend, name=display, path=str(path), device=device, dtype=dtype,
                      trust_remote_code=trust_remote_code)


def wrap_hf_model(hf_model, tokenizer=None, backend: str = "bridge", *, name: str | None = None):
    """An in-memory transformers causal LM (e.g. one just trained, or a random-init copy) as a `LabModel`, on its
    current device and dtype. Without a tokenizer, inputs must be token ids (lists of id lists, tensors): a
    stand-in tokenizer maps id i to the token "<i>" and takes BOS/EOS/PAD from the model config."""
    if backend not in BACKENDS:
        raise InputError(f"unknown backend {backend!r}; use one of {BACKENDS}")
    tok = tokenizer if tokenizer is not None else ids_tokenizer(hf_model.config)
    name = name or getattr(hf_model.config, "name_or_path", None) or type(hf_model).__name__
    p = next(hf_model.parameters())
    return _lab_model(hf_model.eval(), tok, backend, name=name, path=None, device=p.device, dtype=p.dtype,
                      bridge_tokenizer=_in_memory(tok))


def ids_tokenizer(config):
    """A tokenizer over bare ids ("<0>" .. "<V-1>") for models that come without one; special ids from `config`."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    V = int(config.vocab_size)
    core = Tokenizer(models.WordLevel({f"<{i}>": i for i in range(V)}, unk_token="<0>"))

    def special(attr, default):
        v = getattr(config, attr, None)
        v = v[0] if isinstance(v, (list, tuple)) else v
        return f"<{int(v) if v is not None else default}>"

    eos = special("eos_token_id", V - 1)
    return PreTrainedTokenizerFast(tokenizer_object=core, bos_token=special("bos_token_id", V - 1), eos_token=eos,
                                   pad_token=special("pad_token_id", int(eos[1:-1])), padding_side="left")


def _in_memory(tok):
    """TransformerBridge re-loads a tokenizer "with BOS" from ``init_kwargs["name_or_path"]``, which a tokenizer
    built in memory lacks; the bridge gets a copy that says BOS handling is settled (LabModel tokenizes itself)."""
    if "name_or_path" in tok.init_kwargs:
        return tok
    out = copy.copy(tok)
    out.init_kwargs = {**tok.init_kwargs, "name_or_path": "", "add_bos_token": True}
    return out


def _lab_model(hf, tok, backend: str, *, name: str, path: str | None, device, dtype, trust_remote_code: bool = False,
               bridge_tokenizer=None):
    from interplab.models.lab_model import LabModel

    if backend == "bridge":
        from transformer_lens.model_bridge import TransformerBridge

        from interplab.models.backends.bridge import BridgeBackend

        bridge = TransformerBridge.boot_transformers(path or name, device=str(device), dtype=dtype, hf_model=hf,
                                                     tokenizer=bridge_tokenizer or tok, trust_remote_code=trust_remote_code)
        bridge.eval()
        impl = BridgeBackend(bridge)
    else:
        from interplab.models.backends.nnsight_backend import NNsightBackend

        cfg = hf.config
        n_heads = int(getattr(cfg, "num_attention_heads", None) or cfg.n_head)
        d_head = int(getattr(cfg, "head_dim", None) or (getattr(cfg, "hidden_size", None) or cfg.n_embd) // n_heads)
        impl = NNsightBackend(hf, n_heads, d_head)
    return LabModel(impl, tok, name=name, path=path)
