"""The quickstart example runs end to end (on a random checkpoint, and on the shipped default organism)."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(args, tmp_path):
    return subprocess.run([sys.executable, str(ROOT / "examples" / "quickstart.py"), *args, "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)


def test_quickstart_on_a_random_checkpoint(llama_ckpt, tmp_path):
    out = _run(["--model", str(llama_ckpt)], tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "steered:" in out.stdout and (tmp_path / "attention.html").stat().st_size > 100_000


def test_quickstart_on_the_default_organism(tmp_path):
    from interplab.zoo import resolve

    try:
        resolve("toy-chat")
    except Exception as e:  # the organism is shipped with the package; say so loudly if it is not
        pytest.fail(f"zoo:toy-chat is not available: {e}")
    out = _run([], tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "toy-chat" in out.stdout
