"""Truth-Score tests run single-threaded: the CI machine has 2 cores shared by many processes, and oversubscribed
BLAS threads make the many small ops here much slower."""
import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="session")
def toy_random_ckpts(tmp_path_factory):
    """Random checkpoints with the toy organisms' tokenizer (so CtxMem prompts tokenize): {"base", "desc",
    "control"}; desc = base with small weight noise, control = another init seed. 3 layers x 4 heads (L != H)."""
    import torch

    from interplab.data.toy_vocab import build_toy_tokenizer
    from interplab.train.arch import ArchConfig, build_model
    from interplab.train.checkpoint import save_checkpoint

    arch = ArchConfig(family="llama", n_layers=3, d_model=32, d_mlp=64, n_heads=4, n_kv_heads=2, d_head=8, n_ctx=96)
    tok = build_toy_tokenizer()
    root = tmp_path_factory.mktemp("toy_random")
    out = {}
    for role, seed in (("base", 0), ("control", 7)):
        out[role] = save_checkpoint(build_model(arch, tok, seed=seed), tok, root / role)
    desc = build_model(arch, tok, seed=0)
    with torch.no_grad():
        g = torch.Generator().manual_seed(1)
        for p in desc.parameters():
            p.add_(0.05 * p.std() * torch.randn(p.shape, generator=g))
    out["desc"] = save_checkpoint(desc, tok, root / "desc")
    return out
