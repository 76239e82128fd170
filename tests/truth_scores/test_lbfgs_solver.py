"""The fast Truth-Score solver (solver="lbfgs") against scikit-learn's LogisticRegression: same objective (L2, C,
unpenalised intercept), so the same coefficients and held-out accuracies; plus config validation and recording."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from interplab.core.errors import ConfigError
from interplab.probes.truth.probe_core import fit_head_probes, kfold_splits
from interplab.probes.truth.probe_lbfgs import lbfgs_logistic
from interplab.probes.truth.scores import TruthScoresConfig, truth_scores_from_activations

sklearn_lm = pytest.importorskip("sklearn.linear_model")


def _data(separable: bool, N=120, L=2, H=3, D=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    y = (torch.rand(N, generator=g) < 0.5).long()
    X = torch.randn(N, L, H, D, generator=g, dtype=torch.float64)
    u = torch.randn(L, H, D, generator=g, dtype=torch.float64)
    u /= u.norm(dim=-1, keepdim=True)
    strength = torch.linspace(0.2, 1.5, L * H, dtype=torch.float64).reshape(L, H)
    if separable:  # a clean margin along u: every head is linearly separable
        X -= (X * u).sum(-1, keepdim=True) * u
        strength = strength + 2.0
    X += (2 * y - 1).double()[:, None, None, None] * strength[..., None] * u
    return X, y.numpy()


def _sklearn(X, y, folds, C):
    N, L, H, D = X.shape
    acc, coef, icpt = np.zeros((len(folds), L, H)), np.zeros((len(folds), L, H, D)), np.zeros((len(folds), L, H))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for f, (tr, te) in enumerate(folds):
            for layer in range(L):
                for h in range(H):
                    clf = sklearn_lm.LogisticRegression(C=C, tol=1e-10, max_iter=10_000)
                    clf.fit(X[tr, layer, h].numpy(), y[tr])
                    acc[f, layer, h] = clf.score(X[te, layer, h].numpy(), y[te])
                    coef[f, layer, h], icpt[f, layer, h] = clf.coef_[0], clf.intercept_[0]
    return acc, coef, icpt


@pytest.mark.parametrize("separable", [False, True])
@pytest.mark.parametrize("C", [0.1, 1.0])
def test_lbfgs_reaches_the_sklearn_optimum(separable, C):
    X, y = _data(separable)
    folds = kfold_splits(len(y), 5, 42)
    fit = fit_head_probes(X, y, folds=folds, solver="lbfgs", C=C, tol=1e-9, max_iter=500, return_weights=True)
    acc, coef, icpt = _sklearn(X, y, folds, C)
    np.testing.assert_allclose(fit.weights.numpy(), coef, atol=2e-4 * max(1.0, np.abs(coef).max()))
    np.testing.assert_allclose(fit.bias.numpy(), icpt, atol=2e-4 * max(1.0, np.abs(icpt).max()))
    np.testing.assert_array_equal(fit.accuracy, acc)
    if separable:
        assert fit.accuracy.min() == 1.0


def test_default_tolerance_matches_sklearn_accuracies_in_float32():
    X, y = _data(False, N=200, L=3, H=4, D=16, seed=1)
    folds = kfold_splits(len(y), 5, 42)
    fit = fit_head_probes(X.float(), y, folds=folds, solver="lbfgs")   # tol 1e-4 like sklearn's default
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        acc = np.array([[[sklearn_lm.LogisticRegression().fit(X[tr, a, b].numpy(), y[tr])
                          .score(X[te, a, b].numpy(), y[te]) for b in range(4)] for a in range(3)]
                        for tr, te in folds])
    assert np.abs(fit.accuracy.mean(0) - acc.mean(0)).mean() <= 0.01


def test_a_truncated_solve_is_not_the_optimum():
    """The coefficient check can fail: 2 iterations are far from sklearn's solution."""
    X, y = _data(False)
    folds = kfold_splits(len(y), 5, 42)
    fit = fit_head_probes(X, y, folds=folds, solver="lbfgs", max_iter=2, return_weights=True)
    _, coef, _ = _sklearn(X, y, folds, 1.0)
    assert np.abs(fit.weights.numpy() - coef).max() > 1e-2


def test_head_chunks_do_not_change_the_solution():
    X, y = _data(False)
    a = fit_head_probes(X, y, solver="lbfgs", return_weights=True)
    b = fit_head_probes(X, y, solver="lbfgs", head_chunk=1, return_weights=True)
    torch.testing.assert_close(a.weights, b.weights)
    np.testing.assert_array_equal(a.accuracy, b.accuracy)


def test_solver_config_validation_and_recording():
    with pytest.raises(ConfigError, match="solver"):
        TruthScoresConfig(solver="newton").validate()
    for bad in (dict(C=0.0), dict(tol=0.0), dict(max_iter=0)):
        with pytest.raises(ConfigError):
            TruthScoresConfig(solver="lbfgs", **bad).validate()
    with pytest.raises(ConfigError):
        fit_head_probes(torch.zeros(10, 1, 1, 2), np.arange(10) % 2, solver="sgd")
    with pytest.raises(ConfigError):
        lbfgs_logistic(torch.zeros(1, 4, 2), torch.tensor([0, 1, 0, 1]), torch.ones(1, 4, dtype=torch.bool), C=-1)
    X, y = _data(False)
    ts = truth_scores_from_activations(X, y, solver="lbfgs", dtype="float64")
    assert ts.config.solver == "lbfgs" and ts.provenance["solver"] == "lbfgs"
    assert "L-BFGS" in ts.provenance["recipe"]
    assert truth_scores_from_activations(X, y, epochs=3).config.solver == "adamw"   # experiments' faithful default
