"""Shared fixtures: offline environment, random checkpoints per architecture, loaded models per backend."""
from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["WANDB_MODE"] = "disabled"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if os.environ.get("PYTEST_XDIST_WORKER"):
    # two workers on two cores: one intra-op thread each, in the worker and in every subprocess it starts (servers,
    # CLI, snippets); two workers at two threads each oversubscribe the cores (5-10x slower matrix code)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(var, "1")

# The user's own state never reaches a test: runs, uploads and the user zoo of the person running the suite
# (~/.interplab or their $INTERPLAB_HOME) would be offered by the pages' saved-run sections and change what a test
# reads (issue 24 §4). One empty home for the whole session, set before anything imports interplab, inherited by
# every subprocess (servers, CLI, snippets); tests that need a home of their own still monkeypatch it.
import tempfile  # noqa: E402

USER_INTERPLAB_HOME = os.environ.get("INTERPLAB_HOME")   # what the user had, for the isolation test only
# One root per pytest run, made by the first process that loads this file (the xdist controller, or a plain run)
# and removed when that process ends, so a run leaves nothing in /tmp (random real-size checkpoints are GBs; a full
# disk failed CI). Each process (controller, every worker, a child pytest) gets its own empty home inside it; the
# cache of derived files (random checkpoints) is shared, so workers build each checkpoint once.
# INTERPLAB_KEEP_TEST_HOME=1 keeps the root for inspection.
_root = os.environ.get("INTERPLAB_TEST_ROOT")
OWNS_TEST_ROOT = not (_root and os.path.isdir(_root))
if OWNS_TEST_ROOT:
    # real models' de-quantized checkpoints (minutes to build) stay where the user keeps them, between runs
    from pathlib import Path as _Path

    os.environ.setdefault("INTERPLAB_REAL_CACHE", str(
        _Path(os.environ.get("INTERPLAB_CACHE") or _Path.home() / ".cache" / "interplab").expanduser() / "real"))
    _root = tempfile.mkdtemp(prefix="interplab-test-home-")
    os.environ["INTERPLAB_TEST_ROOT"] = _root
    os.environ["INTERPLAB_CACHE"] = os.path.join(_root, "cache")
TEST_ROOT = _root
SESSION_HOME = tempfile.mkdtemp(prefix="home-", dir=TEST_ROOT)
os.environ["INTERPLAB_HOME"] = SESSION_HOME
os.environ["INTERPLAB_SESSION_HOME"] = SESSION_HOME

import pytest  # noqa: E402


def _verdict_stability_knobs() -> None:
    """Perturbations for the verdict-stability runs (issue 24 §1, `scripts/verdict_stability.sh`); unset, nothing
    changes. INTERPLAB_TEST_THREADS pins torch's intra-op threads. INTERPLAB_TEST_WEIGHT_NOISE=r adds
    r·rms(W)·N(0, 1) (seeded, so a rerun is identical) to every tensor of every HF checkpoint loaded (the hand-built
    organisms, the shipped zoo, random checkpoints) and to the planted dictionary of SAELens's synthetic features:
    relative to the tensor's scale (the model's, for an all-zero tensor), so a weight planted at exactly 0 moves too."""
    threads = os.environ.get("INTERPLAB_TEST_THREADS") or ("1" if os.environ.get("PYTEST_XDIST_WORKER") else None)
    noise = float(os.environ.get("INTERPLAB_TEST_WEIGHT_NOISE", 0))
    if threads:
        import torch

        torch.set_num_threads(int(threads))
    if not noise:
        return
    import torch
    from transformers import PreTrainedModel

    def perturb(module) -> None:
        g = torch.Generator().manual_seed(0)
        ts = [p for p in [*module.parameters(), *module.buffers()]
              if p.is_floating_point() and p.device.type != "meta" and p.numel()]
        if not ts:
            return
        with torch.no_grad():
            overall = torch.cat([t.detach().float().reshape(-1) for t in ts]).pow(2).mean().sqrt()
            for p in ts:
                rms = p.float().pow(2).mean().sqrt()
                scale = rms if rms > 0 else overall  # an all-zero (planted-off) tensor moves at the model's scale
                p.add_((noise * scale * torch.randn(p.shape, generator=g)).to(p.dtype))

    original = PreTrainedModel.from_pretrained.__func__

    def from_pretrained(cls, *args, **kwargs):
        model = original(cls, *args, **kwargs)
        perturb(model)
        return model

    PreTrainedModel.from_pretrained = classmethod(from_pretrained)
    try:
        from sae_lens.synthetic import FeatureDictionary
    except ImportError:
        return
    init = FeatureDictionary.__init__

    def dictionary_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        perturb(self)

    FeatureDictionary.__init__ = dictionary_init


_verdict_stability_knobs()
if os.environ.get("INTERPLAB_OUTPUT_SNAPSHOT"):  # before/after digests of every run's numbers (tests/output_snapshot.py)
    from tests.output_snapshot import install as _install_snapshot

    _install_snapshot(os.environ["INTERPLAB_OUTPUT_SNAPSHOT"])

ARCHS = ("gpt2", "llama", "qwen2", "mistral")


@pytest.fixture(scope="session")
def checkpoint_factory(tmp_path_factory):
    """factory(arch, **kw) -> Path of a random checkpoint; identical requests share one directory."""
    from interplab.testing import make_random_checkpoint

    made = {}

    def make(arch="llama", **kw):
        key = (arch, tuple(sorted(kw.items())))
        if key not in made:
            made[key] = make_random_checkpoint(arch, tmp_path_factory.mktemp(f"ckpt_{arch}"), **kw)
        return made[key]

    return make


@pytest.fixture(scope="session")
def model_factory(checkpoint_factory):
    """factory(arch, backend="bridge", dtype=None, **ckpt_kw) -> LabModel, cached for the session."""
    import interplab

    loaded = {}

    def load(arch="llama", backend="bridge", dtype=None, **kw):
        key = (arch, backend, str(dtype), tuple(sorted(kw.items())))
        if key not in loaded:
            loaded[key] = interplab.load_model(checkpoint_factory(arch, **kw), backend=backend, device="cpu",
                                               dtype=dtype)
        return loaded[key]

    return load


@pytest.fixture(scope="session")
def llama_ckpt(checkpoint_factory):
    return checkpoint_factory("llama", n_layers=3)


@pytest.fixture(scope="session")
def llama(model_factory):
    return model_factory("llama", n_layers=3)


@pytest.fixture(scope="session")
def app_server(tmp_path_factory):
    """One `interplab app` server (default model, a home of its own) for every browser test that needs no other
    settings: the screenshots and the heatmap click share it (each server start costs ~10 s and a model load)."""
    import subprocess
    import sys
    from pathlib import Path

    from tests.app.test_app_e2e import _free_port, _stop, _wait_healthy

    home = tmp_path_factory.mktemp("app_server_home")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "WANDB_MODE": "disabled",
           "STREAMLIT_BROWSER_GATHER_USAGE_STATS": "false", "INTERPLAB_HOME": str(home)}
    env.pop("INTERPLAB_DEFAULT_MODEL", None)
    # INTERPLAB_WALK_MODEL (unset in the suite) runs the same browser walk on another model, e.g. a real one:
    # `INTERPLAB_WALK_MODEL=real:smollm2-135m-instruct INTERPLAB_SCREENSHOT_DIR=shots pytest
    # tests/app/test_screenshots.py -s` (issue 48's walk at full defaults; method pages hand off to jobs)
    walk_model = os.environ.get("INTERPLAB_WALK_MODEL")
    # the server must import this checkout's interplab, whatever the working directory
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    log = open(home / "server.log", "w")
    model = ["--model", walk_model] if walk_model else []
    proc = subprocess.Popen([sys.executable, "-m", "interplab.cli", "app", "--port", str(port), *model], stdout=log,
                            stderr=subprocess.STDOUT, env=env, start_new_session=True, cwd=str(home))
    try:
        _wait_healthy(url, proc, timeout=120)
        yield url
    finally:
        _stop(proc)
        log.close()


def pytest_collection_modifyitems(config, items):
    """Scheduling under pytest-xdist (`setup.sh test` runs two workers, `--dist loadgroup`): the tests that start a
    server and a browser (marker e2e) share one group, so one worker runs them one after another and they never
    compete with each other for the two cores; a module whose tests share a module- or class-scoped fixture is one
    group, so that fixture is built once; every other test is scheduled on its own. The browser group goes first: it
    is the longest unit, and starting it last would leave one worker idle at the end."""
    def group(item) -> str | None:
        if item.get_closest_marker("e2e"):
            return "browser"
        defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
        if any(d.scope in ("module", "class") for fds in defs.values() for d in fds):
            return item.module.__name__
        return None

    for item in items:
        g = group(item)
        if g and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(g))
    items.sort(key=lambda it: 0 if it.get_closest_marker("e2e") else 1)  # stable: collection order otherwise


def pytest_unconfigure(config):
    if OWNS_TEST_ROOT and not os.environ.get("INTERPLAB_KEEP_TEST_HOME"):
        import shutil

        shutil.rmtree(TEST_ROOT, ignore_errors=True)
