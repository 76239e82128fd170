"""Shared-subspace estimator, nulls, LOTO and the planted-factor generator (spec tests 5 and 7)."""
import numpy as np
import pytest

from interplab.core.errors import ConfigError, InputError, ResultsError, ShapeError
from interplab.probes.decodeshare import (
    SharedSubspace, loto_subspaces, match_state_counts, null_permutation, null_rotation, planted_factor_states,
    principal_angles, projector, shared_subspace,
)
from interplab.probes.stats import bootstrap_ci, paired_signflip_test


@pytest.fixture(autouse=True)
def _one_thread():
    from threadpoolctl import threadpool_limits
    with threadpool_limits(1):
        yield


@pytest.fixture(scope="module")
def planted():
    return planted_factor_states(n_tasks=5, n_per_task=300, d=32, r_shared=3, r_task=2, seed=0)


@pytest.fixture(scope="module")
def unplanted():
    return planted_factor_states(n_tasks=5, n_per_task=300, d=32, r_shared=3, r_task=2, shared=False, seed=0)


def test_planted_shared_factor_is_recovered(planted):
    ss = shared_subspace(planted.states)
    assert ss.k_s == 3
    ang = principal_angles(ss.basis, planted.shared_basis)
    assert ang.max() < 3.0, ang
    assert np.allclose(ss.basis.T @ ss.basis, np.eye(3), atol=1e-10)
    # the private factors are not shared
    for B in planted.task_bases.values():
        assert principal_angles(ss.basis, B).min() > 80


def test_no_planted_factor_gives_empty_shared_set(unplanted):
    """With mutually orthogonal private factors nothing is shared: |S| = 0 (p = 1 then follows from the definition
    p = (#{null >= 0} + 1) / (B + 1), so the nulls are tested on non-empty controls below)."""
    ss = shared_subspace(unplanted.states)
    assert ss.k_s == 0 and ss.basis.shape == (32, 0)


LEVEL = 0.05


def _control(seed):
    """No shared factor, but the private factors are independent Haar draws (not orthogonal), so at tau = 0.02 some
    components are shared by chance (|S| > 0). Each task's law is invariant under the signed permutations of Null-2,
    so the observed |S| is a draw from the null: p is valid, not 1 by construction."""
    pf = planted_factor_states(n_tasks=5, n_per_task=100, d=32, shared=False, orthogonal=False, seed=seed)
    return pf, shared_subspace(pf.states, tau=0.02)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_null_permutation_rejects_planted_factor(seed):
    pf = planted_factor_states(n_tasks=5, n_per_task=100, d=32, r_shared=3, r_task=2, seed=seed)
    ss = shared_subspace(pf.states, tau=0.02)
    assert ss.k_s == 3
    res = null_permutation(ss, B=199, seed=seed)
    assert 1 / (res.B + 1) < LEVEL  # the floor is below the level, so a rejection is possible at all
    assert res.p < LEVEL, (res.p, np.bincount(res.null))


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_nulls_accept_no_shared_control(seed):
    pf, ss = _control(seed)
    assert ss.k_s > 0  # chance sharing: the p-value is not 1 by construction
    p1 = null_permutation(ss, B=199, seed=seed).p
    p2 = null_rotation(pf.states, ss, B=39, seed=seed).p
    assert p1 > LEVEL and p2 > LEVEL, (ss.k_s, p1, p2)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_null_rotation_rejects_planted_factor(seed):
    """Null-2 has power only where randomly rotated factors barely overlap (cos^2 ~ 1/d): at d = 32 its null |S|
    (6-10) exceeds the planted |S| = 3 and it cannot reject (measured; see docs/decodeshare.md). At d = 256 and
    tau = 0.05 the rotated tasks share almost nothing, so the planted factor is rejected at the floor."""
    pf = planted_factor_states(n_tasks=5, n_per_task=100, d=256, r_shared=3, r_task=2, seed=seed)
    ss = shared_subspace(pf.states, tau=0.05)
    assert ss.k_s == 3
    res = null_rotation(pf.states, ss, B=39, seed=seed)
    assert 1 / (res.B + 1) < LEVEL
    assert res.p < LEVEL, (res.p, np.bincount(res.null))


def test_shares_sum_to_one_and_lemma_bound(planted):
    for mode in ("paper", "repo"):
        for tau, m in ((1e-3, None), (0.05, 2), (0.2, 1)):
            ss = shared_subspace(planted.states, mode=mode, tau=tau, m=m)
            assert np.allclose(ss.shares.sum(1), 1.0, atol=1e-12)
            assert (ss.shares >= 0).all()
            assert ss.k_s <= len(ss.tasks) / (ss.m_used * tau) + 1e-9
            assert ss.k_s <= ss.bound
            assert np.allclose(ss.components.T @ ss.components, np.eye(ss.k), atol=1e-10)
            if ss.k_s:
                assert np.allclose(ss.basis.T @ ss.basis, np.eye(ss.k_s), atol=1e-10)


def test_k_follows_rho_and_manual_algorithm(planted):
    """Independent re-implementation of Algorithm 1 on the same (already balanced) data."""
    states = planted.states
    ss = shared_subspace(states, rho=0.9, tau=1e-3)
    xs = [x - x.mean(0) for x in states.values()]
    X = np.concatenate(xs)
    ev, evec = np.linalg.eigh(X.T @ X)
    ev, evec = ev[::-1], evec[:, ::-1]
    k = int(np.searchsorted(np.cumsum(ev) / ev.sum(), 0.9) + 1)
    assert ss.k == k
    Q = evec[:, :k]
    r = np.stack([(x @ Q).var(0) / (x @ Q).var(0).sum() for x in xs])
    assert np.allclose(np.abs(ss.shares), np.abs(r), atol=1e-8)
    S = np.nonzero((r >= 1e-3).sum(0) >= 5)[0]
    assert np.array_equal(ss.shared_idx, S)
    assert np.allclose(projector(ss.basis), projector(Q[:, S]), atol=1e-8)


def test_null_permutation_floor_and_multiset(planted):
    ss = shared_subspace(planted.states)
    res = null_permutation(ss, B=300, seed=1)
    assert res.p >= 1 / 301 - 1e-15
    assert np.isclose(res.p, 1 / 301)  # planted sharing is far above the permutation null
    # the null preserves each task's multiset of shares: check one permuted draw explicitly
    rng = np.random.default_rng(0)
    perm = rng.random(ss.shares.shape).argsort(-1)
    p = np.take_along_axis(ss.shares, perm, -1)
    assert np.allclose(np.sort(p, 1), np.sort(ss.shares, 1))
    assert null_permutation(ss, B=50, seed=3).null.tolist() == null_permutation(ss, B=50, seed=3).null.tolist()


def test_null_rotation_runs_and_has_floor(planted):
    ss = shared_subspace(planted.states)
    res = null_rotation(planted.states, ss, B=4, seed=0)
    assert res.B == 4 and len(res.null) == 4 and res.p >= 1 / 5
    with pytest.raises(InputError):
        null_rotation({k: v for k, v in list(planted.states.items())[:3]}, ss, B=2)


def test_balance_subsamples_to_smallest_task():
    pf = planted_factor_states(n_per_task=[100, 150, 300, 120, 90], seed=2)
    ss = shared_subspace(pf.states)
    assert set(ss.n_rows.values()) == {90}
    ss2 = shared_subspace(pf.states, balance=False)
    assert ss2.n_rows == {f"task{i}": n for i, n in enumerate([100, 150, 300, 120, 90])}
    assert ss.k_s == 3 and ss2.k_s == 3


def test_loto_excludes_held_out_task(planted):
    folds = loto_subspaces(planted.states)
    assert set(folds) == set(planted.states)
    for t, ss in folds.items():
        assert t not in ss.tasks and t not in ss.n_rows
        assert sum(ss.n_rows.values()) == 300 * 4
        assert principal_angles(ss.basis, planted.shared_basis).max() < 3.0
    # changing the held-out task's data does not change its fold
    mod = dict(planted.states)
    mod["task0"] = np.random.default_rng(9).standard_normal((300, 32)) * 100
    f2 = loto_subspaces(mod)
    assert np.array_equal(f2["task0"].basis, folds["task0"].basis)
    assert not np.array_equal(f2["task1"].components, folds["task1"].components)


def test_empty_fallback_m_and_config_errors(unplanted):
    ss = shared_subspace(unplanted.states, empty_fallback_m=1)
    assert ss.m_used == 1 and ss.k_s > 0
    with pytest.raises(ConfigError):
        shared_subspace(unplanted.states, mode="bogus")
    with pytest.raises(ConfigError):
        shared_subspace(unplanted.states, m=9)
    with pytest.raises(ShapeError):
        shared_subspace({"a": np.zeros((5, 3)), "b": np.zeros((5, 4))})
    with pytest.raises(InputError):
        shared_subspace({"a": np.ones((5, 3))})


def test_save_load_roundtrip_and_frame(planted, tmp_path):
    ss = shared_subspace(planted.states, mode="repo")
    ss.save(tmp_path / "ss")
    ld = SharedSubspace.load(tmp_path / "ss")
    assert np.array_equal(ld.basis, ss.basis) and np.array_equal(ld.shares, ss.shares)
    assert ld.config == ss.config and ld.tasks == ss.tasks and ld.n_rows == ss.n_rows
    df = ss.to_frame()
    assert len(df) == 5 * ss.k and set(df["mode"]) == {"repo"}
    assert np.allclose(df.groupby("task")["share"].sum(), 1.0)
    with pytest.raises(ResultsError):
        SharedSubspace.load(tmp_path / "nothing")


def test_match_counts_bootstrap_and_signflip():
    a = {"x": np.zeros((10, 2)), "y": np.zeros((4, 2))}
    b = {"x": np.zeros((3, 2)), "y": np.zeros((8, 2))}
    ma, mb = match_state_counts(a, b)
    assert [len(ma[t]) for t in "xy"] == [3, 4] and [len(mb[t]) for t in "xy"] == [3, 4]
    m, lo, hi = bootstrap_ci(np.r_[np.ones(30), np.zeros(70)], B=2000)
    assert m == 0.3 and lo < 0.3 < hi and hi - lo < 0.25
    p = paired_signflip_test(np.ones(40), np.zeros(40), B=999)
    assert np.isclose(p, 1 / 1000)
    assert paired_signflip_test(np.ones(40), np.ones(40), B=99) == 1.0
