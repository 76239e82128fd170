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


from interplab.core.lazy import LazyExports  # noqa: E402

# The entry points are the real functions, imported on first access (interplab.models.loading imports no torch at
# import time, so `import interplab` stays fast and a bad model name is refused before torch loads).
_lazy = LazyExports(__name__)
_lazy.add("models.loading", "load_model")
_lazy.add("models.harvest", "harvest")
__getattr__, __dir__ = _lazy.hooks(globals())

__all__ = [
    "load_model", "harvest", "__version__", "InterplabError", "ModelNotFoundError", "CheckpointError", "SiteError",
    "InputError", "ShapeError", "DataError", "ConfigError", "MissingDependencyError", "ResultsError",
    "RemoteError",
    "UnknownTokenWarning",
]
