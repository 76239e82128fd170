"""Issue 46 §2 (the atlas): correlations over layers with depth partialled out, and nulls that keep
the layer structure (interplab.probes.stats: partial_spearman, phase_surrogates, group_permutations,
effective_n, partial_spearman_test; interplab.probes.lenses.depth). Fast: synthetic profiles only.
"""

from __future__ import annotations

import numpy as np
import pytest

from interplab.core.errors import ShapeError
from interplab.probes import stats
from interplab.probes.lenses.depth import depth_partialled

L = np.arange(30)


def _ar1(rng, n: int = 30, phi: float = 0.9) -> np.ndarray:
    """A smooth (autocorrelated) profile over n layers with unit variance."""
    x = np.empty(n)
    x[0] = rng.normal()
    for t in range(1, n):
        x[t] = phi * x[t - 1] + rng.normal() * np.sqrt(1 - phi * phi)
    return x


def test_partial_spearman_removes_a_shared_depth_trend_and_keeps_a_real_relation():
    rng = np.random.default_rng(0)
    raw, part, related = [], [], []
    for _ in range(40):
        # unrelated profiles that both rise with depth (different shapes, independent noise)
        a, b = L / 10 + rng.normal(0, 0.5, 30), (L / 10) ** 1.5 + rng.normal(0, 0.5, 30)
        raw.append(stats.spearman(a, b))
        part.append(stats.partial_spearman(a, b, L))
        # related profiles: a shared non-depth component on top of the trend
        shared = _ar1(rng, phi=0.5)
        related.append(
            stats.partial_spearman(
                L / 10 + shared + rng.normal(0, 0.2, 30),
                L / 10 + shared + rng.normal(0, 0.2, 30),
                L,
            )
        )
    assert np.mean(raw) > 0.75  # the raw ρ counts the trend as agreement
    assert abs(np.mean(part)) < 0.07 and np.std(part) < 0.3
    assert np.mean(related) > 0.85 and np.min(related) > 0.6
    with pytest.raises(ShapeError):
        stats.partial_spearman(L, L[:-1], L)


def test_layer_structure_null_is_wider_than_iid_on_autocorrelated_profiles_and_calibrated():
    rng = np.random.default_rng(1)
    wide, fp_phase, fp_iid = [], [], []
    for s in range(100):
        t = stats.partial_spearman_test(
            _ar1(rng) + L / 15, _ar1(rng) + L / 15, L, null="phase", B=400, seed=s
        )
        wide.append(t.null_sd / t.iid_sd)
        fp_phase.append(t.p < 0.05)
        fp_iid.append(t.p_iid < 0.05)
    assert np.mean(wide) > 1.3 and np.mean(np.array(wide) > 1) > 0.8
    # independent smooth profiles: the i.i.d. shuffle rejects far too often, the phase null near its
    # level
    assert np.mean(fp_iid) > 0.18 and np.mean(fp_phase) < 0.12
    # white-noise profiles: the two nulls agree (the phase null is not simply always wider)
    ratio = [
        stats.partial_spearman_test(
            rng.normal(size=30), rng.normal(size=30), L, null="phase", B=400, seed=s
        ).null_sd
        / (1 / np.sqrt(28))
        for s in range(20)
    ]
    assert 0.8 < np.mean(ratio) < 1.2


def test_phase_surrogates_keep_the_periodogram_and_group_permutations_keep_the_groups():
    rng = np.random.default_rng(2)
    x = _ar1(rng, n=31)
    for n in (30, 31):  # even and odd lengths
        s = stats.phase_surrogates(x[:n], 50, seed=0)
        assert s.shape == (50, n) and np.allclose(s.mean(1), x[:n].mean())
        assert np.allclose(
            np.abs(np.fft.rfft(s, axis=1)), np.abs(np.fft.rfft(x[:n]))[None], atol=1e-9
        )
    g = np.repeat(np.arange(5), 4)
    idx = stats.group_permutations(g, 30, seed=0)
    assert (g[idx] == g[None]).all() and (np.sort(idx, 1) == np.arange(20)).all()
    assert not (idx == np.arange(20)).all()


def test_effective_n_counts_autocorrelated_layers_as_fewer_points():
    rng = np.random.default_rng(3)
    smooth = np.mean([stats.effective_n(_ar1(rng), _ar1(rng)) for _ in range(30)])
    white = np.mean(
        [stats.effective_n(rng.normal(size=30), rng.normal(size=30)) for _ in range(30)]
    )
    assert smooth < 15 and white > 24
    assert stats.effective_n(L, L) < 10  # two trends: a handful of independent points


def test_head_maps_that_share_only_layer_levels_do_not_agree_once_the_layer_is_partialled_out():
    rng = np.random.default_rng(4)
    n_layers, n_heads = 20, 8
    level = np.linspace(0, 3, n_layers)[:, None]
    a = level + rng.normal(0, 0.5, (n_layers, n_heads))
    b = level + rng.normal(0, 0.5, (n_layers, n_heads))
    t = depth_partialled("layer x head", a, b, n_perm=1000, seed=0)
    assert (
        t.rho > 0.7
        and abs(t.rho_partial) < 0.2
        and t.p > 0.05
        and t.n_eff == n_layers * (n_heads - 1)
    )
    same = depth_partialled("layer x head", a, a + rng.normal(0, 0.1, a.shape), n_perm=1000, seed=0)
    assert same.rho_partial > 0.8 and same.p < 0.01
    with pytest.raises(ValueError):
        depth_partialled("heads", a, b, n_perm=100, seed=0)
