import math

import numpy as np
import pytest

from interplab.core.errors import DataError, InputError, ShapeError
from interplab.probes.crh import (
    Cylinder, PairwiseTest, PenaltyMap, SectorMap, activation_auc, activation_margin, angle_between,
    first_activation, fit_cylinder, max_principal_angle, pairwise_test, penalty_grid, penalty_vector,
    procrustes_2d, sector_angles, sector_centre, sector_vectors, strength_grid, wrap_angle,
)
from interplab.probes.crh import planted_cylinder, synthetic_penalty_map, synthetic_sector_map


# ------------------------------------------------------------------ synthetic recovery (spec §8 tests 1–4)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_planted_cylinder_recovery(seed):
    org = planted_cylinder(seed=seed)
    cyl = fit_cylinder(org.train, seed=seed)
    assert angle_between(cyl.axis, org.u) < 6.0                             # test 1
    assert max_principal_angle(cyl.plane, org.plane) < 6.0                  # test 2
    assert cyl.plane_explained > 0.9
    assert abs(cyl.radius / org.expected_radius - 1) < 0.10                 # test 3 (≈1.55)
    assert abs(org.expected_radius - 1.55) < 0.01
    ref = np.stack([org.train @ org.e1, org.train @ org.e2], 1)
    xy = cyl.xy @ procrustes_2d(cyl.xy, ref)
    err = np.degrees(np.abs(wrap_angle(np.arctan2(xy[:, 1], xy[:, 0]) - org.phi_train)))
    assert np.median(err) < 8.0
    np.testing.assert_allclose(np.linalg.norm(cyl.axis), 1.0, atol=1e-12)
    np.testing.assert_allclose(cyl.plane.T @ cyl.plane, np.eye(2), atol=1e-10)
    np.testing.assert_allclose(cyl.plane.T @ cyl.axis, 0.0, atol=1e-10)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lrh_null_scores_low(seed):
    cyl = fit_cylinder(planted_cylinder(seed=seed).train, seed=seed)
    null = fit_cylinder(planted_cylinder(seed=seed, lrh_null=True).train, seed=seed)
    assert null.plane_explained < 0.1
    assert null.plane_explained < null.null_plane_explained_p99 * 1.1
    assert 0.7 < null.cylinder_score < 1.4
    assert cyl.cylinder_score > 5 * null.cylinder_score


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_sector_centre_recovery(seed):
    org = planted_cylinder(seed=seed, sector="shared")
    sm, cyl = synthetic_sector_map(org, gamma_deg=45, n_bins=24, strengths=np.linspace(6 / 25, 6, 25))
    centre = org.to_planted_angle(sm.centre, cyl.plane)
    assert abs(math.degrees(wrap_angle(centre - org.psi0))) < 15.0
    supp = org.to_planted_angle(sm.suppress, cyl.plane)
    assert abs(abs(math.degrees(wrap_angle(centre - supp))) - 180.0) < 20.0
    # every maximal (facilitating) bin lies in the planted facilitating wedge (±45°, + half a bin + fit error),
    # every minimal (suppressing) bin in the opposite wedge
    auc = sm.population_auc
    fac = org.to_planted_angle(sm.bin_angles[np.isclose(auc, auc.max())], cyl.plane)
    sup = org.to_planted_angle(sm.bin_angles[np.isclose(auc, auc.min())], cyl.plane)
    assert np.all(np.abs(np.degrees(wrap_angle(fac - org.psi0))) < 60)
    assert np.all(np.abs(np.degrees(wrap_angle(sup - org.psi0 - math.pi))) < 60)
    assert sm.population_auc.max() > sm.population_auc.min()


def test_fit_cylinder_handles_n_less_than_d_and_errors():
    rng = np.random.default_rng(0)
    D = rng.standard_normal((10, 300)) + 3 * np.eye(300)[0]
    cyl = fit_cylinder(D)
    np.testing.assert_allclose(cyl.plane.T @ cyl.plane, np.eye(2), atol=1e-10)
    with pytest.raises(ShapeError):
        fit_cylinder(np.ones(5))
    with pytest.raises(InputError):
        fit_cylinder(np.ones((2, 5)))
    with pytest.raises(DataError):
        fit_cylinder(np.zeros((5, 4)))


def test_cylinder_roundtrip(tmp_path):
    cyl = fit_cylinder(planted_cylinder(seed=0).train, meta={"site": "resid_post.1"})
    cyl.save(tmp_path / "c")
    back = Cylinder.load(tmp_path / "c")
    np.testing.assert_array_equal(back.axis, cyl.axis)
    np.testing.assert_array_equal(back.azimuths, cyl.azimuths)
    assert back.cylinder_score == cyl.cylinder_score and back.meta == {"site": "resid_post.1"}
    df = cyl.to_frame()
    assert len(df) == 200 and {"height", "radius", "azimuth", "cos_theta"} <= set(df.columns)
    c = cyl.coords(planted_cylinder(seed=0).test)
    np.testing.assert_allclose(c["radius"] ** 2 + c["z"] ** 2, np.linalg.norm(planted_cylinder(seed=0).test, axis=1) ** 2)


# ------------------------------------------------------------------ penalty vector invariants (spec §8 test 6)
def test_penalty_vector_invariants():
    rng = np.random.default_rng(1)
    D = rng.standard_normal((7, 32))
    D[0] *= -1
    axis = rng.standard_normal(32)
    u = axis / np.linalg.norm(axis)
    dh = D / np.linalg.norm(D, axis=1, keepdims=True)
    cos = dh @ u
    sin = np.sqrt(1 - cos**2)
    o = dh - cos[:, None] * u
    o /= np.linalg.norm(o, axis=1, keepdims=True)
    for L in (0.5, 3.0):
        np.testing.assert_allclose(penalty_vector(D, axis, L, 0.0), L * dh, atol=1e-6)
        np.testing.assert_allclose(penalty_vector(D, axis, L, 1.0), L * cos[:, None] * u, atol=1e-6)
        for p in penalty_grid(20):
            v = penalty_vector(D, axis, L, p)
            np.testing.assert_allclose(np.einsum("nd,nd->n", v, o), L * sin * (1 - p), atol=1e-6)
            np.testing.assert_allclose(v @ u, L * cos, atol=1e-6)
            assert np.all(np.linalg.norm(v, axis=1) <= L + 1e-9)
    np.testing.assert_allclose(sin**2 + cos**2, 1.0, atol=1e-12)
    # grid broadcasting: [nL, nP, n, d]
    Ls, ps = strength_grid(3.0), penalty_grid(20)
    V = penalty_vector(D, axis, Ls[:, None, None], ps[None, :, None])
    assert V.shape == (25, 20, 7, 32)
    np.testing.assert_allclose(V[4, 3], penalty_vector(D, axis, Ls[4], ps[3]))
    assert not np.any(np.isclose(ps, 0.2)) and not np.any(np.isclose(ps, 0.4))
    # torch in, torch out
    import torch

    vt = penalty_vector(torch.tensor(D, dtype=torch.float32), torch.tensor(axis), 2.0, 0.5)
    assert isinstance(vt, torch.Tensor) and vt.dtype == torch.float32
    # collinear d: ô = 0, v = L cosθ û for every p
    np.testing.assert_allclose(penalty_vector(2 * u, u, 1.5, 0.3), 1.5 * u, atol=1e-12)
    with pytest.raises(ShapeError):
        penalty_vector(D, axis[:5], 1.0, 0.0)


@pytest.mark.parametrize("offset,direction", [(0.0, "down"), (180.0, "up")])
def test_penalty_monotone_under_tied_sectors(offset, direction):
    org = planted_cylinder(seed=3, sector="tied", tie_offset_deg=offset, n_test=40)
    pm = synthetic_penalty_map(org)
    rate = (pm.labels == 2).mean(0)                                         # [P, K]
    diffs = np.diff(rate, axis=0)
    if direction == "down":
        assert np.all(diffs <= 1e-12)
    else:
        assert np.all(diffs >= -1e-12)
    assert np.abs(rate[0] - rate[-1]).max() > 0.1                            # the effect is not vacuous


# ------------------------------------------------------------------ metric units (spec §8 test 8)
def test_metric_units_hand_computed():
    L = np.array([1.0, 2.0, 3.0, 4.0])
    labels = np.array([[1, 1, 2, 2], [1, 1, 1, 1], [2, 3, 2, 2], [3, 3, 3, 3]])
    np.testing.assert_array_equal(first_activation(labels, L), [3.0, np.nan, 1.0, np.nan])
    np.testing.assert_array_equal(activation_margin(labels, L), [1.0, 0.0, 3.0, 0.0])
    # trapezoid AUC normalised by span: [0,0,1,1] -> (0 + .5 + 1)/3
    np.testing.assert_allclose(activation_auc(labels, L), [0.5, 0.0, (0.5 + 0.5 + 1) / 3, 0.0])
    with pytest.raises(DataError):
        first_activation(np.array([[4, 1, 1, 1]]), L)
    # step-1 exclusion rule
    lab = np.array([[[2, 2], [1, 2]], [[1, 2], [1, 1]]])                    # [S=2, P=2, K=2]
    pm = PenaltyMap(labels=lab, ps=[0.0, 1.0], strengths=[1.0, 2.0], cos_theta=[0.5, 0.5])
    r = pm.rates(2)                                                          # [K, P]
    np.testing.assert_allclose(r[:, 0], [0.0, 1.0])                          # sample 0 dropped at p=0
    np.testing.assert_allclose(r[:, 1], [0.0, 0.5])
    np.testing.assert_allclose(pm.rates(2, exclude_step1=False)[:, 0], [0.5, 1.0])


def test_sector_centre_weights():
    b = sector_angles(4)
    assert math.isclose(sector_centre([1.0, 0.0, 0.0, 0.0], b), 0.0, abs_tol=1e-12)
    assert math.isclose(sector_centre([0.0, 1.0, 1.0, 0.0], b), 3 * math.pi / 4, abs_tol=1e-12)
    assert math.isnan(sector_centre([0.3, 0.3, 0.3, 0.3], b))


def test_sector_vectors_geometry():
    cyl = fit_cylinder(planted_cylinder(seed=0).train)
    V = sector_vectors(cyl, gamma_deg=30, n_bins=12, strengths=[1.0, 2.0])
    assert V.shape == (2, 12, 64)
    np.testing.assert_allclose(np.linalg.norm(V, axis=-1), [[1.0] * 12, [2.0] * 12])
    np.testing.assert_allclose(V[1] @ cyl.axis, 2 * math.cos(math.radians(30)))
    c = cyl.coords(V[0])
    np.testing.assert_allclose(np.degrees(wrap_angle(c["azimuth"] - sector_angles(12))), 0, atol=1e-9)


def test_sector_map_roundtrip(tmp_path):
    org = planted_cylinder(seed=0)
    sm, _ = synthetic_sector_map(org, n_bins=8, strengths=[1.0, 3.0, 5.0])
    sm.save(tmp_path / "s")
    back = SectorMap.load(tmp_path / "s")
    np.testing.assert_array_equal(back.labels, sm.labels)
    assert len(sm.to_frame()) == 5 * 8 * 3
    assert set(sm.bins_frame()["sample"].astype(str)) >= {"population", "0"}
    with pytest.raises(ShapeError):
        SectorMap(labels=np.ones((2, 3, 4)), strengths=[1, 2], bin_angles=sector_angles(3), gamma_deg=45)


# ------------------------------------------------------------------ Implication 3 (spec §8 test 5)
def _replica(sector, n_concepts=12, n_test=50, seed0=0):
    D, M, G = [], [], []
    L = np.linspace(6 / 25, 6, 25)
    for c in range(n_concepts):
        org = planted_cylinder(seed=seed0 * 1000 + c, n_test=n_test, sector=sector)
        cyl = fit_cylinder(org.train, seed=c, n_null=2)
        v = sector_vectors(cyl, gamma_deg=45, n_bins=24, strengths=L)[:, 0]     # one fixed tilted direction
        lab = org.judge(np.broadcast_to(v[:, None, :], (25, n_test, org.config.d)))
        M.append(activation_margin(lab.T, L))
        D.append(org.test)
        G.append(np.full(n_test, c))
    return pairwise_test(np.concatenate(D), np.concatenate(M), groups=np.concatenate(G), n_perm=200)


def test_implication3_replica():
    ind = _replica("independent")
    assert abs(ind.r) < 0.03 and ind.p_perm > 0.01
    tied = _replica("tied")
    assert tied.r < -0.05 and tied.p_perm < 0.01


def test_pairwise_test_hand_computed(tmp_path):
    D = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0], [1.0, -1.0]])
    M = np.array([1.0, 2.0, 4.0, 0.0])                                         # sample 3 never activated: dropped
    pt = pairwise_test(D, M, n_perm=50)
    x = np.array([1 / math.sqrt(2), 0.0, 1 / math.sqrt(2)])                    # pairs (0,1), (0,2), (1,2)
    y = np.array([1.0, 3.0, 2.0])
    np.testing.assert_allclose(pt.x, x)
    np.testing.assert_allclose(pt.y, y)
    np.testing.assert_allclose(pt.r, np.corrcoef(x, y)[0, 1])
    assert 0 < pt.p_perm <= 1 and pt.n_samples == 3
    pt.save(tmp_path / "p")
    assert PairwiseTest.load(tmp_path / "p").r == pt.r
    # groups: cross-group pairs are not formed
    pg = pairwise_test(np.vstack([D[:3], D[:3]]), np.r_[M[:3], M[:3]], groups=[0, 0, 0, 1, 1, 1], n_perm=10)
    assert pg.x.size == 6


# ------------------------------------------------------------------ Implication 2 (spec §8 test 8)
def test_steerability_slope_and_trig_law_hand_computed():
    from interplab.probes.crh import steerability_slope, trig_law_scan

    lab = np.array([[1, 2, 2], [1, 1, 2]])                  # fractions per step 0, .5, 1 -> slope .5
    assert steerability_slope(lab) == pytest.approx(0.5)
    np.testing.assert_allclose(steerability_slope(lab[:, None, :]), [0.5, 0.5])
    rng = np.random.default_rng(0)
    cos = rng.uniform(-0.3, 0.95, 40)
    sin = np.sqrt(1 - cos**2)
    S = rng.uniform(0.1, 1.0, 40)
    res = trig_law_scan(sin, cos, S, 2.0, a_max=1.0, a_step=0.5, p_step=0.1, n_perm=20)
    keep = cos >= 0
    assert res.n_negative_cos == int((~keep).sum()) and res.n_used == int(keep.sum())
    assert np.isnan(res.r_max[0])                             # a = 0: p-range [0.1, -0.1] empty
    # a = 1: p ∈ {0.1, ..., 0.9}; hand-computed max r
    y = S[keep] / 2.0
    rs = [np.corrcoef(sin[keep] * cos[keep] ** (2 * p - 1), y)[0, 1] for p in np.round(np.arange(0.1, 0.9 + 1e-9, 0.1), 10)]
    assert res.r_max[2] == pytest.approx(max(rs))
    assert res.p_best[2] == pytest.approx(np.round(np.arange(0.1, 0.9 + 1e-9, 0.1), 10)[int(np.argmax(rs))])
    ab = trig_law_scan(sin, cos, S, 2.0, a_max=1.0, a_step=0.5, p_step=0.1, negative_cos="abs", n_perm=0)
    assert ab.n_used == 40
    # a planted law is found: S = ‖a‖² sin² θ is x at a = 2, p = 1
    c = rng.uniform(0.05, 0.99, 200)
    s = np.sqrt(1 - c**2)
    planted = trig_law_scan(s, c, 3.0**2 * s**2, 3.0, a_max=3.0, a_step=0.5, p_step=0.1, n_perm=50)
    assert planted.global_r > 0.999 and planted.perm_p < 0.05
