"""Prepare the wheels that let scripts/gpu_check.py run on the offline GPU machine (run on the CPU machine).

    python scripts/gpu_wheels.py              # rebuild .whl/ under the repo root, print the device command
    python scripts/gpu_wheels.py --out DIR    # the same into DIR (a dry check; the device only sees the repo)

The device tool carries the repository's working tree only (plus up to 8 ignored paths named in `carry`, 64 MiB in
all), and the machine is offline. Its image has Python 3.12, torch and transformers 5.17 but not interplab's stack
(transformer-lens, nnsight, sae-lens, plotly, ...), so this script downloads those as cp312/manylinux wheels,
without dependencies, at the versions constraints.txt pins (the pins stay in one place), adds a stand-in wandb wheel
(see WANDB_INIT), and prints the command to run there; pass carry [".whl"] with it. The real GGUF models cannot
travel: SmolLM2-135M-Instruct's Q4_1 file is 98 MB and Gemma-3-270M's parts 253 MB, over the 64 MiB limit, so the
real_models bench group cannot run there and the command runs `--bench hook_layer` only.

Existing *.whl files and COMMAND.txt in the output folder are deleted first; with the default folder, `/.whl/` is
added to .git/info/exclude so the wheels are never committed. Standard library only; needs pip and an index."""
from __future__ import annotations

import argparse
import base64
import glob
import hashlib
import os
import re
import subprocess
import sys
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = ".whl"
UPLOAD_WARN_MIB = 60  # the device tool's limit is 64 MiB for the tree + carried paths; leave headroom

# What the device image lacks for gpu_check.py, downloaded with --no-deps (so the list is closed by hand).
PACKAGES = [
    "transformers",  # the image has 5.17; transformer-lens 3.9 needs >= 5.9 and interplab runs on the pinned one
    "transformer_lens",
    "better_abc",  # transformer-lens dependency
    "nnsight",
    "greenlet",  # nnsight dependency (compiled: cp312 wheel)
    "sae_lens",
    "simple_parsing",  # sae-lens dependency
    "docstring_parser",  # simple-parsing dependency
    "plotly",  # sae-lens dependency
    "datasets",  # transformer-lens and sae-lens dependency
    "multiprocess",  # datasets dependency (py312-tagged wheel)
    "dill",  # datasets and multiprocess dependency
    "pydantic",  # nnsight dependency; the image's version is unknown, so carry the pinned one
    "pydantic_core",  # pydantic 2.14.4 requires exactly 2.50.5 (compiled: cp312 wheel)
    "typing_extensions",  # pydantic 2.14 needs >= 4.16 and the device image's version is unknown
    "typing_inspection",  # pydantic dependency
    "annotated_types",  # pydantic dependency
]

PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux_2_5_x86_64", "manylinux1_x86_64"]

DEVICE_COMMAND = (
    "python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "
    "{out}/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit; "
    "export HF_HUB_OFFLINE=1 WANDB_MODE=disabled PYTHONUNBUFFERED=1; set -o pipefail; "
    "timeout 470 python3 scripts/gpu_check.py --budget 420 --bench hook_layer 2>&1 | tee $OUT/gpu_check.log")

WANDB_VERSION = "0.0.0"
WANDB_INIT = '''"""A stand-in for wandb, carried to the offline GPU-check machine instead of the 20 MB wandb wheel.

sae_lens imports wandb at import time (sae_lens/config.py, training/sae_trainer.py, ...) but interplab never logs
to it (SAETrainerConfig's LoggingConfig has log_to_wandb=False). The only call on interplab's path is
SAETrainer._build_sparsity_log_dict's `wandb.Histogram(...)`, whose result is never logged. Everything here
behaves as wandb does under WANDB_MODE=disabled: calls do nothing."""
__version__ = "0.0.0"


class _Nothing:
    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs

    def __getattr__(self, name):
        return _nothing

    def __call__(self, *args, **kwargs):
        return None


def _nothing(*args, **kwargs):
    return None


class Histogram(_Nothing):
    pass


class Artifact(_Nothing):
    pass


class Table(_Nothing):
    pass


class Image(_Nothing):
    pass


run = None
config = {}
summary = {}


def init(*args, **kwargs):
    return _Nothing()


log = log_artifact = finish = watch = define_metric = save = login = _nothing


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return _Nothing
'''


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_pins(path: str) -> dict[str, str]:
    """`name==version` lines of a constraints file, keyed by normalized name (case, -, _ and . equivalent)."""
    pins = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;]+)", line)
            if m:
                pins[_norm(m.group(1))] = m.group(2)
    return pins


def download(name: str, version: str, out: str) -> None:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
           "--implementation", "cp"]
    for p in PLATFORMS:
        cmd += ["--platform", p]
    cmd += ["-d", out, f"{name}=={version}"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stdout + r.stderr)
        raise SystemExit(f"pip download {name}=={version} failed (exit {r.returncode})")


def build_wandb_stub(out: str) -> str:
    """Write the stand-in wandb wheel (WANDB_INIT as wandb/__init__.py) into `out`; returns its path.

    sae_lens imports wandb at import time; the real wheel is 20 MB plus dependencies, too much for the 64 MiB upload.
    The stub behaves as wandb under WANDB_MODE=disabled (the device command sets that too)."""
    di = f"wandb-{WANDB_VERSION}.dist-info"
    files = {
        "wandb/__init__.py": WANDB_INIT,
        f"{di}/METADATA": (f"Metadata-Version: 2.1\nName: wandb\nVersion: {WANDB_VERSION}\nSummary: interplab's "
                           "no-op stand-in for wandb on the offline GPU-check machine (not the real package)\n"),
        f"{di}/WHEEL": ("Wheel-Version: 1.0\nGenerator: interplab-wandb-stub\nRoot-Is-Purelib: true\n"
                        "Tag: py3-none-any\n"),
        f"{di}/top_level.txt": "wandb\n",
    }

    def record(data: bytes) -> str:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        return f"sha256={digest},{len(data)}"

    lines = [f"{p},{record(c.encode())}" for p, c in files.items()] + [f"{di}/RECORD,,"]
    files[f"{di}/RECORD"] = "\n".join(lines) + "\n"
    path = os.path.join(out, f"wandb-{WANDB_VERSION}-py3-none-any.whl")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for p, c in files.items():
            info = zipfile.ZipInfo(p, date_time=(1980, 1, 1, 0, 0, 0))  # fixed date: the same bytes every build
            info.external_attr = 0o644 << 16
            z.writestr(info, c, zipfile.ZIP_DEFLATED)
    return path


def ensure_excluded(entry: str = "/.whl/") -> None:
    """Append `entry` to the repository's info/exclude unless it is already there."""
    r = subprocess.run(["git", "rev-parse", "--git-path", "info/exclude"], cwd=ROOT, capture_output=True, text=True)
    path = r.stdout.strip() if r.returncode == 0 and r.stdout.strip() else os.path.join(".git", "info", "exclude")
    path = os.path.join(ROOT, path)
    text = open(path, encoding="utf-8").read() if os.path.exists(path) else ""
    if entry in (line.strip() for line in text.splitlines()):
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(("" if text == "" or text.endswith("\n") else "\n") + entry + "\n")
    print(f"added {entry} to {os.path.relpath(path, ROOT)}")


def tracked_bytes() -> int:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    total = 0
    for rel in out.decode("utf-8", "surrogateescape").split("\0"):
        p = os.path.join(ROOT, rel)
        if rel and os.path.isfile(p):
            total += os.path.getsize(p)
    return total


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=DEFAULT_OUT, help="output folder, relative to the repo root (default: .whl)")
    ap.add_argument("--constraints", default=os.path.join(ROOT, "constraints.txt"), help="file with the pins")
    args = ap.parse_args(argv)
    out = os.path.normpath(os.path.join(ROOT, args.out))
    default_out = out == os.path.join(ROOT, DEFAULT_OUT)

    pins = read_pins(args.constraints)
    missing = [n for n in PACKAGES if _norm(n) not in pins]
    if missing:
        raise SystemExit(f"no pin in {args.constraints} for: {', '.join(missing)}")

    os.makedirs(out, exist_ok=True)
    for stale in glob.glob(os.path.join(out, "*.whl")) + glob.glob(os.path.join(out, "COMMAND.txt")):
        os.remove(stale)
    for name in PACKAGES:
        print(f"downloading {name}=={pins[_norm(name)]}", flush=True)
        download(name, pins[_norm(name)], out)
    print("built", os.path.basename(build_wandb_stub(out)))
    if default_out:
        ensure_excluded()

    wheels = sorted(glob.glob(os.path.join(out, "*.whl")))
    wheel_bytes = sum(os.path.getsize(w) for w in wheels)
    rel = os.path.relpath(out, ROOT)
    inside = not rel.startswith("..")
    command = DEVICE_COMMAND.format(out=rel if inside else DEFAULT_OUT)
    assert len(command) <= 2000, len(command)
    with open(os.path.join(out, "COMMAND.txt"), "w", encoding="utf-8") as f:
        f.write(command + "\n")

    mib = 2 ** 20
    tree = tracked_bytes()
    print(f"\n{len(wheels)} wheels in {out}: {wheel_bytes / mib:.1f} MiB; tracked tree {tree / mib:.1f} MiB; "
          f"together {(tree + wheel_bytes) / mib:.1f} MiB")
    if tree + wheel_bytes > UPLOAD_WARN_MIB * mib:
        print(f"WARNING: over {UPLOAD_WARN_MIB} MiB; the device tool uploads at most 64 MiB (tree + carried paths), "
              "and untracked files that git does not ignore travel too")
    if not inside:
        print(f"NOTE: {out} is outside the repository, which is all the device tool carries; the command below "
              f"expects the wheels in {DEFAULT_OUT}/ (run without --out)")
    print(f"\nDevice command (run tool, carry [\"{rel if inside else DEFAULT_OUT}\"]), also in "
          f"{os.path.join(rel, 'COMMAND.txt') if inside else os.path.join(out, 'COMMAND.txt')}:\n\n{command}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
