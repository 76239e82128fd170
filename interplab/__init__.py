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


# The two entry points import torch only when called (`import interplab` stays fast); their signatures repeat the
# real functions' so that help(), IDEs and a misspelt keyword see every option (a test keeps them in step).
def load_model(name_or_path, backend: str = "bridge", device=None, dtype=None, *, device_map=None,
               max_memory=None, offload_folder=None, attn_implementation: str = "auto", remote=False,
               output_device="cpu", trust_remote_code: bool = False, allow_pickle: bool = False,
               verbose: bool | None = None):
    """Load a model organism (`zoo:NAME`), a real model (`real:NAME`), a local HF checkpoint directory, a `.gguf`
    file or a hub id as a `LabModel`; every option is documented on `interplab.models.loading.load_model`."""
    from interplab.models.loading import load_model as _load  # no torch import until the name resolves

    return _load(name_or_path, backend=backend, device=device, dtype=dtype, device_map=device_map,
                 max_memory=max_memory, offload_folder=offload_folder, attn_implementation=attn_implementation,
                 remote=remote, output_device=output_device, trust_remote_code=trust_remote_code,
                 allow_pickle=allow_pickle, verbose=verbose)


def harvest(model, inputs, sites, out_dir=None, *, batch_size: int = 32, positions="last", dtype=None, edits=None,
            progress=None, chat: bool | None = None):
    """Stream activations of `sites` over `inputs` to resumable safetensors shards in `out_dir` (or RAM when None)
    and return an `ActivationStore` read lazily; see `interplab.models.harvest.harvest`."""
    from interplab.models.harvest import harvest as _harvest

    return _harvest(model, inputs, sites, out_dir, batch_size=batch_size, positions=positions, dtype=dtype,
                    edits=edits, progress=progress, chat=chat)


__all__ = [
    "load_model", "harvest", "__version__", "InterplabError", "ModelNotFoundError", "CheckpointError", "SiteError",
    "InputError", "ShapeError", "DataError", "ConfigError", "MissingDependencyError", "ResultsError",
    "RemoteError",
    "UnknownTokenWarning",
]
