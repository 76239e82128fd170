"""Shared fixtures: offline environment, random checkpoints per architecture, loaded models per backend."""
from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["WANDB_MODE"] = "disabled"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# The user's own state never reaches a test: runs, uploads and the user zoo of the person running the suite
# (~/.interplab or their $INTERPLAB_HOME) would be offered by the pages' saved-run sections and change what a test
# reads (issue 24 §4). One empty home for the whole session, set before anything imports interplab, inherited by
# every subprocess (servers, CLI, snippets); tests that need a home of their own still monkeypatch it.
import tempfile  # noqa: E402

USER_INTERPLAB_HOME = os.environ.get("INTERPLAB_HOME")   # what the user had, for the isolation test only
SESSION_HOME = tempfile.mkdtemp(prefix="interplab-test-home-")
os.environ["INTERPLAB_HOME"] = SESSION_HOME
os.environ["INTERPLAB_SESSION_HOME"] = SESSION_HOME

import pytest  # noqa: E402


def _verdict_stability_knobs() -> None:
    """Perturbations for the verdict-stability runs (issue 24 §1, `scripts/verdict_stability.sh`); unset, nothing
    changes. INTERPLAB_TEST_THREADS pins torch's intra-op threads. INTERPLAB_TEST_WEIGHT_NOISE=r adds
    r·rms(W)·N(0, 1) (seeded, so a rerun is identical) to every tensor of every HF checkpoint loaded (the hand-built
    organisms, the shipped zoo, random checkpoints) and to the planted dictionary of SAELens's synthetic features:
    relative to the tensor's scale, so a weight planted at exactly 0 moves too."""
    threads, noise = os.environ.get("INTERPLAB_TEST_THREADS"), float(os.environ.get("INTERPLAB_TEST_WEIGHT_NOISE", 0))
    if threads:
        import torch

        torch.set_num_threads(int(threads))
    if not noise:
        return
    import torch
    from transformers import PreTrainedModel

    def perturb(module) -> None:
        g = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for p in list(module.parameters()) + list(module.buffers()):
                if p.is_floating_point() and p.device.type != "meta" and p.numel():
                    rms = p.float().pow(2).mean().sqrt()
                    p.add_((noise * rms * torch.randn(p.shape, generator=g)).to(p.dtype))

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
