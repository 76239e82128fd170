"""The two folders interplab writes to, named in one place.

home  ($INTERPLAB_HOME, default ~/.interplab): the user's own state (runs, uploads, the user zoo); never shared
      between users or test sessions.
cache ($INTERPLAB_CACHE, default ~/.cache/interplab): files derived deterministically from something else and safe
      to delete (random real-size checkpoints, de-quantized GGUF weights); each entry appears only once complete."""
from __future__ import annotations

import os
from pathlib import Path


def interplab_home(root: str | os.PathLike | None = None) -> Path:
    """The interplab data folder: `root`, else $INTERPLAB_HOME, else ~/.interplab."""
    if root is not None:
        return Path(root).expanduser()
    env = os.environ.get("INTERPLAB_HOME")
    return Path(env).expanduser() if env else Path.home() / ".interplab"


def cache_root() -> Path:
    """The cache of derived files: $INTERPLAB_CACHE, else ~/.cache/interplab."""
    env = os.environ.get("INTERPLAB_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "interplab"
