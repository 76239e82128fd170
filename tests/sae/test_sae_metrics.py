"""GSNR (T6) and the evaluation metrics on hand-computed arrays (T8)."""
from __future__ import annotations

import math

import pytest
import torch

from interplab.sae.evals import ReconstructionAccumulator, kl_per_row, next_token_ce
from interplab.sae.gsnr import GSNRAccumulator


def _exact_moments(z):
    """Columns rescaled to sample mean 0 and unbiased variance 1 exactly (removes sampling noise of the moments)."""
    z = z - z.mean(0)
    return z / z.std(0, unbiased=True)


def test_gsnr_gaussian_toy_within_2pct():
    g = torch.Generator().manual_seed(0)
    mu = torch.tensor([1.0, 0.5, 0.0, 2.0], dtype=torch.float64)
    sigma = torch.tensor([1.0, 1.0, 1.0, 0.5], dtype=torch.float64)
    truth = mu ** 2 / sigma ** 2  # 1, 0.25, 0, 16
    M = 20_000
    z = torch.randn(M, 4, generator=g, dtype=torch.float64)

    # (a) Gaussian samples whose sample moments are exactly (mu, sigma^2): the estimator must return mu^2/sigma^2
    #     (this checks the streaming arithmetic, well inside 2%).
    acc = GSNRAccumulator()
    for s in mu + sigma * _exact_moments(z):
        acc.update({"w": s})
    r = acc.ratios()["w"]
    for j in (0, 1, 3):
        assert abs(float(r[j]) - float(truth[j])) / float(truth[j]) < 0.02
        assert float(r[j]) == pytest.approx(float(truth[j]), rel=1e-6)
    assert float(r[2]) < 1e-12

    # (b) plain random draws: within 4 standard errors of the estimator, se/r ~ sqrt(4/(r M) + 2/M)
    #     (1.7% for r = 1 at M = 20,000, so "within 2%" is a one-sigma statement there).
    acc_r = GSNRAccumulator()
    for s in mu + sigma * z:
        acc_r.update({"w": s})
    rr = acc_r.ratios()["w"]
    for j in (0, 1, 3):
        se = math.sqrt(4 / (float(truth[j]) * M) + 2 / M)
        assert abs(float(rr[j]) / float(truth[j]) - 1) < 4 * se
    df = acc_r.to_frame()
    assert set(df.tensor) == {"w", "global"}
    assert df.set_index("tensor").loc["global", "mean"] == pytest.approx(float(rr.mean()))

    # (c) batch scaling: averaging B samples multiplies the GSNR by B (exact-moment batches: exactly B)
    B = 8
    zb = _exact_moments(torch.randn(M // B, 4, generator=g, dtype=torch.float64))
    acc_b = GSNRAccumulator()
    for s in mu + sigma / math.sqrt(B) * zb:   # the distribution of a mean of B draws
        acc_b.update({"w": s})
    rb = acc_b.ratios()["w"]
    for j in (0, 1, 3):
        assert float(rb[j] / r[j]) == pytest.approx(B, rel=1e-6)
    acc_avg = GSNRAccumulator()
    for s in (mu + sigma * z).view(-1, B, 4).mean(1):   # actual averages of random draws
        acc_avg.update({"w": s})
    ra = acc_avg.ratios()["w"]
    for j in (0, 3):
        assert float(ra[j] / rr[j]) == pytest.approx(B, rel=0.15)


def test_gsnr_needs_two_samples():
    from interplab.core.errors import DataError

    acc = GSNRAccumulator()
    acc.update({"w": torch.ones(3)})
    with pytest.raises(DataError):
        acc.ratios()


def test_gsnr_real_sae_finite():
    pytest.importorskip("sae_lens")
    from interplab.sae import SAETrainConfig, build_training_sae, gsnr

    cfg = SAETrainConfig(site="resid_post.0", method="activations", architecture="jumprelu", expansion=2,
                         b_dec_init_tokens=8).resolved()
    sae = build_training_sae(cfg, 8)
    g = torch.Generator().manual_seed(0)
    data = [torch.randn(40, 8, generator=g) + 1 for _ in range(50)]
    df = gsnr(sae, data, n_batches=6, batch_tokens=32)
    assert set(df.tensor) >= {"W_enc", "W_dec", "b_enc", "b_dec", "threshold", "global"}
    assert (df["mean"] >= 0).all() and df["mean"].map(math.isfinite).all()


def _hand_arrays():
    # two sequences, H = 2; special id 9
    x1 = torch.tensor([[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]])
    xh1 = torch.tensor([[1.0, 1.0], [0.0, 1.0], [0.0, 2.0]])   # sq errors per token: 1, 0, 4
    t1 = torch.tensor([9, 1, 2])
    x2 = torch.tensor([[3.0, 3.0]])
    xh2 = torch.tensor([[2.0, 3.0]])                            # sq error: 1
    t2 = torch.tensor([5])
    f1 = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [2.0, 3.0, 0.0]])
    f2 = torch.tensor([[1.0, 0.0, 0.0]])
    return (x1, xh1, t1, f1), (x2, xh2, t2, f2)


def test_reconstruction_metrics_hand_computed():
    acc = ReconstructionAccumulator(3, special_token_ids=[9], dense_threshold=0.5)
    for x, xh, t, f in _hand_arrays():
        acc.update(x, xh, t, f)
    r = acc.result()
    # Eq. 7: (1/(N H)) sum_i (1/L_i) sum ||e||^2 = (1/(2*2)) * ((1+0+4)/3 + 1/1) = (5/3 + 1)/4
    assert r["mse"] == pytest.approx((5 / 3 + 1) / 4)
    assert r["log2_mse"] == pytest.approx(math.log2((5 / 3 + 1) / 4))
    # token-weighted differs: (1+0+4+1)/(4 tokens * 2)
    assert r["mse_token_weighted"] == pytest.approx(6 / 8)
    assert r["mse_sum_d"] == pytest.approx(6 / 4)
    assert r["mse"] != pytest.approx(r["mse_token_weighted"])
    # special: only sequence 1 has id 9 at position 0 with error 1 -> 1/(1*2)
    assert r["mse_special"] == pytest.approx(0.5) and r["n_sequences_special"] == 1
    # EV: tokens x = [1,0],[0,1],[2,2],[3,3]; mean [1.5,1.5]; E||x||^2 = (1+1+8+18)/4 = 7; ||Ex||^2 = 4.5
    assert r["explained_variance"] == pytest.approx(1 - (6 / 4) / (7 - 4.5))
    # L0: active counts 1,0,2,1 -> 1.0; feature 2 never fires -> dead; feature 0 fires on 3/4 > 0.5 -> dense
    assert r["l0"] == pytest.approx(1.0)
    assert r["dead_features"] == 1 and r["dense_features"] == 1


def test_special_filter_uses_only_listed_ids():
    acc = ReconstructionAccumulator(3, special_token_ids=[5])
    for x, xh, t, f in _hand_arrays():
        acc.update(x, xh, t, f)
    assert acc.result()["mse_special"] == pytest.approx(1 / 2)  # seq 2, one token, error 1, H = 2
    acc2 = ReconstructionAccumulator(3, special_token_ids=[])
    for x, xh, t, f in _hand_arrays():
        acc2.update(x, xh, t, f)
    assert math.isnan(acc2.result()["mse_special"])


def test_next_token_ce_and_kl():
    torch.manual_seed(0)
    logits = torch.randn(2, 4, 6)
    toks = torch.randint(0, 6, (2, 4))
    mask = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]]).bool()  # left padding in row 0
    per_row, ce = next_token_ce(logits, toks, mask)
    lp = torch.log_softmax(logits.double(), -1)
    r0 = -(lp[0, 1, toks[0, 2]] + lp[0, 2, toks[0, 3]]) / 2
    r1 = -sum(lp[1, t, toks[1, t + 1]] for t in range(3)) / 3
    assert per_row[0] == pytest.approx(float(r0)) and per_row[1] == pytest.approx(float(r1))
    assert torch.allclose(kl_per_row(logits, logits, mask), torch.zeros(2, dtype=torch.float64))
    worse = logits.clone()
    worse[..., 0] += 3
    assert (kl_per_row(logits, worse, mask) > 0).all()


def test_figures_and_experiment_registration():
    import pandas as pd

    from interplab.experiments.registry import get_experiment
    from interplab.figures.sae import gsnr_figure, metrics_bar_figure, metrics_grid_figure, training_curves_figure

    df = pd.DataFrame({"method": ["FAST", "BT(F)", "FAST", "BT(F)"], "architecture": ["standard"] * 2 + ["jumprelu"] * 2,
                       "log2_mse": [-3.0, -2.0, -4.0, -3.5], "l0": [10, 12, 8, 9]})
    fig = metrics_bar_figure(df, "log2_mse")
    assert [t.name for t in fig.data] == ["FAST", "BT(F)"] and "linear = 0.125" in fig.data[0].hovertext[0]
    assert len(metrics_grid_figure(df, ["log2_mse", "l0"]).data) == 4
    g = pd.DataFrame({"tensor": ["W_enc", "global"] * 2, "mean": [0.1, 0.2, 0.3, 0.4], "method": ["FAST"] * 2 + ["BT(P)"] * 2})
    assert len(gsnr_figure(g).data) == 2
    log = pd.DataFrame({"step": [1, 2], "mse_loss": [2.0, 1.0]})
    assert len(training_curves_figure({"a": log}).data) == 1
    for name in ("sae-train", "sae-fast-vs-block"):
        assert get_experiment(name).name == name
