"""Bad inputs give clear, typed errors."""
import subprocess
import sys
import time

import pytest

import interplab
from interplab.core.errors import CheckpointError, InputError, InterplabError, ModelNotFoundError, SiteError


def test_unknown_hub_id_fails_fast_offline():
    t = time.perf_counter()
    with pytest.raises(ModelNotFoundError) as e:
        interplab.load_model("no-such-org/no-such-model-xyz")
    assert time.perf_counter() - t < 2.0
    assert "no-such-org/no-such-model-xyz" in str(e.value) and "zoo:" in str(e.value)


def test_unknown_id_fails_fast_in_a_fresh_process():
    code = ("import time,interplab;t=time.perf_counter()\n"
            "try: interplab.load_model('no-such-org/model')\n"
            "except interplab.ModelNotFoundError: print(time.perf_counter()-t)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"})
    assert float(out.stdout.strip()) < 2.0, out.stderr


def test_missing_directory_and_bad_backend(tmp_path):
    with pytest.raises(ModelNotFoundError, match="no checkpoint directory"):
        interplab.load_model(str(tmp_path / "nope" / "deeper"))
    with pytest.raises(InputError, match="backend"):
        interplab.load_model(str(tmp_path), backend="vllm")


def test_corrupt_checkpoints(tmp_path, llama_ckpt):
    import shutil

    with pytest.raises(CheckpointError, match="config.json"):
        interplab.load_model(str(tmp_path))
    bad = tmp_path / "bad"
    shutil.copytree(llama_ckpt, bad)
    (bad / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="no model.safetensors"):
        interplab.load_model(str(bad))
    (bad / "model.safetensors").write_bytes(b"\x00garbage")
    with pytest.raises(CheckpointError, match="corrupt"):
        interplab.load_model(str(bad))


def test_zoo_names_verify_checksums(tmp_path, llama_ckpt, monkeypatch):
    import json
    import shutil

    from interplab.models.checkpoints import sha256_file

    org = tmp_path / "home" / "zoo" / "my-organism"
    shutil.copytree(llama_ckpt, org)
    monkeypatch.setenv("INTERPLAB_HOME", str(tmp_path / "home"))
    (org / "checksums.json").write_text(json.dumps({"model.safetensors": sha256_file(org / "model.safetensors")}))
    assert interplab.load_model("zoo:my-organism").n_layers == 3
    (org / "checksums.json").write_text(json.dumps({"model.safetensors": "0" * 64}))
    with pytest.raises(CheckpointError, match="sha256"):
        interplab.load_model("zoo:my-organism")
    interplab.load_model(str(org))  # a plain directory is not hashed on every load


def test_bad_sites(llama):
    with pytest.raises(SiteError, match="out of range.*3 layers") as e:
        llama.run("w1", capture=["resid_post.7"])
    assert "resid_pre.L" in str(e.value)
    with pytest.raises(SiteError, match="unknown site"):
        llama.run("w1", capture=["resid_middle.0"])
    with pytest.raises(SiteError, match="needs a layer index"):
        llama.run("w1", capture=["attn_z"])
    with pytest.raises(SiteError, match="not captured"):
        llama.run("w1", capture=["resid_post.0"]).cache["resid_post.1"]
    assert issubclass(SiteError, InterplabError)


def test_bad_inputs(llama):
    for bad in ["", "   ", [], [[]]]:
        with pytest.raises(InputError):
            llama.run(bad)
    with pytest.raises(InputError, match="longer than the model's context"):
        llama.run("w1 " * 500)
    with pytest.raises(InputError, match="exceeds"):
        llama.generate("w1 " * 100, max_new_tokens=100)
    with pytest.raises(InputError, match="Edit"):
        llama.run("w1", edits=["resid_post.0"])
    with pytest.raises(InputError, match="vocab|token ids"):
        llama.run([[1, 2, 10_000]])


def test_truncated_gguf_is_a_typed_error_naming_the_file(tmp_path, monkeypatch):
    """Issue 49: the first 5 MB of SmolLM2's GGUF made the gguf reader raise an untyped `ValueError: cannot reshape
    array ...`; it is a CheckpointError naming the file, its size and what to do, and nothing is cached."""
    from interplab.models import real

    spec = real.real_model("smollm2-135m-instruct")
    parts = real.part_paths(spec)
    if parts is None:
        pytest.fail("SmolLM2's GGUF is not installed; `bash scripts/setup.sh install` installs the real models")
    bad = tmp_path / "SmolLM2-truncated.gguf"
    with open(parts[0], "rb") as f:
        bad.write_bytes(f.read(5_000_000))
    monkeypatch.setenv("INTERPLAB_REAL_CACHE", str(tmp_path / "cache"))
    with pytest.raises(CheckpointError) as e:
        interplab.load_model(str(bad))
    msg = str(e.value)
    assert str(bad) in msg and "truncated" in msg and "holds 5,000,000 bytes" in msg and "Download it again" in msg
    assert "98,36" in msg                # where the header says the tensor data ends (the intact file's size)
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file() and not p.name.endswith(".lock")]
    (tmp_path / "head.gguf").write_bytes(bad.read_bytes()[:100_000])   # cut inside the header (the vocabulary)
    with pytest.raises(CheckpointError, match="ends inside its own header"):
        interplab.load_model(str(tmp_path / "head.gguf"))
    (tmp_path / "junk.gguf").write_bytes(b"not a gguf at all")
    with pytest.raises(CheckpointError, match="not a readable GGUF"):
        interplab.load_model(str(tmp_path / "junk.gguf"))
