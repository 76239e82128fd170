"""The `interplab` CLI: help, errors without tracebacks, `run next-token` end to end, `export`."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from interplab.cli import main
from interplab.figures.export import chromium_available
from interplab.results import list_runs, load_run

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "WANDB_MODE": "disabled"}


def _cli(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "interplab.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=ENV)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    from interplab.testing import make_random_checkpoint

    return make_random_checkpoint("llama", tmp_path_factory.mktemp("cli") / "llama", n_layers=2, d_model=32,
                                  n_heads=4, n_kv_heads=2, vocab=48, seed=1)


def test_help_and_version_in_a_real_process():
    r = _cli("--help")
    assert r.returncode == 0
    for cmd in ("app", "zoo", "run", "export"):
        assert cmd in r.stdout
    r = _cli("--version")
    assert r.returncode == 0 and r.stdout.startswith("interplab ")


@pytest.mark.parametrize("cmd, needle", [
    ("app", "--port"), ("run", "--set"), ("export", "RUN_DIR"), ("zoo", "zoo"),
])
def test_help_of_each_subcommand(cmd, needle, capsys):
    with pytest.raises(SystemExit) as e:
        main([cmd, "--help"])
    assert e.value.code == 0
    assert needle in capsys.readouterr().out


def test_no_command_prints_help(capsys):
    assert main([]) == 0
    assert "usage: interplab" in capsys.readouterr().out


def test_run_list_and_fields(capsys):
    assert main(["run", "--list"]) == 0
    out = capsys.readouterr().out
    assert "next-token" in out and "attention" in out
    assert main(["run", "next-token", "--list"]) == 0
    out = capsys.readouterr().out
    for f in ("model (str)", "prompt (str)", "layer (int)", "top_k (int)", "backend (str)"):
        assert f in out


def test_unknown_experiment_exits_2_without_traceback():
    r = _cli("run", "next-tokn")
    assert r.returncode == 2
    assert r.stderr.startswith("error: unknown experiment 'next-tokn'")
    assert "Did you mean: next-token" in r.stderr and "Traceback" not in r.stderr


def test_bad_overrides_exit_2(capsys, tmp_path):
    assert main(["run", "next-token", "--set", "bogus=1", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: unknown config key(s) ['bogus']") and "top_k (int, default 10)" in err
    assert main(["run", "next-token", "--set", "top_k=many", "--out", str(tmp_path)]) == 2
    assert "top_k: 'many' is not an integer" in capsys.readouterr().err
    assert main(["run", "next-token", "--set", "top_k", "--out", str(tmp_path)]) == 2
    assert "key=value" in capsys.readouterr().err
    assert main(["run", "next-token", "--set", "top_k=0", "--out", str(tmp_path)]) == 2
    assert "top_k must be >= 1" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists() or list_runs(root=tmp_path).empty


def test_missing_model_is_a_user_error(capsys, tmp_path):
    rc = main(["run", "next-token", "--set", f"model={tmp_path / 'nowhere'}", "--out", str(tmp_path)])
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: ") and "nowhere" in err and "Traceback" not in err
    assert list_runs(root=tmp_path).empty  # the failed run is not listed
    failed = list_runs(root=tmp_path, include_failed=True)
    assert list(failed["status"]) == ["failed"]


def test_app_dry_run_binds_localhost(capsys):
    assert main(["app", "--dry-run", "--port", "8765"]) == 0
    out = capsys.readouterr().out
    assert "streamlit run" in out and out.strip().split()[4].endswith("Home.py")
    assert "--server.address 127.0.0.1" in out and "--server.port 8765" in out
    assert "--server.headless true" in out and "--browser.gatherUsageStats false" in out


def test_run_next_token_end_to_end_and_export(ckpt, tmp_path, capsys):
    rc = main(["run", "next-token", "--set", f"model={ckpt}", "--set", "prompt=w1 w2 w1 w3",
               "--set", "layer=1", "--set", "head=2", "--set", "top_k=7", "--out", str(tmp_path)])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    run_path = Path(cap.out.strip().splitlines()[-1])
    assert run_path.is_dir() and run_path.parent == tmp_path / "runs" / "next-token"
    run = load_run(run_path)
    assert run.config["layer"] == 1 and run.config["top_k"] == 7 and run.config["model"] == str(ckpt)

    # independent reference: plain transformers on the same checkpoint
    import torch
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast.from_pretrained(str(ckpt))
    ref = AutoModelForCausalLM.from_pretrained(str(ckpt), attn_implementation="eager").eval()
    ids = tok("w1 w2 w1 w3", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        o = ref(ids, output_attentions=True)
    probs = torch.softmax(o.logits[0, -1].double(), -1)
    p, idx = torch.topk(probs, 7)
    res = run.result("next_token")
    top = res.top
    assert list(top["token_id"]) == idx.tolist()
    np.testing.assert_allclose(top["prob"].to_numpy(), p.numpy(), atol=1e-5)
    assert list(top["piece"]) == tok.convert_ids_to_tokens(idx.tolist())    # the vocabulary entry
    assert list(top["token"]) == [tok.decode([i]) for i in idx.tolist()]   # and the text it stands for

    pattern = res.pattern
    n = ids.shape[1]
    assert pattern.shape == (4, n, n) and res.input_ids == ids[0].tolist() and res.layer == 1
    np.testing.assert_allclose(pattern, o.attentions[1][0].numpy(), atol=1e-5)
    np.testing.assert_allclose(pattern.sum(-1), 1.0, atol=1e-5)
    assert np.all(np.triu(pattern, 1) == 0)  # causal

    figs = run.figures
    assert set(figs) == {"attention", "top_tokens"}
    np.testing.assert_allclose(np.asarray(figs["attention"].data[0].z, dtype=float), pattern[2], atol=1e-6)
    assert (run_path / "figures" / "attention.html").exists()

    # export re-renders every saved figure
    out = tmp_path / "exported"
    fmts = "html,svg" if chromium_available() else "html"
    assert main(["export", str(run_path), "--format", fmts, "--out", str(out)]) == 0
    want = {f"{n}.{f}" for n in ("attention", "top_tokens") for f in fmts.split(",")}
    assert {p.name for p in out.iterdir()} == want | {"plotly.min.js"}   # the HTML figures share one plotly.js
    from interplab.figures.metadata import read_metadata

    meta = read_metadata((out / "attention.html").read_bytes(), "html")   # the run and its config travel along
    assert meta["experiment"] == "next-token" and meta["run"].endswith(run_path.name) and "prompt" in meta["config"]
    if chromium_available():
        assert (out / "attention.svg").read_bytes().lstrip().startswith(b"<svg")
        assert read_metadata((out / "attention.svg").read_bytes(), "svg")["figure"] == "attention"
    capsys.readouterr()
    assert main(["export", str(run_path), "--format", "html", "--out", str(out)]) == 0  # no silent overwrite
    assert "skipped" in capsys.readouterr().err
    assert main(["export", str(run_path), "--format", "jpg"]) == 2
    assert "unsupported format" in capsys.readouterr().err
