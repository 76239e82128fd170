"""Issue 46: the verdicts of an atlas (probes/lenses/atlas_validity.py) and of a many-pair lens
study (probes/lenses/facts_validity.py). Each check fires on a constructed bad run and stays quiet
on a good one; built from synthetic maps (no model), so fast."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from interplab.probes.lenses.atlas import Atlas, AtlasConfig, map_agreement
from interplab.probes.lenses.atlas_validity import atlas_verdicts
from interplab.probes.lenses.dla import DLAResult
from interplab.probes.lenses.facts import ROLES, FactLensConfig, FactLensStudy
from interplab.probes.lenses.facts_validity import fact_verdicts, halves
from interplab.probes.validity import ValidityReport


# ------------------------------------------------------------------------------------------------
# the atlas
def _atlas(heads: dict, layers: dict, *, span: float = 5.0) -> Atlas:
    ag = map_agreement(heads, layers, top_k=5, n_boot=200, n_perm=500, seed=0)
    return Atlas(
        model="synthetic",
        head_maps=heads,
        layer_maps=layers,
        directions={},
        agreement=ag,
        overlaps=pd.DataFrame(),
        planted=pd.DataFrame(),
        config=AtlasConfig(),
        lens_metrics={"clean": span, "corrupt": 0.0},
    )


def _by_claim(verdicts) -> dict:
    return {v.claim: v for v in verdicts}


def test_atlas_verdicts_reproduce_agreement_within_layers_and_not_a_shared_depth_trend():
    rng = np.random.default_rng(0)
    n_layers, n_heads = 12, 8
    patching = rng.normal(size=(n_layers, n_heads)) ** 2
    dla = patching + rng.normal(0, 0.3, patching.shape)  # names the same heads
    level = np.linspace(0, 4, n_layers)[:, None]
    truth = level + rng.normal(0, 0.3, patching.shape)  # only a depth trend ...
    truth2 = level + rng.normal(0, 0.3, patching.shape)  # ... shared with another map
    base = rng.normal(size=60)
    layers = {
        "pr": base + rng.normal(0, 0.3, 60),
        "patching_resid": 0.5 + 0.1 * base + rng.normal(0, 0.03, 60),
    }
    a = _atlas({"truth": truth, "patching": patching, "dla": dla, "truth2": truth2}, layers)
    v = _by_claim(atlas_verdicts(a))
    good = v["patching and dla implicate the same heads (layer partialled out)"]
    assert good.outcome == "reproduced" and not good.failed
    trend = v["truth and truth2 implicate the same heads (layer partialled out)"]
    row = a.agreement.set_index(["map_a", "map_b"]).loc[("truth", "truth2")]
    assert row.rho > 0.7 and row.p < 0.01  # the raw reading calls it agreement
    assert trend.outcome == "not reproduced" and not trend.failed
    assert (
        v["pr and patching_resid vary together over layers (depth partialled out)"].outcome
        == "reproduced"
    )
    assert set(a.agreement["correction"]) == {"holm over 7 pairs"}
    report = ValidityReport.of(atlas_verdicts(a))
    assert report.summary()["failed_checks"] == 0


def test_atlas_checks_fire_on_few_layers_a_flat_pair_a_saturated_profile_and_no_correction():
    rng = np.random.default_rng(1)
    smooth = np.cumsum(rng.normal(size=(2, 12)), axis=1)  # 12 autocorrelated layers
    heads = {"patching": rng.normal(size=(12, 4)), "dla": rng.normal(size=(12, 4))}
    layers = {
        "pr": smooth[0],
        "patching_resid": 0.98 + 0.01 * np.tanh(smooth[1]),
    }  # at the ceiling 1
    a = _atlas(heads, layers, span=0.2)  # the pair barely moves the metric
    v = _by_claim(atlas_verdicts(a))
    lay = v["pr and patching_resid vary together over layers (depth partialled out)"]
    kinds = {c.kind for c in lay.failed}
    assert lay.outcome == "inconclusive" and kinds == {"sampling_units", "floor_ceiling"}
    assert len([c for c in lay.failed if c.kind == "floor_ceiling"]) == 2  # span and saturation
    heads_v = v["patching and dla implicate the same heads (layer partialled out)"]
    assert {c.kind for c in heads_v.failed} == {"floor_ceiling"}
    # an agreement table read without a correction
    a.agreement = a.agreement.drop(columns=["p_holm"]).assign(correction="none")
    assert all("multiple_testing" in {c.kind for c in x.failed} for x in atlas_verdicts(a))
    # a run saved before the pair's metrics were kept cannot vouch for its patching maps
    a.lens_metrics = {}
    assert v and all(x.outcome == "inconclusive" for x in atlas_verdicts(a))


# ------------------------------------------------------------------------------------------------
# many pairs
def _study(
    n: int = 48,
    *,
    head_effect: float = 0.6,
    cross: int = 4,
    last_after: float = 0.9,
    sub_before: float = 0.8,
    seed: int = 0,
) -> FactLensStudy:
    """A synthetic study: n pairs, 8 layers x 6 heads; head L2H3 restores `head_effect`; the
    subject's last token carries the information through layer cross - 1, the last token from layer
    `cross` on."""
    rng = np.random.default_rng(seed)
    L, H = 8, 6
    roles = np.tile([ROLES.index(r) for r in ("prefix", "subject_last", "after", "last")], (n, 1))
    resid = rng.normal(0, 0.05, (n, L, 4))
    resid[:, :cross, 1] += sub_before
    resid[:, cross:, 3] += last_after
    heads = rng.normal(0, 0.03, (n, L, H))
    heads[:, 2, 3] += head_effect
    dla = heads * 2 + rng.normal(0, 0.02, heads.shape)
    pairs = pd.DataFrame(
        {
            "clean_metric": 3.0,
            "corrupt_metric": -3.0,
            "included": np.ones(n, bool),
            "final_rank": 0,
            "relation": "r",
        }
    )
    z = np.zeros((n, L))
    return FactLensStudy(
        "synthetic",
        FactLensConfig(n_boot=300, seed=0).validate(),
        pairs,
        z,
        z,
        roles,
        resid,
        np.zeros((2, n, L, 4)),
        heads,
        np.zeros((2, n, L, H)),
        DLAResult(dla, np.zeros((n, L)), np.zeros((n, L)), np.zeros(n), np.zeros(n), np.zeros(n)),
        pd.DataFrame(columns=["site", "method", "spearman", "pearson", "pair"]),
    )


def test_fact_verdicts_name_the_planted_head_and_layer_on_held_out_pairs():
    st = _study()
    sel, score = halves(st)
    assert not set(sel) & set(score) and len(sel) + len(score) == 48
    v = fact_verdicts(st)
    assert [x.claim for x in v[:2]] == [
        (
            "L2H3 is the top recall head: patched alone (attn_z) it restores the most of the logit "
            "difference"
        ),
        "the recall moves from the subject's last token to the last token between L3 and L4",
    ]
    assert all(x.outcome == "reproduced" and not x.failed for x in v[:3])
    assert "rank 1 of 48 heads" in v[0].measured and "24 held-out pairs" in v[0].measured


def test_fact_checks_fire_on_selection_on_scored_pairs_few_pairs_floored_effects_no_correction():
    same = fact_verdicts(_study(), held_out=False)
    for x in same[:2]:
        assert {c.kind for c in x.failed} == {"held_out", "multiple_testing"}, x.claim
    few = fact_verdicts(_study(n=16))
    assert all("sampling_units" in {c.kind for c in x.failed} for x in few)
    floored = fact_verdicts(_study(head_effect=0.02))[0]
    assert "floor_ceiling" in {c.kind for c in floored.failed}
    # both token roles restore almost everything around the crossing: the comparison sits at the
    # ceiling
    sat = _study()
    sat.resid_patch[:, :, 1] = 0.97
    sat.resid_patch[:, :, 3] = np.where(np.arange(8) >= 4, 0.99, 0.96)[None]
    flat = fact_verdicts(sat)[1]
    assert "between L3 and L4" in flat.claim and "floor_ceiling" in {c.kind for c in flat.failed}
    ag = _study().head_agreement({"truth": np.random.default_rng(5).normal(size=(8, 6))})
    assert set(ag["correction"]) == {"holm over 3 pairs"}
    assert all(not x.failed for x in fact_verdicts(_study(), ag)[2:])
    unc = fact_verdicts(_study(), ag.drop(columns=["p_holm"]).assign(correction="none"))[2:]
    assert len(unc) == 3 and all({c.kind for c in x.failed} == {"multiple_testing"} for x in unc)
    # a study that names no crossing decides nothing
    none = fact_verdicts(_study(cross=0))[1]
    assert none.supported is None and none.outcome == "inconclusive"


@pytest.mark.parametrize("kind", ["atlas", "lenses"])
def test_reports_round_trip_through_a_saved_run(kind, tmp_path):
    v = (
        fact_verdicts(_study())
        if kind == "lenses"
        else atlas_verdicts(_atlas({"patching": np.eye(6), "dla": np.eye(6)}, {}))
    )
    r = ValidityReport.of(v)
    r.save(tmp_path / "validity")
    back = ValidityReport.load(tmp_path / "validity")
    assert back.markdown() == r.markdown() and back.outcomes == r.outcomes
