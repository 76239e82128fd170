"""The steering unit (`interplab.core.scale.activation_scale`, issue 25 §3): massive positions are left out."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from interplab.core.errors import ShapeError
from interplab.core.scale import MASSIVE_FACTOR, activation_scale


def test_without_massive_positions_it_is_the_plain_mean_norm():
    a = np.random.default_rng(0).normal(size=(200, 16)).astype(np.float32)
    s = activation_scale(a)
    assert s.n_massive == 0 and s.n == 200
    assert s.typical == pytest.approx(float(np.mean(np.linalg.norm(a, axis=1))), rel=1e-7)
    assert s.typical == s.mean_all


def test_a_planted_massive_position_is_left_out_of_the_unit():
    a = torch.randn(4, 50, 16, generator=torch.Generator().manual_seed(1))
    plain = float(a.reshape(-1, 16).norm(dim=-1).mean())
    a[:, 0] *= 300.0                           # a sink position per sequence, as on SmolLM2
    s = activation_scale(a)
    assert s.n_massive == 4 and s.n == 200
    ordinary = float(a[:, 1:].reshape(-1, 16).norm(dim=-1).mean())
    assert s.typical == pytest.approx(ordinary, rel=1e-6)
    assert s.mean_all > 5 * s.typical          # the old unit would have been several ordinary norms
    assert abs(s.typical - plain) / plain < 0.05
    assert set(s.as_dict()) == {"typical_norm", "median_norm", "mean_norm_all", "n_positions", "n_massive"}


def test_bad_input_is_a_typed_error():
    with pytest.raises(ShapeError, match="at least one position"):
        activation_scale(np.zeros((0, 8)))
    with pytest.raises(ValueError, match="massive_factor"):
        activation_scale(np.ones((3, 4)), massive_factor=1.0)
    assert MASSIVE_FACTOR > 1
