"""Truth-Score probes without a model: folds, parity with an independent reference, planted signals, invariances."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from interplab.core.errors import ShapeError
from interplab.probes.truth.probe_core import fit_head_probes, kfold_splits, stratified_splits
from interplab.probes.truth.scores import TruthScores, TruthScoresConfig, truth_scores_from_activations

L, H = 3, 5  # L != H everywhere so a transposed map is caught


def _planted(N=292, D=8, seed=0, star=(1, 3), strength=3.0, noise=0.5):
    """Head outputs ~ N(0, noise^2) with 3*y*u added to head `star` (spec §8 test 1)."""
    g = torch.Generator().manual_seed(seed)
    y = (torch.rand(N, generator=g) < 0.5).long()
    X = noise * torch.randn(N, L, H, D, generator=g, dtype=torch.float64)
    u = torch.randn(D, generator=g, dtype=torch.float64)
    u /= u.norm()
    X[:, star[0], star[1]] += strength * y[:, None].double() * u
    return X, y.numpy()


def test_kfold_matches_sklearn():
    sk = pytest.importorskip("sklearn.model_selection")
    for n in (10, 11, 57, 292):
        ours = kfold_splits(n, 5, 42)
        ref = list(sk.KFold(5, shuffle=True, random_state=42).split(np.arange(n)))
        for (a_tr, a_te), (b_tr, b_te) in zip(ours, ref):
            assert np.array_equal(a_tr, b_tr) and np.array_equal(a_te, b_te)


def test_stratified_folds_balanced_and_partition():
    y = np.array([0] * 30 + [1] * 13)
    sp = stratified_splits(y, 5, 0)
    te = np.concatenate([t for _, t in sp])
    assert sorted(te.tolist()) == list(range(len(y)))
    for tr, t in sp:
        assert abs(y[t].sum() - 13 / 5) <= 1 and len(np.intersect1d(tr, t)) == 0


def _reference(X, y, splits, epochs, lr, wd, bs):
    """Independent implementation: torch.optim.AdamW + autograd on a full [L,H,D] probe per fold."""
    y = torch.as_tensor(y)
    N, Lx, Hx, D = X.shape
    accs, Ws = [], []
    for tr, te in splits:
        W = torch.zeros(Lx, Hx, D, dtype=X.dtype, requires_grad=True)
        B = torch.zeros(Lx, Hx, dtype=X.dtype, requires_grad=True)
        opt = torch.optim.AdamW([W, B], lr=lr, weight_decay=wd)
        for _ in range(epochs):
            for s in range(0, len(tr), bs):
                idx = torch.as_tensor(tr[s:s + bs])
                logit = torch.einsum("nlhd,lhd->nlh", X[idx], W) + B
                target = y[idx].to(X.dtype)[:, None, None].expand_as(logit)
                loss = torch.nn.functional.binary_cross_entropy_with_logits(logit, target)
                opt.zero_grad()
                loss.backward()
                opt.step()
        with torch.no_grad():
            logit = torch.einsum("nlhd,lhd->nlh", X[torch.as_tensor(te)], W) + B
            accs.append(((torch.sigmoid(logit) > 0.5) == y[te][:, None, None].bool()).double().mean(0))
            Ws.append(W.detach().clone())
    return torch.stack(accs).numpy(), torch.stack(Ws)


@pytest.mark.parametrize("bs", [512, 37, 16])  # full batch; folds with different #batches (37/38 rows); 3 batches
def test_parity_with_independent_reference(bs):
    X, y = _planted(N=47, D=6, seed=1, strength=1.0)
    fit = fit_head_probes(X, y, epochs=25, batch_size=bs, return_weights=True)
    if bs == 37:
        assert len({(len(tr) + bs - 1) // bs for tr, _ in fit.folds}) == 2  # the uneven schedule is exercised
    ref_acc, ref_w = _reference(X, y, fit.folds, 25, 1e-2, 1e-3, bs)
    np.testing.assert_array_equal(fit.accuracy, ref_acc)
    assert float((fit.weights - ref_w).abs().max()) < 1e-9


def test_planted_head_ranks_first_others_at_chance():
    X, y = _planted()
    ts = truth_scores_from_activations(X, y, dtype="float64")
    assert ts.scores.shape == (L, H)
    assert ts.top_heads(1)[0][:2] == (1, 3)
    assert ts.scores[1, 3] >= 0.95
    others = np.delete(ts.scores.ravel(), 1 * H + 3)
    sigma = 0.5 / np.sqrt(len(y))
    assert abs(others.mean() - 0.5) <= 3 * sigma, others.mean()
    # Precision/recall/F1 of the planted head are high too; fold details are consistent
    assert ts.f1[1, 3] > 0.9 and ts.fold_accuracy.shape == (5, L, H)
    assert np.allclose(ts.fold_accuracy.mean(0), ts.scores)
    assert ts.n_val.sum() == len(y) and ts.accuracy_step == pytest.approx(1 / 58)


def test_shuffled_labels_give_chance():
    X, y = _planted()
    y_shuf = np.random.default_rng(3).permutation(y)
    ts = truth_scores_from_activations(X, y_shuf, dtype="float64")
    sigma = 0.5 / np.sqrt(len(y))
    assert np.all(np.abs(ts.scores - 0.5) <= 3 * sigma), ts.scores


def test_label_flip_invariance_and_determinism():
    X, y = _planted(strength=1.0)
    a = truth_scores_from_activations(X, y)
    b = truth_scores_from_activations(X, 1 - y)
    np.testing.assert_array_equal(a.scores, b.scores)
    np.testing.assert_array_equal(a.fold_accuracy, b.fold_accuracy)
    assert np.all((a.scores >= 0) & (a.scores <= 1))
    c = truth_scores_from_activations(X, y)
    assert a.scores.tobytes() == c.scores.tobytes()
    assert a.loss_curve.tobytes() == c.loss_curve.tobytes()


def test_order_invariance_with_fixed_fold_membership():
    X, y = _planted(strength=1.0)
    base = fit_head_probes(X, y, dtype=torch.float64)
    perm = np.random.default_rng(0).permutation(len(y))
    inv = np.argsort(perm)  # new index of old sample i is inv[i]
    folds = [(inv[tr], inv[te]) for tr, te in base.folds]
    # full batch: the training set of each fold is the same set of samples in a different order
    permuted = fit_head_probes(X[perm], y[perm], folds=folds, dtype=torch.float64)
    np.testing.assert_array_equal(base.accuracy, permuted.accuracy)


def test_truthscores_roundtrip_frame_and_orientation(tmp_path):
    X, y = _planted(N=60, strength=2.0)
    ts = truth_scores_from_activations(X, y, epochs=20, model="toy")
    df = ts.to_frame()
    assert len(df) == L * H and {"layer", "head", "score", "fold_std", "rank", "f1", "acc_fold4"} <= set(df)
    assert df.loc[df["rank"] == 1, ["layer", "head"]].values.tolist() == [list(ts.top_heads(1)[0][:2])]
    ts.save(tmp_path / "ts")
    back = TruthScores.load(tmp_path / "ts")
    np.testing.assert_array_equal(back.scores, ts.scores)
    np.testing.assert_array_equal(back.fold_f1, ts.fold_f1)
    assert back.config == ts.config and back.model == "toy" and back.n_samples == 60
    with pytest.raises(Exception, match="overwrite"):
        ts.save(tmp_path / "ts")
    ts.check_shape(L, H)
    with pytest.raises(ShapeError, match="transposed"):
        ts.check_shape(H, L)
    with pytest.raises(ShapeError, match="transposed"):
        TruthScores.from_array(ts.scores.T, n_layers=L, n_heads=H)


def test_bad_inputs_raise():
    X, y = _planted(N=20)
    with pytest.raises(ShapeError):
        fit_head_probes(X[0], y)
    with pytest.raises(ShapeError):
        fit_head_probes(X, y[:-1])
    with pytest.raises(Exception, match="0/1"):
        fit_head_probes(X, y + 1)
    with pytest.raises(Exception, match="fold_kind"):
        truth_scores_from_activations(X, y, fold_kind="nope")
    assert TruthScoresConfig().folds == 5
