"""core.nan: NaN-aware reductions never warn and say what an all-NaN input gives."""
import warnings

import numpy as np

from interplab.core.nan import finite_argmax, finite_max, finite_mean, finite_min


def test_all_nan_and_empty_inputs_return_default_without_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for x in ([], [np.nan, np.nan], [np.inf, np.nan]):
            assert np.isnan(finite_mean(x)) and np.isnan(finite_max(x)) and np.isnan(finite_min(x))
            assert finite_argmax(x) is None
        assert finite_max([np.nan], default=0.0) == 0.0


def test_values_ignore_non_finite_entries():
    x = np.array([[1.0, np.nan], [np.inf, 3.0]])
    assert finite_mean(x) == 2.0 and finite_max(x) == 3.0 and finite_min(x) == 1.0
    assert finite_argmax(x) == 3 and finite_argmax([2.0, 5.0, 5.0]) == 1
