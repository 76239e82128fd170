"""Participation ratio, effective rank and the streaming covariance accumulator (spec §8 tests 1-5)."""
import math

import numpy as np
import pytest
import torch

from interplab.core.errors import ShapeError
from interplab.probes.hyperfit.geometry import (
    CovarianceAccumulator, PairedStatsAccumulator, covariance_spectrum, effective_rank, erank_from_spectrum,
    participation_ratio, pr_from_spectrum, twonn_dimension,
)


def exact_cov_data(lam, N=400, seed=0):
    """Rows whose sample covariance is exactly diag(lam) (orthonormal centred columns, scaled)."""
    g = torch.Generator().manual_seed(seed)
    d = len(lam)
    Z = torch.randn(N, d, generator=g, dtype=torch.float64)
    Z = Z - Z.mean(0)
    Q, _ = torch.linalg.qr(Z)  # orthonormal, still centred (columns are combinations of centred columns)
    return Q * torch.sqrt(torch.as_tensor(lam, dtype=torch.float64) * (N - 1)) + 5.0


@pytest.mark.parametrize("k", [1, 3, 7])
def test_pr_equal_variance_subspace_is_k(k):
    d = 12
    lam = [1.0] * k + [0.0] * (d - k)
    X = exact_cov_data(lam)
    # rotate into a random k-dim subspace
    Q, _ = torch.linalg.qr(torch.randn(d, d, generator=torch.Generator().manual_seed(1), dtype=torch.float64))
    assert participation_ratio(X @ Q) == pytest.approx(k, abs=1e-6)
    assert effective_rank(X @ Q) == pytest.approx(k, abs=1e-6)


def test_pr_diagonal_spectrum_formula():
    lam = np.array([5.0, 3.0, 1.0, 0.5, 0.25, 0.1])
    X = exact_cov_data(lam)
    expect = lam.sum() ** 2 / (lam ** 2).sum()
    assert participation_ratio(X) == pytest.approx(expect, abs=1e-6)
    assert pr_from_spectrum(lam) == pytest.approx(expect, abs=1e-12)
    np.testing.assert_allclose(covariance_spectrum(X).numpy(), lam, atol=1e-9)
    p = lam / lam.sum()
    assert effective_rank(X) == pytest.approx(math.exp(-(p * np.log(p)).sum()), abs=1e-6)


def test_pr_isotropic_close_to_d():
    d = 40
    X = torch.randn(50 * d, d, generator=torch.Generator().manual_seed(0))
    pr = participation_ratio(X)
    assert abs(pr - d) / d < 0.05
    assert pr < d  # sampling noise always lowers PR below d


def test_pr_scale_and_rotation_invariance():
    g = torch.Generator().manual_seed(3)
    X = torch.randn(300, 10, generator=g, dtype=torch.float64) @ torch.randn(10, 10, generator=g, dtype=torch.float64)
    Q, _ = torch.linalg.qr(torch.randn(10, 10, generator=g, dtype=torch.float64))
    pr = participation_ratio(X)
    assert participation_ratio(7.5 * X) == pytest.approx(pr, abs=1e-6)
    assert participation_ratio(X @ Q) == pytest.approx(pr, abs=1e-6)
    assert effective_rank(X @ Q) == pytest.approx(effective_rank(X), abs=1e-6)
    # standardisation removes per-dimension scale differences
    D = torch.diag(torch.linspace(0.1, 10, 10, dtype=torch.float64))
    assert participation_ratio(X @ D, standardize=True) == pytest.approx(participation_ratio(X, standardize=True), abs=1e-9)
    # N < d path (Gram trick) agrees with the spectrum
    Y = torch.randn(8, 30, generator=g, dtype=torch.float64)
    assert participation_ratio(Y) == pytest.approx(pr_from_spectrum(covariance_spectrum(Y)), abs=1e-9)


def test_erank_uniform_spectrum():
    assert erank_from_spectrum([2.0] * 5 + [0.0] * 3) == pytest.approx(5.0, abs=1e-9)


def test_pr_rejects_bad_shapes():
    with pytest.raises(ShapeError):
        participation_ratio(torch.zeros(3, 4, 5))
    with pytest.raises(ShapeError):
        participation_ratio(torch.zeros(1, 4))


def test_accumulator_equals_batch_covariance_and_merge():
    g = torch.Generator().manual_seed(0)
    X = torch.randn(1000, 16, generator=g) * torch.linspace(0.1, 3, 16) + 100.0  # large mean: stability check
    ref = torch.cov(X.double().T)
    acc = CovarianceAccumulator(16)
    for chunk in X.split(77):
        acc.update(chunk)
    torch.testing.assert_close(acc.cov, ref, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(acc.mean, X.double().mean(0), rtol=1e-12, atol=1e-12)
    # merge of chunk accumulators = one pass over the whole
    parts = [CovarianceAccumulator(16).update(c) for c in X.split(300)]
    merged = CovarianceAccumulator(16)
    for p in parts:
        merged.merge(p)
    assert merged.n == 1000
    torch.testing.assert_close(merged.cov, acc.cov, rtol=1e-10, atol=1e-10)
    assert merged.participation_ratio() == pytest.approx(participation_ratio(X), abs=1e-8)
    assert merged.effective_rank() == pytest.approx(effective_rank(X), abs=1e-8)
    # state round trip
    again = CovarianceAccumulator.from_state_dict(merged.state_dict())
    torch.testing.assert_close(again.cov, merged.cov)


def test_accumulator_mask_counts_only_real_rows():
    g = torch.Generator().manual_seed(1)
    H = torch.randn(3, 5, 4, generator=g)
    mask = torch.tensor([[0, 1, 1, 1, 1], [0, 0, 0, 1, 1], [1, 1, 1, 1, 1]], dtype=torch.bool)
    H_pad = H.clone()
    H_pad[~mask] = 1e6  # padding garbage must not leak in
    acc = CovarianceAccumulator(4).update(H_pad, mask)
    assert acc.n == int(mask.sum())
    torch.testing.assert_close(acc.cov, torch.cov(H[mask].double().T))
    with pytest.raises(ShapeError):
        acc.update(H, mask[:, :4])
    with pytest.raises(ShapeError):
        acc.update(torch.randn(2, 5))


def test_paired_stats():
    a = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    b = torch.tensor([[1.0, 0.0], [2.0, 0.0]])
    m = PairedStatsAccumulator().update(a, b).means()
    assert m["cos"] == pytest.approx(0.5)
    assert m["l2"] == pytest.approx((0 + math.sqrt(8)) / 2)
    m = PairedStatsAccumulator().update(a, a).means()
    assert m["cos"] == pytest.approx(1.0) and m["l2"] == 0.0


def test_twonn_on_plane():
    g = torch.Generator().manual_seed(0)
    X = torch.randn(2000, 2, generator=g, dtype=torch.float64) @ torch.randn(2, 20, generator=g, dtype=torch.float64)
    assert twonn_dimension(X) == pytest.approx(2.0, rel=0.15)


def test_grouped_accumulator_matches_separate_ones():
    g = torch.Generator().manual_seed(2)
    X = torch.randn(3, 4, 9, 6, generator=g) * torch.tensor([1.0, 2.0, 0.5])[:, None, None, None]
    mask = torch.rand(4, 9, generator=g) > 0.3
    grouped = CovarianceAccumulator(6, groups=3)
    for sl in (slice(0, 2), slice(2, 4)):
        grouped.update(X[:, sl], mask[sl])
    for k in range(3):
        ref = torch.cov(X[k][mask].double().T)
        torch.testing.assert_close(grouped.cov[k], ref, rtol=1e-10, atol=1e-12)
        assert grouped.participation_ratio()[k].item() == pytest.approx(participation_ratio(X[k][mask]), abs=1e-9)
        assert grouped.effective_rank()[k].item() == pytest.approx(effective_rank(X[k][mask]), abs=1e-9)
        assert grouped.participation_ratio(standardize=True)[k].item() == pytest.approx(
            participation_ratio(X[k][mask], standardize=True), abs=1e-9)
    other = CovarianceAccumulator(6, groups=3).update(X[:, :1], mask[:1])
    with pytest.raises(ShapeError):
        grouped.merge(CovarianceAccumulator(6))
    grouped.merge(other)
    assert grouped.n == int(mask.sum()) + int(mask[:1].sum())
    ps = PairedStatsAccumulator(groups=3).update(X, X, mask).means()
    assert torch.allclose(ps["cos"], torch.ones(3, dtype=torch.float64)) and (ps["l2"] == 0).all()
