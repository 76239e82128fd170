"""Every method's main experiment runs end to end with `model=<dir>` on the GPT-2-small-size random model (item 5
of issue 14): results are meaningless on random weights; the point is that nothing breaks and nothing is toy-only.
Minimal settings come from `interplab.testing.SMOKE_EXPERIMENTS` (shared with scripts/gpu_check.py)."""
from __future__ import annotations

import pytest

from interplab.testing import SMOKE_EXPERIMENTS, real_size_checkpoint, smoke_experiment_args


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SMOKE_EXPERIMENTS))
def test_main_experiment_runs_on_gpt2_small_size(name, tmp_path):
    from interplab.cli import main
    from interplab.results import list_runs

    path = real_size_checkpoint("gpt2-small")
    rc = main(["run", name, "--out", str(tmp_path), *smoke_experiment_args(name, path)])
    assert rc == 0
    runs = list_runs(name, tmp_path)
    assert len(runs) == 1 and runs.iloc[0]["status"] == "complete", runs
