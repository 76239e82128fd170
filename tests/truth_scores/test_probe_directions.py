"""Truth-Score probe directions: fitted exactly as the Truth-Score map (so each head's accuracy is its score), written
into the residual stream through that head's W_O, and on the planted-truth organism the planted heads' probes are
the accurate ones."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import interplab
from interplab.core.errors import InputError
from interplab.probes.truth import truth_probe_directions, truth_scores
from interplab.zoo.validation.truth_scores import (PlantedTruthSpec, build_planted_truth_organism,
                                                   planted_truth_items)


@pytest.fixture(scope="module")
def organism(tmp_path_factory):
    torch.set_num_threads(1)
    spec = PlantedTruthSpec()
    path = build_planted_truth_organism(tmp_path_factory.mktemp("tpd") / "truth", spec)
    model = interplab.load_model(str(path))
    items = planted_truth_items(96, seed=0)
    return model, items, spec


def test_accuracy_is_the_truth_score_and_direction_is_w_times_W_O(organism):
    model, items, spec = organism
    heads = [spec.heads[0], (spec.heads[0][0], (spec.heads[0][1] + 1) % model.n_heads), spec.heads[2]]
    res = truth_probe_directions(model, items, heads, folds=4)
    ts = truth_scores(model, items, folds=4, solver="lbfgs")
    for (layer, h), acc in zip(res.heads, res.accuracy):
        assert acc == pytest.approx(ts.scores[layer, h], abs=1e-12)
    W_O = model.attention_weights()["W_O"].double().numpy()
    for i, (layer, h) in enumerate(res.heads):
        np.testing.assert_allclose(res.directions[i], res.weights[i] @ W_O[layer, h], rtol=1e-10, atol=1e-12)
    assert res.directions.shape == (3, model.d_model) and res.name(0) == f"truth probe L{heads[0][0]}H{heads[0][1]}"


def test_planted_heads_have_the_accurate_probes(organism):
    model, items, spec = organism
    others = [(layer, h) for layer in range(model.n_layers) for h in range(model.n_heads)
              if (layer, h) not in set(map(tuple, spec.heads))][:4]
    res = truth_probe_directions(model, items, list(spec.heads) + others, folds=4)
    planted, rest = res.accuracy[:len(spec.heads)], res.accuracy[len(spec.heads):]
    assert planted.min() > 0.95 and rest.max() < planted.min()


def test_bad_heads_are_typed_errors(organism):
    model, items, _ = organism
    with pytest.raises(InputError, match="outside"):
        truth_probe_directions(model, items, [(model.n_layers, 0)])
    with pytest.raises(InputError):
        truth_probe_directions(model, items, [])
