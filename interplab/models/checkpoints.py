"""Is a directory a complete, intact Hugging Face checkpoint? One check for the loader, training and the zoo.

A checkpoint directory holds `config.json` and safetensors weights (`model.safetensors`, or shards listed in
`model.safetensors.index.json`). Checkpoints that interplab saves also hold `checksums.json`: the sha256 of every
weight file, so flipped bytes that keep a valid safetensors header are caught too."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from interplab.core.errors import CheckpointError

__all__ = ["CHECKSUMS", "sha256_file", "validate_checkpoint", "verify_checksums"]

CHECKSUMS = "checksums.json"
_REBUILD = "If this is a zoo organism, rebuild it explicitly with `interplab zoo train NAME --force`."


def sha256_file(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def validate_checkpoint(path, verify_checksums: bool = True, *, allow_pickle: bool = False) -> Path:
    """`path` if it is a complete checkpoint, else a `CheckpointError` saying what is wrong and what to do.

    Checks that config.json parses, that the weights (single file or every shard of the index) exist and their
    safetensors headers read (which also catches truncation), and with `verify_checksums` that every file listed
    in checksums.json (when there is one) matches its sha256. Pickle weights (`*.bin`, `*.pt`) are refused unless
    `allow_pickle` — unpickling a file can run arbitrary code."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"checkpoint directory {path} does not exist")
    cfg = path / "config.json"
    if not cfg.is_file():
        raise CheckpointError(f"{path} has no config.json: it is not a Hugging Face checkpoint directory "
                              "(save one with model.save_pretrained(dir) and tokenizer.save_pretrained(dir))")
    try:
        json.loads(cfg.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{cfg} is not valid JSON ({e}); the checkpoint is corrupt") from None
    for w in _weight_files(path, allow_pickle):
        if w.suffix == ".safetensors":
            _check_safetensors(w)
    if verify_checksums:
        _verify_checksums(path)
    return path


def verify_checksums(path) -> dict[str, str]:
    """Check every file listed in `path/checksums.json` against its sha256; returns the listing ({} when the
    directory has no checksums.json)."""
    path = Path(path)
    sums = path / CHECKSUMS
    if not sums.is_file():
        return {}
    try:
        expected = json.loads(sums.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{sums} is not valid JSON ({e}); the checkpoint is corrupt") from None
    for name, digest in expected.items():
        f = path / name
        if not f.is_file():
            raise CheckpointError(f"{f} listed in {CHECKSUMS} is missing. {_REBUILD}")
        if sha256_file(f) != digest:
            raise CheckpointError(f"{f} does not match its sha256 in {CHECKSUMS}: the weights are corrupt or were "
                                  f"modified. {_REBUILD}")
    return dict(expected)


_verify_checksums = verify_checksums  # validate_checkpoint's flag of the same name shadows it there


def _weight_files(path: Path, allow_pickle: bool = False) -> list[Path]:
    single = path / "model.safetensors"
    index = path / "model.safetensors.index.json"
    if single.is_file():
        return [single]
    if index.is_file():
        try:
            shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, AttributeError) as e:
            raise CheckpointError(f"{index} is not a valid safetensors index ({type(e).__name__}: {e})") from None
        for shard in shards:
            if not (path / shard).is_file():
                raise CheckpointError(f"{path} is missing weight shard {shard} listed in {index.name}")
        return [path / s for s in shards]
    legacy = sorted(p.name for p in [*path.glob("*.bin"), *path.glob("*.pt")])
    if legacy and allow_pickle:
        return [path / n for n in legacy]
    if legacy:
        raise CheckpointError(
            f"{path} holds pickle weights {legacy} and no safetensors. interplab refuses pickle by default because "
            "unpickling can run arbitrary code. Convert once with model.save_pretrained(dir, safe_serialization="
            "True), or, if you trust the file, load it with load_model(..., allow_pickle=True).")
    raise CheckpointError(f"{path} has no model.safetensors weights: they are missing. {_REBUILD}")


def _check_safetensors(file: Path) -> None:
    from safetensors import safe_open

    try:
        # opening parses the header and checks that the data section has exactly the declared size
        with safe_open(str(file), framework="numpy") as fh:
            fh.keys()
    except Exception as e:  # noqa: BLE001 - safetensors raises several types for truncated/corrupt headers
        raise CheckpointError(f"{file} is corrupt or truncated ({type(e).__name__}: {e}); delete the directory and "
                              f"re-save or retrain it. {_REBUILD}") from None
