"""validate-crh (issue 16): the unchanged CRH pipeline recovers a planted cylinder and sector detector, and its
negative controls (a sector-blind organism, a rotated plane) fail to recover it."""
import math

import numpy as np
import pytest

from interplab.probes.crh.validation import CONDITIONS, validate_crh
from interplab.zoo.validation.crh import (PlantedCrhSpec, build_planted_crh_organism, load_planted_crh,
                                          planted_crh_pairs)


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    # the smallest grid that still resolves the sector map (12 bins x 8 strengths, one steered prompt)
    return validate_crh(seeds=(0,), n_samples=32, n_prompts=1, n_bins=12, n_strengths=8, n_impl=12, n_p=3,
                        n_perm=100, workdir=tmp_path_factory.mktemp("crh-val"))


def test_planted_truth_is_recorded_and_the_detector_reads_the_sector(tmp_path):
    import interplab
    from interplab.probes.crh import TokenSetJudge, steer_generate

    path = build_planted_crh_organism(tmp_path / "o", PlantedCrhSpec(n_samples=8, seed=3))
    t = load_planted_crh(path)
    assert t["site"] == "resid_post.0" and t["axis"].shape == (64,) and abs(t["axis"] @ t["e1"]) < 1e-9
    m = interplab.load_model(str(path), backend="bridge", device="cpu")
    e_psi = math.cos(t["psi"]) * t["e1"] + math.sin(t["psi"]) * t["e2"]
    V = np.stack([4 * (t["axis"] + e_psi), 4 * (t["axis"] - e_psi), 4 * t["axis"], np.zeros(64)])
    _, prompts = planted_crh_pairs(8)
    out = steer_generate(m, prompts[:4], V, site="resid_post.0", max_new_tokens=2)
    # only the sector at psi activates: the opposite sector, the bare axis and no steering do not
    assert TokenSetJudge(["concept"])(out.texts).tolist() == [2, 1, 1, 1]


@pytest.mark.slow  # ~20 s on 2 cores (one seed, three conditions)
def test_validate_crh_recovers_the_planted_mechanism(small_run):
    pl = small_run.per_seed[small_run.per_seed.condition == "planted"].iloc[0]
    assert pl.axis_deg <= 10 and pl.plane_deg <= 15 and pl.centre_deg <= 20 and pl.map_r >= 0.9, pl.to_dict()
    assert small_run.passed()
    # Implication 1 on the planted detector: full penalty (p = 1) removes the in-plane part, so no concept
    assert pl.impl1_rate_p0 > 0 and pl.impl1_rate_p1 == 0
    assert np.isfinite(pl.impl3_r) and 0 < pl.impl3_p <= 1 and np.isfinite(pl.impl2_r) and 0 < pl.impl2_perm_p <= 1
    assert set(small_run.per_seed.condition) == set(CONDITIONS)


@pytest.mark.slow
def test_negative_controls_fail_to_recover(small_run):
    ps = small_run.per_seed.set_index("condition")
    assert small_run.controls_fail()
    # sector-blind: the geometry is there (same cylinder) but the map is flat, so no sector centre and no map
    blind = ps.loc["sector_blind"]
    assert blind.plane_deg <= 15 and not np.isfinite(blind.centre_deg) and not (blind.map_r >= 0.9)
    assert ps.loc["rotated_plane"].plane_deg > 45
    tab = small_run.recovery_table().set_index(["condition", "metric"])
    assert not tab.loc[("sector_blind", "map_r"), "pass"] and not tab.loc[("rotated_plane", "plane_deg"), "pass"]
    assert len(small_run.to_frame()) == 3 and {"auc", "planted_g"} <= set(small_run.maps.columns)


@pytest.mark.slow
def test_validation_figure_and_round_trip(small_run, tmp_path):
    from interplab.core.result import Result
    from interplab.figures.crh import validation_sector_maps

    fig = validation_sector_maps(small_run.maps)
    assert [t.name for t in fig.data][:2] == ["measured: planted", "planted g"]
    small_run.save(tmp_path / "v")
    back = Result.load_any(tmp_path / "v")
    assert back.per_seed.shape == small_run.per_seed.shape and back.passed() == small_run.passed()
