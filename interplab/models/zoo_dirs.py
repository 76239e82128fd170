"""Where zoo organisms live on disk: the weights shipped inside the package (`interplab/zoo/weights/<name>/`),
then the user zoo (`$INTERPLAB_HOME/zoo/<name>`, default `~/.interplab/zoo/<name>`).

The loader needs only this lookup; recipes, builds and model cards are the zoo's (`interplab.zoo`), a layer above."""
from __future__ import annotations

from pathlib import Path

from interplab.core.errors import ModelNotFoundError
from interplab.core.paths import interplab_home

SHIPPED_DIR = Path(__file__).resolve().parent.parent / "zoo" / "weights"


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


def built_names() -> list[str]:
    """Every organism with a checkpoint on disk (shipped or in the user zoo)."""
    names = set()
    for root in (SHIPPED_DIR, user_zoo_dir()):
        if root.is_dir():
            names.update(p.name for p in root.iterdir() if not p.name.startswith(".") and _present(p))
    return sorted(names)


def zoo_name_of(path) -> str | None:
    """"zoo:NAME" when `path` is an organism directory of the shipped or the user zoo, else None (records name zoo
    organisms this way, so they never hold a machine's paths)."""
    p = Path(path).expanduser().resolve()
    for root in (SHIPPED_DIR, user_zoo_dir()):
        if p.parent == root.expanduser().resolve():
            return f"zoo:{p.name}"
    return None


def organism_dir(name: str) -> Path:
    """The checkpoint directory of built organism `name` ("zoo:" prefix optional), not yet validated."""
    name = name[4:] if name.startswith("zoo:") else name
    d = find(name)
    if d is None:
        raise ModelNotFoundError(
            f"zoo organism {name!r} is not built here (looked in {', '.join(str(c) for c in candidates(name))}); "
            f"built organisms: {', '.join(built_names()) or 'none'}. `interplab zoo list` shows every recipe and "
            f"`interplab zoo train {name}` builds one")
    return d
