"""zoo name -> checkpoint directory, with the recipe registry's word on unknown or unbuilt organisms.

The directory lookup itself (shipped weights first, then the user zoo) lives in `interplab.models.zoo_dirs`, below
the loader that needs it; this module adds what only the zoo knows: which names have recipes and how to build them.
"""
from __future__ import annotations

from pathlib import Path

from interplab.core.errors import ModelNotFoundError
from interplab.models.zoo_dirs import SHIPPED_DIR, candidates, find, interplab_home, user_zoo_dir  # noqa: F401
from interplab.models.checkpoints import validate_checkpoint
from interplab.zoo.registry import get_recipe


def resolve(name: str) -> Path:
    """The validated checkpoint directory of zoo organism `name` (with or without the "zoo:" prefix).

    Raises ModelNotFoundError for an unknown name (listing the known ones) or a known but unbuilt organism (saying
    `interplab zoo train <name>`), and CheckpointError for a directory with missing/corrupt weights.
    """
    name = name[4:] if name.startswith("zoo:") else name
    get_recipe(name)  # unknown -> ModelNotFoundError listing known names
    d = find(name)
    if d is None:
        raise ModelNotFoundError(
            f"zoo organism {name!r} is not built (looked in {', '.join(str(c) for c in candidates(name))}). "
            f"Build it with `interplab zoo train {name}` (it is written to {user_zoo_dir() / name})")
    return validate_checkpoint(d)
