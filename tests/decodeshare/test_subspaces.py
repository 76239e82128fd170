"""Projector identities, subspace metrics, random and energy-matched controls, steering overlap (spec tests 1, 4, 6)."""
import numpy as np
import pytest

from interplab.core.errors import ConfigError, InputError, ShapeError
from interplab.probes.decodeshare.subspaces import (
    AngleSummary, alpha_matched_control, angle_summary, check_basis, cumulative_energy, energy_pool, energy_ratio, haar_basis, k_matched_control,
    mean_energy, orthonormalize, principal_angles, project_out, projector, repair_vector, steering_overlap,
    subspace_overlap, variance_matched_control,
)


@pytest.fixture(autouse=True)
def _one_thread():
    from threadpoolctl import threadpool_limits
    with threadpool_limits(1):
        yield


def test_projector_symmetric_idempotent_and_basis_invariant():
    rng = np.random.default_rng(0)
    B = rng.standard_normal((20, 5))
    P = projector(B)
    assert np.allclose(P, P.T, atol=1e-14)
    assert np.allclose(P @ P, P, atol=1e-13)
    R = rng.standard_normal((5, 5)) + 3 * np.eye(5)  # invertible
    assert np.allclose(projector(B @ R), P, atol=1e-12)
    assert np.isclose(np.trace(P), 5)


@pytest.mark.parametrize("alpha", [0.25, 0.5, 1.0, 1.5, 2.0])
def test_projection_removal_identities(alpha):
    rng = np.random.default_rng(1)
    Q = orthonormalize(rng.standard_normal((32, 6)))
    h = rng.standard_normal((50, 32)) * 10
    ht = project_out(h, Q, alpha)
    # ||h - h~||^2 = alpha^2 ||Q^T h||^2
    assert np.allclose(np.sum((h - ht) ** 2, 1), alpha ** 2 * np.sum((h @ Q) ** 2, 1), rtol=1e-12)
    if alpha == 1.0:
        assert (np.linalg.norm(ht @ Q, axis=1) <= 1e-10 * np.linalg.norm(h, axis=1)).all()
    # the component orthogonal to Q is untouched
    perp = np.eye(32) - Q @ Q.T
    assert np.allclose(ht @ perp, h @ perp, atol=1e-12)


def test_alpha_zero_is_bitwise_identity():
    rng = np.random.default_rng(2)
    Q = haar_basis(16, 4, seed=3)
    h = rng.standard_normal((7, 16))
    assert np.array_equal(project_out(h, Q, 0.0), h)


def test_principal_angles_and_overlap():
    Q = haar_basis(30, 4, seed=0)
    assert np.allclose(principal_angles(Q, Q), 0, atol=1e-5)
    assert np.isclose(subspace_overlap(Q, Q), 1.0)
    # a basis orthogonal to Q: 90 degrees, overlap 0
    full = haar_basis(30, 8, seed=1)
    A, B = full[:, :4], full[:, 4:]
    assert np.allclose(principal_angles(A, B), 90, atol=1e-6)
    assert abs(subspace_overlap(A, B)) < 1e-12
    # hand-computed: span(e0) vs span(cos t e0 + sin t e1)
    t = np.deg2rad(30)
    a = np.zeros((3, 1)); a[0] = 1
    b = np.zeros((3, 1)); b[0], b[1] = np.cos(t), np.sin(t)
    assert np.isclose(principal_angles(a, b)[0], 30)
    assert np.isclose(subspace_overlap(a, b), np.cos(t) ** 2)
    # overlap = mean cos^2 of principal angles on random pairs
    C, D = haar_basis(30, 5, seed=4), haar_basis(30, 3, seed=5)
    ang = principal_angles(C, D, degrees=False)
    assert np.isclose(subspace_overlap(C, D), np.mean(np.cos(ang) ** 2))
    s = angle_summary([10.0, 20.0, 30.0])
    assert isinstance(s, AngleSummary) and (s.mean, s.min, s.max, s.n) == (20.0, 10.0, 30.0, 3)
    assert np.isnan(angle_summary([])["mean"]) and angle_summary([])["n"] == 0
    with pytest.raises(ShapeError):
        principal_angles(C, haar_basis(20, 3))


def test_haar_reproducible_orthonormal_and_energy_ratio_k_over_d():
    d, k = 40, 6
    a, b = haar_basis(d, k, seed=7), haar_basis(d, k, seed=7)
    assert np.array_equal(a, b)
    assert not np.allclose(a, haar_basis(d, k, seed=8))
    assert np.allclose(a.T @ a, np.eye(k), atol=1e-12)
    # Lemma A.1: E[r(h; Q)] = k/d over Haar Q for a fixed h; Monte-Carlo within 3 standard errors
    h = np.random.default_rng(0).standard_normal(d)
    rs = np.array([energy_ratio(h[None], haar_basis(d, k, seed=s))[0] for s in range(400)])
    se = rs.std(ddof=1) / np.sqrt(len(rs))
    assert abs(rs.mean() - k / d) < 3 * se


def test_check_basis_rejects_non_orthonormal():
    with pytest.raises(InputError):
        check_basis(np.ones((5, 2)))
    with pytest.raises(ShapeError):
        check_basis(np.eye(5)[:, :2], d=6)


def _toy_components():
    rng = np.random.default_rng(3)
    d = 24
    comp = haar_basis(d, 12, seed=11)
    var = np.geomspace(10, 0.5, 12)
    states = (rng.standard_normal((500, 12)) * np.sqrt(var)) @ comp.T
    return comp, var, states


def test_variance_matched_control_pairs_closest_variance():
    comp, var, _ = _toy_components()
    sidx = np.array([0, 3])
    Q = variance_matched_control(comp, var, sidx)
    # greedy closest-in-variance on a geometric spectrum: 0 -> 1, 3 -> 4 (var3 - var4 < var2 - var3)
    expected = orthonormalize(comp[:, [1, 4]])
    assert np.allclose(projector(Q), projector(expected), atol=1e-12)
    assert abs(subspace_overlap(Q, comp[:, sidx])) < 1e-12
    with pytest.raises(ConfigError):
        variance_matched_control(comp[:, :3], var[:3], np.array([0, 1]))


def test_energy_controls_match_energy_exactly():
    comp, var, states = _toy_components()
    sidx = np.array([0, 2, 5])
    QS = comp[:, sidx]
    pool = energy_pool(comp, sidx)
    assert pool.shape[1] == 9 and abs(subspace_overlap(pool, QS)) < 1e-20 + 1e-12
    for a_s in (0.5, 1.0, 1.5):
        c = alpha_matched_control(states, QS, pool, a_s)
        assert np.isclose(c.alpha ** 2 * c.energy_control, a_s ** 2 * c.energy_shared, rtol=1e-12)
        assert c.k == 3
    cum = cumulative_energy(states, pool)
    assert (np.diff(cum) >= 0).all()
    for rule in ("smallest_k_reaching_target", "argmin_clipped"):
        c = k_matched_control(states, QS, pool, 1.0, rule=rule)
        assert 3 <= c.k <= pool.shape[1] and c.alpha == 1.0
        assert np.isclose(c.energy_control, mean_energy(states, c.basis))
    c = k_matched_control(states, QS, pool, 1.0)
    es = mean_energy(states, QS)
    assert c.energy_control >= es or c.k == pool.shape[1]
    if c.k > 3:
        assert cum[c.k - 2] < es


def test_steering_overlap_and_repair():
    Q = haar_basis(16, 3, seed=0)
    rng = np.random.default_rng(0)
    v_in = Q @ rng.standard_normal(3)
    assert np.isclose(steering_overlap(v_in, Q), 1.0)
    v_out = v_in - Q @ (Q.T @ v_in) + (np.eye(16) - Q @ Q.T) @ rng.standard_normal(16)
    assert abs(steering_overlap(v_out, Q)) < 1e-12
    v = rng.standard_normal(16)
    r = repair_vector(v, Q, 1.0, rescale=True)
    assert np.isclose(np.linalg.norm(r), np.linalg.norm(v)) and steering_overlap(r, Q) < 1e-12
    r0 = repair_vector(v, Q, 0.0, rescale=False)
    assert np.array_equal(r0, v)
    rh = repair_vector(v, Q, 0.5, rescale=False)
    assert np.allclose(Q.T @ rh, 0.5 * Q.T @ v)
    with pytest.raises(InputError):
        steering_overlap(np.zeros(16), Q)
