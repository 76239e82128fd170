"""Resolve a model name to a checkpoint directory and load it under the chosen backend.

Accepted names: `zoo:NAME` (a model organism), `real:NAME` (a real pretrained model from the GGUF registry,
`interplab.models.real`), a local `.gguf` file, a local Hugging Face checkpoint directory, or a hub id (only where
the hub is reachable; offline it fails fast with a message that says what to do). Weights load from safetensors only;
`trust_remote_code` is off unless asked for."""
from __future__ import annotations

import copy
import json
import os
from pathlib import Path

from interplab.core.errors import CheckpointError, ConfigError, InputError, ModelNotFoundError
from interplab.models.checkpoints import validate_checkpoint

# Name resolution runs before torch is imported (a cold torch import alone takes seconds here), so a bad name
# fails fast.
BACKENDS = ("bridge", "nnsight")
_DTYPES = {"float32": "float32", "fp32": "float32", "float16": "float16", "fp16": "float16", "half": "float16",
           "bfloat16": "bfloat16", "bf16": "bfloat16", "float64": "float64"}
REMOTE_MODES = (False, True, "local")


def resolve_dtype(dtype):
    """None -> float32; a torch floating dtype; "auto" (the checkpoint's own dtype, returned as the string "auto");
    or one of "float32"/"float16"/"bfloat16"/"float64" (and their short forms). Anything else is a ConfigError."""
    import torch

    if dtype is None:
        return torch.float32
    if isinstance(dtype, torch.dtype):
        if not dtype.is_floating_point:
            raise ConfigError(f"dtype must be a floating-point dtype, got {dtype}")
        return dtype
    name = str(dtype).replace("torch.", "").lower()
    if name == "auto":
        return "auto"
    if name not in _DTYPES:
        raise ConfigError(f"unknown dtype {dtype!r}; use a torch dtype or one of "
                          "'auto', 'bfloat16', 'float16', 'float32' (or 'float64')")
    return getattr(torch, _DTYPES[name])


def resolve_device(device):
    import torch

    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")


def resolve_checkpoint(name_or_path, *, allow_pickle: bool = False) -> tuple[str, Path]:
    """-> (display name, local checkpoint directory)."""
    if isinstance(name_or_path, Path):
        name_or_path = str(name_or_path)
    if not isinstance(name_or_path, str) or not name_or_path.strip():
        raise InputError(f"model name must be a non-empty string, got {name_or_path!r}")
    name = name_or_path.strip()
    if name.startswith("zoo:"):
        from interplab.models.zoo_dirs import organism_dir

        return name, validate_checkpoint(organism_dir(name[4:]))  # shipped weights: sha256 checked too
    if name.startswith("real:"):
        from interplab.models.real import checkpoint_for

        return name, validate_checkpoint(checkpoint_for(name), verify_checksums=False)
    path = Path(name).expanduser()
    if path.suffix == ".gguf" and path.is_file():
        from interplab.models.real import checkpoint_for_gguf

        return path.name, validate_checkpoint(checkpoint_for_gguf(path), verify_checksums=False)
    if path.is_dir():
        return path.name, validate_checkpoint(path, verify_checksums=False, allow_pickle=allow_pickle)
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
        return validate_checkpoint(Path(local), verify_checksums=False)
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
    return validate_checkpoint(Path(local), verify_checksums=False)


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


def load_hf_model(path: Path, *, device, dtype, trust_remote_code: bool = False, device_map=None,
                  max_memory=None, offload_folder=None, attn_implementation: str = "auto", allow_pickle: bool = False,
                  verbose: bool | None = None):
    """The transformers model, on `device` or dispatched by accelerate over `device_map` (with `max_memory` and
    `offload_folder` for "disk" targets). attn_implementation="auto" keeps the model's default (SDPA where
    supported); LabModel switches to eager only for forwards that touch attn_pattern."""
    import torch
    from transformers import AutoModelForCausalLM

    from interplab.core.quiet import hf_progress

    kw = dict(dtype=dtype, use_safetensors=not (allow_pickle and not any(Path(path).glob("*.safetensors"))),
              trust_remote_code=trust_remote_code)
    if attn_implementation == "auto" and dtype == torch.float64:
        # float64 is for exact-parity work; SDPA's float64 path differs from eager by ~1e-6 (measured on the
        # test models), which would hide the 1e-9 agreement the two backends have in eager.
        attn_implementation = "eager"
    if attn_implementation != "auto":
        kw["attn_implementation"] = attn_implementation
    if device_map is not None:
        kw.update(device_map=device_map, max_memory=max_memory, offload_folder=offload_folder)
    try:
        with hf_progress(verbose):  # no third-party "Loading weights" bar unless verbose / $INTERPLAB_VERBOSE
            model = AutoModelForCausalLM.from_pretrained(str(path), **kw)
    except Exception as e:
        raise CheckpointError(f"could not load weights from {path} ({type(e).__name__}: {e})") from None
    return (model if device_map is not None else model.to(device)).eval()


def _check_placement(backend: str, device_map, max_memory, offload_folder, remote) -> None:
    if remote not in REMOTE_MODES:
        raise ConfigError(f"remote must be False, True (NDIF) or 'local' (nnsight's local simulation), got {remote!r}")
    if remote and backend != "nnsight":
        raise ConfigError("remote execution runs through nnsight: load_model(..., backend='nnsight', remote=...)")
    if remote and device_map is not None:
        raise ConfigError("remote=... places the model on the remote engine; drop device_map")
    if device_map is None and (max_memory is not None or offload_folder is not None):
        raise ConfigError("max_memory / offload_folder only apply together with device_map (e.g. device_map='auto')")
    if backend == "bridge" and device_map is not None:
        targets = set(device_map.values()) if isinstance(device_map, dict) else set()
        if {str(t).lower() for t in targets} & {"disk", "meta"}:
            raise ConfigError("TransformerLens's TransformerBridge cannot run layers offloaded to 'disk' (wrapped "
                              "components bypass accelerate's offload hooks); use backend='nnsight' for disk "
                              "offload, or a device_map of GPUs/CPU only")


def load_model(name_or_path, backend: str = "bridge", device=None, dtype=None, *, device_map=None,
               max_memory=None, offload_folder=None, attn_implementation: str = "auto", remote=False,
               output_device="cpu", trust_remote_code: bool = False, allow_pickle: bool = False,
               verbose: bool | None = None):
    """Load a model as a `LabModel` on the chosen backend ("bridge" = TransformerBridge, "nnsight").

    dtype: None (float32), a torch dtype, "auto" (the checkpoint's) or "bfloat16"/"float16"/"float32".
    device_map / max_memory / offload_folder: accelerate dispatch exactly as `from_pretrained` takes them
        ("auto", "balanced", or a {module: device} dict; "disk" targets need the nnsight backend).
    attn_implementation: "auto" (the model's default, usually SDPA; eager only for forwards that capture or edit
        attn_pattern), or a fixed implementation such as "eager".
    remote: nnsight only. True runs every forward on NDIF (hub ids; API key from nnsight's own config), "local"
        runs nnsight's local simulation of it (serialize, hide interplab, deserialize, run here).
    output_device: where `run`/`generate` return captures (default CPU).
    trust_remote_code / allow_pickle: off by default (docs/reliability.md); they let a checkpoint run its own Python
        code / load pickle (`.bin`) weights.
    verbose: show third-party progress bars (default: $INTERPLAB_VERBOSE)."""
    if backend not in BACKENDS:
        raise InputError(f"unknown backend {backend!r}; use one of {BACKENDS}")
    _check_placement(backend, device_map, max_memory, offload_folder, remote)
    if remote is True:
        return _remote_model(name_or_path, dtype=resolve_dtype(dtype), output_device=output_device)
    display, path = resolve_checkpoint(name_or_path, allow_pickle=allow_pickle)
    dtype, device = resolve_dtype(dtype), resolve_device(device)
    tok = load_tokenizer(path)
    hf = load_hf_model(path, device=device, dtype=dtype, trust_remote_code=trust_remote_code, device_map=device_map,
                       max_memory=max_memory, offload_folder=offload_folder,
                       attn_implementation=attn_implementation, allow_pickle=allow_pickle, verbose=verbose)
    return _lab_model(hf, tok, backend, name=display, path=str(path), device=device, dtype=hf.dtype,
                      trust_remote_code=trust_remote_code, remote=remote, output_device=output_device,
                      attn_implementation=attn_implementation)


def _remote_model(hub_id, *, dtype, output_device):
    """An NDIF model: nnsight's TransformersModel on the hub id, weights on the meta device here (the server holds
    the real ones), tokenizer from the hub."""
    from nnsight.modeling.transformers import TransformersModel

    if not isinstance(hub_id, str) or hub_id.startswith(("zoo:", ".", "/", "~")) or Path(hub_id).exists():
        raise ConfigError("remote=True needs a Hugging Face hub id that NDIF serves (e.g. 'openai-community/gpt2'); "
                          "for a local directory or zoo organism use remote='local'")
    if dtype == "auto":
        dtype = None
    nn = TransformersModel(hub_id, task="text-generation", **({"dtype": dtype} if dtype is not None else {}))
    tok = nn.tokenizer
    tok.padding_side = "left"
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return _nnsight_lab_model(nn, nn._module, tok, name=hub_id, path=None, remote=True, output_device=output_device)


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
                      attn_implementation=getattr(hf_model.config, "_attn_implementation", None) or "auto")


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


def _bridge_tokenizer(tok):
    """The tokenizer TransformerBridge keeps. TL re-loads a tokenizer "with BOS" from disk unless `init_kwargs` say
    `add_bos_token` (2.8 s on Gemma-3's 262k vocabulary, after a deep copy of its init_kwargs) and cannot at all for
    a tokenizer built in memory; LabModel tokenizes every input itself and hands the bridge token ids, so the bridge
    gets a shallow copy that says BOS handling is settled (what TL sets on it, e.g. its padding side, stays on the
    copy)."""
    out = copy.copy(tok)
    out.init_kwargs = {"name_or_path": tok.init_kwargs.get("name_or_path", ""), "add_bos_token": True}
    return out


def _lab_model(hf, tok, backend: str, *, name: str, path: str | None, device, dtype, trust_remote_code: bool = False,
               remote=False, output_device="cpu", attn_implementation: str = "auto"):
    from interplab.models.lab_model import LabModel

    if backend == "bridge":
        from transformer_lens.model_bridge import TransformerBridge

        from interplab.models.backends.bridge import BridgeBackend

        attn = getattr(hf.config, "_attn_implementation", None)
        dispatched = bool(getattr(hf, "hf_device_map", None))
        # A dispatched model is passed as it is (accelerate placed it); the bridge then reads devices from it.
        try:
            bridge = TransformerBridge.boot_transformers(path or name, device=None if dispatched else str(device),
                                                         dtype=dtype, hf_model=hf, tokenizer=_bridge_tokenizer(tok),
                                                         trust_remote_code=trust_remote_code)
        except ValueError as e:
            if not dispatched:
                raise
            # e.g. a map mixing CPU and GPU targets (accelerate CPU offload), which TL 3.9 refuses
            raise ConfigError(f"TransformerBridge cannot run this device_map ({e}); use backend='nnsight', which "
                              "runs any accelerate placement including CPU/disk offload") from None
        # TL stamps its wrappers with the HF model's mode (eval here); a second walk over every
        # wrapper and module cost ~5 % of a SmolLM2 load
        if bridge.training:
            bridge.eval()
        if attn and attn != "eager" and attn_implementation != "eager":
            hf.set_attn_implementation(attn)  # the bridge forces eager; LabModel switches per forward instead
        impl = BridgeBackend(bridge)
        return LabModel(impl, tok, name=name, path=path, output_device=output_device)
    from nnsight import NNsight

    nn = NNsight(hf)
    if remote:
        from nnsight.modeling.transformers import TransformersModel

        nn = TransformersModel(hf, tokenizer=tok)
    return _nnsight_lab_model(nn, hf, tok, name=name, path=path, remote=remote, output_device=output_device)


def _nnsight_lab_model(nn, hf, tok, *, name, path, remote, output_device):
    from interplab.models.backends.nnsight_backend import NNsightBackend
    from interplab.models.lab_model import LabModel

    cfg = hf.config
    n_heads = int(getattr(cfg, "num_attention_heads", None) or cfg.n_head)
    d_head = int(getattr(cfg, "head_dim", None) or (getattr(cfg, "hidden_size", None) or cfg.n_embd) // n_heads)
    impl = NNsightBackend(hf, n_heads, d_head, nn=nn, remote=remote)
    return LabModel(impl, tok, name=name, path=path, output_device=output_device)
