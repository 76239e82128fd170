"""Issue 16 (CRH): helix vs planar arc vs line decided on held-out points with a bootstrap, and a planar arc —
which the helix fit alone accepts (R² > 0.99) — must not pass as a helix."""
import numpy as np
import pytest

from interplab.probes.crh.helix import fit_helix, planted_helix, planted_line
from interplab.probes.crh.shape_selection import ShapeSelection, planted_arc, select_trajectory_shape

SEEDS = (0, 1, 2)


@pytest.mark.parametrize("seed", SEEDS)
def test_each_planted_shape_is_recovered(seed):
    for truth, X in (("helix", planted_helix(30, 1.0, noise=0.02, seed=seed)),
                     ("arc", planted_arc(30, noise=0.02, seed=seed)),
                     ("line", planted_line(30, noise=0.02, seed=seed))):
        res = select_trajectory_shape(X, seed=seed)
        assert res.chosen == truth, (truth, res.table, res.gains)


def test_planar_arc_passes_the_old_helix_fit_but_not_the_selection():
    X = planted_arc(30, noise=0.02, seed=0)
    assert fit_helix(X).mean_r2_cs > 0.99          # the helix fit alone cannot tell an arc from a helix
    res = select_trajectory_shape(X)
    gain = res.gains.set_index("comparison").loc["helix-arc"]
    assert res.chosen == "arc" and gain["lo"] <= 0.0   # no held-out evidence for the extra axis drift


def test_noise_alone_is_not_a_helix():
    X = np.random.default_rng(0).standard_normal((30, 16))
    assert select_trajectory_shape(X).chosen != "helix"


def test_result_round_trip(tmp_path):
    res = select_trajectory_shape(planted_helix(30, 1.0, noise=0.02))
    back = ShapeSelection.load(res.save(tmp_path / "sel"))
    assert back.chosen == "helix" and np.allclose(back.residuals, res.residuals)
    assert list(back.to_frame()["shape"]) == ["line", "arc", "helix"]


def test_validate_crh_shapes_experiment_names_each_planted_shape(tmp_path):
    """The experiment's verdict comes from its typed result: every planted shape is chosen, the planar arc still
    passes the old helix fit (the reason for the selection), and the run reopens as a ShapeValidation."""
    from interplab.core.io import read_json
    from interplab.core.result import Result
    from interplab.experiments.registry import run_experiment
    from interplab.probes.crh.shape_selection import ShapeValidation

    path = run_experiment("validate-crh-shapes", {"seeds": "0,1", "n_boot": 300}, root=tmp_path)
    res = Result.load_any(path / "validation")
    assert isinstance(res, ShapeValidation) and len(res.table) == 3 * 2
    assert set(res.table["planted"]) == {"helix", "arc", "line"}
    assert res.all_correct and res.arc_passes_old_helix_fit
    assert read_json(path / "json" / "summary.json") == res.summary()


def test_shape_validation_checks_its_columns():
    import pandas as pd

    from interplab.core.errors import InputError
    from interplab.probes.crh.shape_selection import ShapeValidation

    with pytest.raises(InputError, match="needs columns"):
        ShapeValidation(pd.DataFrame({"planted": ["arc"]}))
