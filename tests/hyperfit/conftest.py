"""Shared tiny random checkpoints for the hyperfitting tests (loaded once per session)."""
import pytest
import torch


@pytest.fixture(scope="session")
def hf_pair(tmp_path_factory):
    """Two random 2-layer Llama-GQA models with the same word-level tokenizer, and held-out texts."""
    import interplab
    from interplab.testing import make_random_checkpoint

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("hyperfit_models")
    pa = make_random_checkpoint("llama", root / "base", n_layers=2, d_model=32, n_heads=4, n_kv_heads=2, vocab=64,
                                seed=0)
    pb = make_random_checkpoint("llama", root / "target", n_layers=2, d_model=32, n_heads=4, n_kv_heads=2, vocab=64,
                                seed=1)
    a = interplab.load_model(str(pa), device="cpu")
    b = interplab.load_model(str(pb), device="cpu")
    texts = [" ".join(f"w{(i * 7 + j * 3 + (j * j) % 5) % 50}" for j in range(24 + i)) for i in range(6)]
    return a, b, texts


@pytest.fixture(autouse=True)
def _one_thread():
    """The CI machine has 2 shared cores; a second thread makes tiny training steps ~20x slower under contention."""
    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(prev)
