import numpy as np
import pytest

from interplab.probes.crh import HelixFit, fit_helix, planted_helix, planted_line


@pytest.mark.parametrize("n", [0.7, 1.0])
@pytest.mark.parametrize("seed", [0, 1])
def test_fixed_mode_recovers_turn_rate(n, seed):
    fit = fit_helix(planted_helix(30, n, seed=seed))
    assert abs(fit.n_rot - n) < 0.05
    assert np.all(fit.r2 > 0.99)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_line_is_separated(seed):
    fit = fit_helix(planted_line(30, seed=seed))
    assert fit.mean_r2_cs < 0.9
    helix = fit_helix(planted_helix(30, 1.0, seed=seed))
    assert helix.mean_r2_cs > fit.mean_r2_cs + 0.05


def test_faithful_mode_pathology():
    fit = fit_helix(planted_helix(30, 1.0, seed=0), mode="faithful")
    assert fit.mse >= 1 / 12 - 1e-3                 # floor ≈ 1/12: the t column's mean² is unfittable
    assert abs(fit.mse - 1 / 12) < 0.01
    assert fit.r == pytest.approx(0.1)              # r pinned at the grid minimum


def test_reconstruct_and_roundtrip(tmp_path):
    X = planted_helix(30, 1.0, seed=0, noise=0.0, offset=2.0)
    fit = fit_helix(X)
    Xr = fit.reconstruct()
    # the ideal helix mapped back is close to the (noise-free) trajectory, PCA mean included in fixed mode
    assert np.linalg.norm(Xr - X) / np.linalg.norm(X) < 0.05
    assert fit.reconstruct(3).shape == (64,)
    faithful = fit_helix(X, mode="faithful")
    # B6: the repo's helix vector omits the PCA mean; the fixed one restores it
    expected = (faithful.targets() @ np.linalg.pinv(faithful.coef).T) @ faithful.components
    np.testing.assert_allclose(faithful.reconstruct(), expected, atol=1e-9)
    np.testing.assert_allclose(fit.reconstruct() - fit.pca_mean,
                               ((fit.targets() - fit.intercept) @ np.linalg.pinv(fit.coef).T) @ fit.components,
                               atol=1e-9)
    fit.save(tmp_path / "h")
    back = HelixFit.load(tmp_path / "h")
    assert back.n_rot == fit.n_rot
    np.testing.assert_array_equal(back.Z, fit.Z)
    assert len(fit.to_frame()) == 30
