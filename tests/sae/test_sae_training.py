"""Model-free SAE tests: training through SAELens SAETrainer on synthetic activations, save -> load round trips
(T7), geometric-median init and the 5.x decoder constraint (T11), the mixing buffer (T5)."""
from __future__ import annotations

import json

import pytest
import torch

sae_lens = pytest.importorskip("sae_lens")

from interplab.sae import SAETrainConfig, geometric_median, train_sae  # noqa: E402
from interplab.sae.training import build_training_sae, _make_trainer_class  # noqa: E402

D = 16


def _synthetic(n_chunks=10_000, rows=64, seed=0):
    """Sparse-feature synthetic activations: x = s @ F + c with 24 ground-truth directions."""
    g = torch.Generator().manual_seed(seed)
    F = torch.randn(24, D, generator=g)
    c = torch.randn(D, generator=g) * 2
    for _ in range(n_chunks):
        s = (torch.rand(rows, 24, generator=g) < 0.1).float() * torch.rand(rows, 24, generator=g) * 3
        yield s @ F + c


@pytest.mark.parametrize("arch", ["standard", "jumprelu", "topk", "gated"])
def test_round_trip(tmp_path, arch):
    out = train_sae(None, _synthetic(), method="activations", site="resid_post.1", architecture=arch,
                    expansion=4, steps=30, batch_tokens=64, lr=1e-3, k=8, out_dir=tmp_path / arch,
                    model_name="synthetic", b_dec_init_tokens=256)
    from sae_lens import SAE

    sae = SAE.load_from_disk(str(out))
    assert sae.cfg.architecture() == arch
    assert sae.cfg.d_sae == 4 * D and sae.cfg.d_in == D
    md = sae.cfg.metadata
    assert md.model_name == "synthetic" and md.hook_name == "blocks.1.hook_resid_post"
    assert md.interplab_site == "resid_post.1" and md.training_mode.startswith("paper")
    assert md.training_data_mode == "activations"
    assert "chat_template_hash" in md and "truncation_len" in md
    # reload again -> identical encode/decode; and the file's weights are what load_from_disk returned
    sae2 = SAE.load_from_disk(str(out))
    x = next(_synthetic(1, 32, seed=5))
    assert torch.allclose(sae.decode(sae.encode(x)), sae2.decode(sae2.encode(x)), atol=1e-5)
    from safetensors.torch import load_file
    w = load_file(str(out / "sae_weights.safetensors"))
    assert torch.equal(w["W_dec"], sae.W_dec.detach())
    # paper mode: decoder rows unit norm after training
    assert torch.allclose(sae.W_dec.norm(dim=-1), torch.ones(4 * D), atol=1e-5)
    info = json.loads((out / "interplab_train.json").read_text())
    assert info["architecture"] == arch and info["d_sae"] == 4 * D
    assert (out / "sparsity.safetensors").exists() and (out / "training_log.csv").exists()


def test_round_trip_matches_training_sae(tmp_path):
    """The loaded inference SAE computes exactly what the trained TrainingSAE computes (standard, jumprelu)."""
    from sae_lens import SAE

    for arch in ("standard", "jumprelu"):
        cfg = SAETrainConfig(site="resid_post.0", method="activations", architecture=arch, expansion=2, steps=5,
                             batch_tokens=32, b_dec_init_tokens=64).resolved()
        tsae = build_training_sae(cfg, D)
        with torch.no_grad():
            tsae.b_enc.add_(0.05 * torch.randn(tsae.cfg.d_sae))
        tsae.save_inference_model(str(tmp_path / arch))
        sae = SAE.load_from_disk(str(tmp_path / arch))
        x = torch.randn(20, D)
        assert torch.allclose(tsae.encode(x), sae.encode(x), atol=1e-5)
        assert torch.allclose(tsae.decode(tsae.encode(x)), sae.decode(sae.encode(x)), atol=1e-5)


def test_batchtopk_thresholded_form(tmp_path):
    out = train_sae(None, _synthetic(), method="activations", architecture="batchtopk", expansion=4, steps=30,
                    batch_tokens=64, lr=1e-3, k=6, out_dir=tmp_path / "btk", b_dec_init_tokens=256)
    from sae_lens import SAE

    sae = SAE.load_from_disk(str(out))
    assert sae.cfg.architecture() == "jumprelu"  # BatchTopK is saved as JumpReLU with a global threshold
    thr = sae.threshold.detach()
    assert torch.allclose(thr, thr[0].expand_as(thr))
    # thresholded form computed by hand from the saved weights
    x = next(_synthetic(1, 50, seed=7))
    pre = x @ sae.W_enc + sae.b_enc
    f_ref = pre * (pre > thr)
    assert torch.allclose(sae.encode(x), f_ref, atol=1e-5)
    assert torch.allclose(sae.decode(sae.encode(x)), f_ref @ sae.W_dec + sae.b_dec, atol=1e-5)


def test_geometric_median_matches_brute_force():
    g = torch.Generator().manual_seed(3)
    pts = torch.randn(60, 2, generator=g) * torch.tensor([1.0, 3.0]) + torch.tensor([2.0, -1.0])
    pts[:5] += 40  # outliers move the mean, not the median
    gm = geometric_median(pts)
    obj = lambda y: torch.linalg.vector_norm(pts.double() - y.double(), dim=1).sum()
    # brute force: dense grid refinement around the Weiszfeld answer and around the mean
    best = None
    for centre, span in ((pts.mean(0), 20.0), (gm, 0.5)):
        xs = torch.linspace(-span, span, 401)
        grid = torch.stack(torch.meshgrid(xs, xs, indexing="ij"), -1).reshape(-1, 2) + centre
        d = torch.cdist(grid.double(), pts.double()).sum(1)
        i = int(d.argmin())
        if best is None or d[i] < best[0]:
            best = (d[i], grid[i])
    assert abs(obj(gm) - best[0]) / best[0] < 1e-4
    assert torch.linalg.vector_norm(gm - best[1]) < 5e-3
    assert torch.linalg.vector_norm(gm - pts.mean(0)) > 1.0


def test_b_dec_init_is_geometric_median_of_first_buffer(tmp_path):
    chunks = list(_synthetic(40, 64, seed=11))
    first = torch.cat(chunks)[:512]
    cfg = SAETrainConfig(site="resid_post.0", method="activations", architecture="standard", expansion=2,
                         steps=1, batch_tokens=64, lr=1e-12, lr_end=1e-12, b_dec_init_tokens=512)
    out = train_sae(None, iter(chunks), config=cfg, out_dir=tmp_path / "gm")
    from sae_lens import SAE
    sae = SAE.load_from_disk(str(out))
    # one step at lr 1e-12 leaves b_dec at its initialisation
    assert torch.allclose(sae.b_dec, geometric_median(first), atol=1e-5)


def test_decoder_constraint_removes_parallel_grad():
    """T11: rows unit norm after each step and <grad_i, W_dec_i> = 0 before it (5.x semantics)."""
    from sae_lens.config import SAETrainerConfig

    cfg = SAETrainConfig(site="resid_post.0", method="activations", architecture="standard", expansion=2, steps=4,
                         batch_tokens=32, lr=1e-2).resolved()
    sae = build_training_sae(cfg, D)
    seen = []

    tcfg = SAETrainerConfig(total_training_samples=4 * 32, train_batch_size_samples=32, lr=1e-2, lr_end=1e-3)
    T = _make_trainer_class()
    tr = T(cfg=tcfg, sae=sae, data_provider=iter(()), icfg=cfg)

    def spy(opt, args, kwargs):
        g, w = sae.W_dec.grad, sae.W_dec.detach()
        seen.append(float((g * w).sum(-1).abs().max()))

    # a step pre-hook, not a replaced `optimizer.step`: replacing it makes torch's scheduler warn about call order
    tr.optimizer.register_step_pre_hook(spy)
    for _ in range(4):
        tr.step(torch.randn(32, D))
        tr.n_training_steps += 1
        assert torch.allclose(sae.W_dec.norm(dim=-1), torch.ones(sae.cfg.d_sae), atol=1e-6)
    tr.close()
    assert len(seen) == 4 and max(seen) < 1e-6


def test_native_mode_has_no_constraint(tmp_path):
    out = train_sae(None, _synthetic(), method="activations", architecture="standard", expansion=2, steps=10,
                    batch_tokens=64, lr=1e-2, mode="native", out_dir=tmp_path / "nat")
    from sae_lens import SAE
    sae = SAE.load_from_disk(str(out))
    assert not torch.allclose(sae.W_dec.norm(dim=-1), torch.ones(sae.cfg.d_sae), atol=1e-3)
    assert sae.cfg.metadata.training_mode == "SAELens-6 native"


def test_training_reduces_loss(tmp_path):
    out = train_sae(None, _synthetic(), method="activations", architecture="topk", expansion=4, steps=80,
                    batch_tokens=64, lr=3e-3, k=6, out_dir=tmp_path / "t", log_every=5)
    from interplab.sae import load_training_log
    log = load_training_log(out)
    assert log["mse_loss"].iloc[-1] < 0.5 * log["mse_loss"].iloc[0]
    assert log["explained_variance"].iloc[-1] > 0.5


def test_errors(tmp_path):
    from interplab.core.errors import ConfigError, DataError, InputError, ResultsError

    with pytest.raises(ConfigError):
        train_sae(None, _synthetic(), method="activations", architecture="nope", out_dir=tmp_path / "a")
    with pytest.raises(DataError):
        train_sae(None, [torch.randn(64, D)] * 3, method="activations", architecture="standard", steps=50,
                  batch_tokens=64, out_dir=tmp_path / "b", b_dec_init_tokens=64)
    with pytest.raises(InputError):
        train_sae(None, [[{"role": "user", "content": "hi"}]], method="fast", out_dir=tmp_path / "c")
    train_sae(None, _synthetic(), method="activations", architecture="standard", steps=2, batch_tokens=64,
              out_dir=tmp_path / "d", b_dec_init_tokens=64)
    with pytest.raises(ResultsError):
        train_sae(None, _synthetic(), method="activations", architecture="standard", steps=2, batch_tokens=64,
                  out_dir=tmp_path / "d")


def test_mixing_buffer_serves_each_row_once():
    """T5 on SAELens's mixing_buffer, as train_sae uses it: integer-coded rows."""
    from sae_lens.training.mixing_buffer import mixing_buffer

    chunks = [torch.arange(k * 37, (k + 1) * 37, dtype=torch.float32)[:, None].repeat(1, 3) for k in range(20)]
    produced = torch.cat(chunks)[:, 0]
    torch.manual_seed(0)
    served = list(mixing_buffer(128, 16, iter(chunks), mix_fraction=0.5))
    assert all(b.shape == (16, 3) for b in served)
    ids = torch.cat([b[:, 0] for b in served])
    assert ids.unique().numel() == ids.numel()  # each row served at most once
    assert set(ids.tolist()) <= set(produced.tolist())
    # all but fewer than one batch of rows are served at the end (remainder flushed in full batches)
    assert produced.numel() - ids.numel() < 16
    # rows are actually mixed across chunks
    assert not torch.equal(ids, produced[: ids.numel()])
    # mix_fraction = 0: order preserved
    served0 = torch.cat([b[:, 0] for b in mixing_buffer(128, 16, iter(chunks), mix_fraction=0.0)])
    assert torch.equal(served0, produced[: served0.numel()])


def test_normalized_training_folds_scale(tmp_path):
    """normalize_activations='expected_average_only_in': trained on scaled inputs, saved SAE takes raw inputs."""
    from sae_lens import SAE

    big = (100 * x for x in _synthetic(seed=4))
    out = train_sae(None, big, method="activations", architecture="topk", expansion=4, steps=60, batch_tokens=64,
                    lr=3e-3, k=6, out_dir=tmp_path / "n", normalize_activations="expected_average_only_in",
                    b_dec_init_tokens=256)
    sae = SAE.load_from_disk(str(out))
    assert sae.cfg.normalize_activations == "none"
    import json
    scale = json.loads((out / "interplab_train.json").read_text())["activation_scale"]
    import itertools
    x = 100 * torch.cat(list(itertools.islice(_synthetic(seed=4), 300, 304)))  # same distribution, unseen rows
    assert scale == pytest.approx(D ** 0.5 / float(x.norm(dim=-1).mean()), rel=0.1)
    xh = sae.decode(sae.encode(x))
    ev = 1 - (x - xh).pow(2).sum() / (x - x.mean(0)).pow(2).sum()
    assert ev > 0.5


def test_dedup_ngrams_alg1():
    from interplab.sae.dedup import dedup_ngrams

    u = lambda t: [{"role": "user", "content": t}]
    samples = [u("a b c d e"), u("x y z"), u("q a b c r"), u("c d e f"), u("z y x"), u("x y z w")]
    kept, idx = dedup_ngrams(samples, n=3)
    # 2 shares "a b c" with 0; 3 shares "c d e" with 0; 5 shares "x y z" with 1; 4 is new (reversed)
    assert idx == [0, 1, 4]
    # a sample dropped does not add its n-grams: "f" trigram of sample 3 does not block a later "d e f"
    kept, idx = dedup_ngrams([u("a b c d"), u("b c d f g"), u("d f g h")], n=3)
    assert idx == [0, 2]
    # turns shorter than n contribute nothing
    assert dedup_ngrams([u("a b"), u("a b")], n=3)[1] == [0, 1]


def test_legacy_5x_jumprelu_cfg_loads(tmp_path):
    """A flat SAELens 5.x cfg (as FAST's released SAEs use) loads with SAE.load_from_disk; metadata maps to a site."""
    from safetensors.torch import save_file
    from sae_lens import SAE

    from interplab.sae import sae_site

    d, f = 8, 16
    cfg = {"architecture": "jumprelu", "d_in": d, "d_sae": f, "dtype": "float32", "device": "cpu",
           "model_name": "Qwen/Qwen2.5-7B-Instruct", "hook_name": "blocks.18.hook_resid_post", "hook_layer": 18,
           "hook_head_index": None, "activation_fn_str": "relu", "activation_fn_kwargs": {},
           "apply_b_dec_to_input": False, "finetuning_scaling_factor": False, "sae_lens_training_version": "5.3.0",
           "prepend_bos": True, "dataset_path": "", "dataset_trust_remote_code": False, "context_size": 8192,
           "normalize_activations": "none", "neuronpedia_id": None, "model_from_pretrained_kwargs": {},
           "seqpos_slice": [None]}
    (tmp_path / "cfg.json").write_text(json.dumps(cfg))
    g = torch.Generator().manual_seed(0)
    w = {"W_enc": torch.randn(d, f, generator=g), "W_dec": torch.randn(f, d, generator=g),
         "b_enc": torch.zeros(f), "b_dec": torch.zeros(d), "threshold": torch.full((f,), 0.5)}
    save_file(w, str(tmp_path / "sae_weights.safetensors"))
    sae = SAE.load_from_disk(str(tmp_path))
    assert sae.cfg.architecture() == "jumprelu" and sae.cfg.metadata.model_name == "Qwen/Qwen2.5-7B-Instruct"
    assert sae_site(sae) == "resid_post.18"
    x = torch.randn(5, d, generator=g)
    pre = x @ w["W_enc"]
    assert torch.allclose(sae.encode(x), pre * (pre > 0.5), atol=1e-6)
