"""Shared app state: the bounded model cache and the default model.

One process-wide LRU cache of loaded models, shared by every browser session (as `st.cache_resource` would be),
bounded in entries AND bytes: at most `INTERPLAB_APP_MAX_MODELS` models (default 2) whose parameters together take
at most `INTERPLAB_APP_MAX_MODEL_BYTES` (default 8 GiB); the least recently used model is dropped first, and a
single model larger than the byte budget is still served (alone). Keys are everything that changes the loaded object:
name (a local path is resolved to an absolute path), backend, device, dtype, and the directory the name resolves to
with its modification stamp (so a retrained checkpoint or rebuilt organism is reloaded and a removed one is not
served). Sessions share a cached `LabModel` safely: its forwards are serialized and edits are per call
(docs/reliability.md), and pages never mutate it."""
from __future__ import annotations

import os
import threading
from collections import OrderedDict
from pathlib import Path

import streamlit as st

from interplab.core.errors import InputError, InterplabError

DEFAULT_MODEL = "zoo:toy-chat"
DEFAULT_MODEL_ENV = "INTERPLAB_DEFAULT_MODEL"
BACKENDS = ("bridge", "nnsight")
DTYPES = ("float32", "bfloat16", "float16")
FALLBACK_ZOO_NAMES = ("toy-chat", "toy-base", "toy-base-s2", "text-base")

__all__ = [
    "DEFAULT_MODEL", "BACKENDS", "DTYPES", "default_model", "get_model", "try_get_model", "normalize_name",
    "zoo_names", "zoo_organisms", "real_models", "devices", "model_help",
]


def default_model() -> str:
    """The model pages start with: $INTERPLAB_DEFAULT_MODEL (set by `interplab app --model`), else zoo:toy-chat."""
    return (os.environ.get(DEFAULT_MODEL_ENV) or "").strip() or DEFAULT_MODEL


def normalize_name(name: str) -> str:
    """A stable cache key for a model name: local directories become absolute paths."""
    if not isinstance(name, str) or not name.strip():
        raise InputError("no model given: pick a zoo organism or type a local checkpoint directory")
    name = name.strip()
    if name.startswith("zoo:"):
        return name
    p = Path(name).expanduser()
    return str(p.resolve()) if p.exists() else name


def _stamp(name: str) -> tuple[str, float]:
    """Where `name` resolves on disk and the modification time of its weights/config: a zoo name's organism
    directory (so a rebuilt, moved or removed organism is never served from the cache), a local checkpoint
    directory, or ("", 0) for names that do not resolve to a directory (real models, hub ids)."""
    p = Path(name)
    if name.startswith("zoo:"):
        from interplab.models import zoo_dirs

        p = zoo_dirs.find(name[4:]) or Path("")
    if not p.is_dir() or str(p) in ("", "."):
        return "", 0.0
    times = [q.stat().st_mtime for q in (p / "model.safetensors", p / "config.json",
                                        p / "model.safetensors.index.json") if q.exists()]
    return str(p), max(times, default=0.0)


class ModelCache:
    """LRU of loaded models bounded by `max_entries` and `max_bytes` (parameter bytes); thread-safe. Loads of
    the same key from several sessions at once happen once."""

    def __init__(self, max_entries: int, max_bytes: int):
        self.max_entries, self.max_bytes = int(max_entries), int(max_bytes)
        self._items: OrderedDict = OrderedDict()
        self._lock = threading.Lock()
        self._loading: dict = {}

    @staticmethod
    def nbytes(model) -> int:
        hf = getattr(model, "hf_model", model)
        return sum(p.numel() * p.element_size() for p in hf.parameters())

    def total_bytes(self) -> int:
        with self._lock:
            return sum(b for _, b in self._items.values())

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key, load):
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key][0]
            gate = self._loading.setdefault(key, threading.Lock())
        with gate:  # one load per key; other sessions asking for it wait here
            with self._lock:
                if key in self._items:
                    return self._items[key][0]
            model = load()
            with self._lock:
                self._items[key] = (model, self.nbytes(model))
                self._loading.pop(key, None)
                self._evict()
            return model

    def _evict(self) -> None:
        while len(self._items) > 1 and (len(self._items) > self.max_entries
                                        or sum(b for _, b in self._items.values()) > self.max_bytes):
            self._items.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


MODELS = ModelCache(int(os.environ.get("INTERPLAB_APP_MAX_MODELS", 2)),
                    int(os.environ.get("INTERPLAB_APP_MAX_MODEL_BYTES", 8 * 2**30)))


def _load(name: str, backend: str, device: str, dtype: str, stamp: tuple[str, float]):
    import interplab

    def load():
        with st.spinner(f"Loading {name}..."):
            return interplab.load_model(name, backend=backend, device=device, dtype=dtype)

    return MODELS.get((name, backend, device, dtype, stamp), load)


def get_model(name: str, backend: str = "bridge", device: str = "cpu", dtype: str = "float32"):
    """The LabModel for (name, backend, device, dtype), loaded once and kept in the bounded cache `MODELS`.

    Raises the loader's `InterplabError` (unknown model, bad checkpoint, ...) unchanged; errors are not cached."""
    if backend not in BACKENDS:
        raise InputError(f"unknown backend {backend!r}; use one of {BACKENDS}")
    key = normalize_name(name)
    return _load(key, str(backend), str(device), str(dtype), _stamp(key))


def model_help(name: str) -> str:
    """What to do when `name` cannot be loaded (markdown)."""
    zoo = name.strip()[4:] if isinstance(name, str) and name.strip().startswith("zoo:") else None
    lines = ["**What to do:**",
             "- type the path of a local Hugging Face checkpoint directory (config.json + model.safetensors + "
             "tokenizer files) in the sidebar's *Local checkpoint* box, or"]
    if zoo:
        lines.append(f"- build the model organism: `interplab zoo train {zoo}` (then reload this page), or")
    else:
        lines.append("- pick a zoo organism in the sidebar (build one with `interplab zoo train toy-chat`), or")
    lines.append("- start the app on another model: `interplab app --model PATH_OR_zoo:NAME`.")
    return "\n".join(lines)


def try_get_model(name: str, backend: str = "bridge", device: str = "cpu", dtype: str = "float32"):
    """(model, None) or (None, message): never raises, so a page can explain instead of crashing."""
    try:
        return get_model(name, backend=backend, device=device, dtype=dtype), None
    except InterplabError as exc:
        return None, str(exc)
    except Exception as exc:  # noqa: BLE001 - a page must not crash on a model it cannot load
        return None, f"{type(exc).__name__}: {exc}"


def zoo_organisms() -> list[tuple[str, bool]]:
    """[(name, available)] for the zoo's organisms (available = weights shipped or built locally)."""
    try:
        from interplab.zoo import list_organisms

        rows = [(str(r.name), bool(getattr(r, "available", True))) for r in list_organisms()]
        if rows:
            return rows
    except Exception:  # noqa: BLE001 - the picker must work without a zoo
        pass
    return [(n, False) for n in FALLBACK_ZOO_NAMES]


def real_models() -> dict[str, str | None]:
    """The registry's real pretrained models: {"real:NAME": None if installed, else the command that installs it}."""
    from interplab.models.real import REAL_MODELS, is_installed

    return {m.id: None if is_installed(m) else f"interplab models install {m.name}" for m in REAL_MODELS.values()}


def zoo_names() -> list[str]:
    """Names of the zoo's organisms."""
    return [n for n, _ in zoo_organisms()]


def devices() -> list[str]:
    out = ["cpu"]
    try:
        import torch

        if torch.cuda.is_available():
            out += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            out.append("mps")
    except Exception:  # noqa: BLE001
        pass
    return out
