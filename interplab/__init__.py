"""interplab: a mechanistic-interpretability workbench.

One hook layer over TransformerLens's TransformerBridge and nnsight (`load_model`, `LabModel.run/generate`, canonical
site names, explicit `Edit` objects) carries six published methods; see README.md."""
from __future__ import annotations

import os as _os

# Quiet, offline-friendly defaults; an explicit user setting always wins.
_os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from interplab.core.errors import (  # noqa: E402
    CheckpointError,
    ConfigError,
    DataError,
    InputError,
    InterplabError,
    MissingDependencyError,
    ModelNotFoundError,
    RemoteError,
    ResultsError,
    ShapeError,
    SiteError,
    UnknownTokenWarning,
)

__version__ = "0.1.0"


def load_model(name_or_path, backend: str = "bridge", device=None, dtype=None, **kwargs):
    """Load a model organism (`zoo:NAME`), a local HF checkpoint directory or a hub id as a `LabModel`."""
    from interplab.models.loading import load_model as _load  # no torch import until the name resolves

    return _load(name_or_path, backend=backend, device=device, dtype=dtype, **kwargs)


def harvest(model, inputs, sites, out_dir=None, **kwargs):
    """Stream activations of `sites` over `inputs` to resumable safetensors shards in `out_dir` (or RAM when None)
    and return an `ActivationStore` read lazily; see `interplab.models.harvest.harvest`."""
    from interplab.models.harvest import harvest as _harvest

    return _harvest(model, inputs, sites, out_dir, **kwargs)


__all__ = [
    "load_model", "harvest", "__version__", "InterplabError", "ModelNotFoundError", "CheckpointError", "SiteError",
    "InputError", "ShapeError", "DataError", "ConfigError", "MissingDependencyError", "ResultsError",
    "RemoteError",
    "UnknownTokenWarning",
]
