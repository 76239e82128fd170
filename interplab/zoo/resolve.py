"""zoo name -> checkpoint directory.

Search order: the weights shipped inside the package (`interplab/zoo/weights/<name>/`), then the user zoo
(`$INTERPLAB_HOME/zoo/<name>`, default `~/.interplab/zoo/<name>`). A directory that exists but has missing or corrupt
weights raises `CheckpointError`; it is never rebuilt silently.
"""
from __future__ import annotations

import os
from pathlib import Path

from interplab.errors import ModelNotFoundError

SHIPPED_DIR = Path(__file__).resolve().parent / "weights"


def interplab_home() -> Path:
    return Path(os.environ.get("INTERPLAB_HOME") or Path.home() / ".interplab").expanduser()


def user_zoo_dir() -> Path:
    return interplab_home() / "zoo"


def candidates(name: str) -> list[Path]:
    return [SHIPPED_DIR / name, user_zoo_dir() / name]


def _present(d: Path) -> bool:
    # a directory counts as "there" once it holds anything but hidden temp files
    return d.is_dir() and any(not p.name.startswith(".") for p in d.iterdir())


def find(name: str) -> Path | None:
    """The first existing checkpoint directory for `name` (not validated), or None."""
    for d in candidates(name):
        if _present(d):
            return d
    return None


def resolve(name: str) -> Path:
    """The validated checkpoint directory of zoo organism `name` (with or without the "zoo:" prefix).

    Raises ModelNotFoundError for an unknown name (listing the known ones) or a known but unbuilt organism (saying
    `interplab zoo train <name>`), and CheckpointError for a directory with missing/corrupt weights.
    """
    from interplab.train.checkpoint import validate_checkpoint
    from interplab.zoo.registry import get_recipe

    name = name[4:] if name.startswith("zoo:") else name
    get_recipe(name)  # unknown -> ModelNotFoundError listing known names
    d = find(name)
    if d is None:
        raise ModelNotFoundError(
            f"zoo organism {name!r} is not built (looked in {', '.join(str(c) for c in candidates(name))}). "
            f"Build it with `interplab zoo train {name}` (it is written to {user_zoo_dir() / name})")
    return validate_checkpoint(d)
