"""Quiet by default (issue 15, item 9): loading a model prints no third-party progress bar unless asked for, and
interplab's lineage statistics raise no 'Mean of empty slice' on a layer without valid heads."""
from __future__ import annotations

import os
import subprocess
import sys
import warnings

import numpy as np

LOAD = "import interplab; interplab.load_model('zoo:toy-chat'); print('loaded')"


def _load(env_extra):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", **env_extra}
    env.pop("INTERPLAB_VERBOSE", None) if "INTERPLAB_VERBOSE" not in env_extra else None
    return subprocess.run([sys.executable, "-c", LOAD], capture_output=True, text=True, env=env, timeout=300)


def test_model_load_has_no_progress_bar_unless_verbose():
    quiet = _load({})
    assert quiet.returncode == 0 and "loaded" in quiet.stdout, quiet.stderr[-2000:]
    assert "Loading weights" not in quiet.stderr and "it/s" not in quiet.stderr, quiet.stderr[-2000:]
    loud = _load({"INTERPLAB_VERBOSE": "1"})                      # the bar is still there on request
    assert loud.returncode == 0 and "Loading weights" in loud.stderr


def test_lineage_with_an_all_nan_layer_does_not_warn():
    from interplab.probes.truth import lineage_correlation

    rng = np.random.default_rng(0)
    A, B = rng.random((4, 4)), rng.random((4, 4))
    A[1] = np.nan                                                   # one layer without any score
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = lineage_correlation(A, B, n_permutations=50)
    assert out["n"] == 12 and np.isfinite(out["pearson_centered"]) and np.isfinite(out["null_mean"])
