"""Refused by default (docs/reliability.md): pickle weights (the error names the flag that allows them),
checkpoints' own Python code (trust_remote_code), a dashboard reachable from other machines."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

import interplab
from interplab.core.errors import CheckpointError
from interplab.testing import make_random_checkpoint


@pytest.fixture(scope="module")
def pickle_ckpt(tmp_path_factory):
    from transformers import AutoModelForCausalLM

    src = make_random_checkpoint("llama", tmp_path_factory.mktemp("pk") / "src", n_layers=1, d_model=32, n_heads=4,
                                 n_kv_heads=2, vocab=48)
    out = tmp_path_factory.mktemp("pk") / "pickle"
    out.mkdir()
    torch.save(AutoModelForCausalLM.from_pretrained(src).state_dict(), out / "pytorch_model.bin")
    for f in src.iterdir():  # the same config and tokenizer, pickle weights instead of safetensors
        if f.suffix != ".safetensors":
            (out / f.name).write_bytes(f.read_bytes())
    return src, out


def test_pickle_weights_are_refused_with_the_flag_named(pickle_ckpt):
    _, path = pickle_ckpt
    with pytest.raises(CheckpointError, match=r"allow_pickle=True") as e:
        interplab.load_model(path)
    assert "arbitrary code" in str(e.value)


def test_allow_pickle_loads_the_same_model(pickle_ckpt):
    src, path = pickle_ckpt
    ids = [[3, 7, 9, 11]]
    a = interplab.load_model(src).run(ids).logits
    b = interplab.load_model(path, allow_pickle=True).run(ids).logits
    torch.testing.assert_close(a, b, atol=1e-6, rtol=0)


def test_remote_code_is_not_run_unless_asked(tmp_path):
    """A checkpoint whose config points at its own modelling code: without trust_remote_code the code never runs
    (the native class for its model_type loads, or a typed error says why not); with it, it does."""
    src = make_random_checkpoint("llama", tmp_path / "m", n_layers=1, d_model=32, n_heads=4, n_kv_heads=2, vocab=48)
    flag = tmp_path / "code_ran"
    (src / "evil_model.py").write_text(f"open({str(flag)!r}, 'w').write('x')\n"
                                       "from transformers import LlamaForCausalLM\n"
                                       "class EvilForCausalLM(LlamaForCausalLM):\n    pass\n")
    cfg = json.loads((src / "config.json").read_text())
    cfg["auto_map"] = {"AutoModelForCausalLM": "evil_model.EvilForCausalLM"}
    (src / "config.json").write_text(json.dumps(cfg))
    try:
        interplab.load_model(src)
    except interplab.InterplabError:
        pass
    assert not flag.exists()
    # the check can see code running: trust_remote_code=True runs it (in a child process, so the dynamically
    # registered class cannot leak into this test session)
    code = ("import interplab\ntry:\n    interplab.load_model(%r, trust_remote_code=True)\n"
            "except interplab.InterplabError:\n    pass\n" % str(src))
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300,
                   env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "hf_modules")})
    assert flag.exists()


def test_app_binds_loopback_by_default():
    from interplab.cli import app_command, build_parser

    args = build_parser(["app"]).parse_args(["app"])
    cmd = app_command(args)
    assert cmd[cmd.index("--server.address") + 1] == "127.0.0.1"
