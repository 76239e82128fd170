"""The CRH verdicts (issue 46, `probes.crh.verdicts`): each check fires on a constructed bad study
and stays quiet on a good one. The studies are built from arrays (no model): 20 concepts × 5 test
prompts × 4 strength steps."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from interplab.probes.crh.baselines import BaselineCurves
from interplab.probes.crh.sectors import PenaltyMap, SectorMap, sector_angles
from interplab.probes.crh.selection import ReadChoice, in_sample_choice
from interplab.probes.crh.verdicts import CLAIMS, crh_verdicts

S, K, NB = 5, 4, 8
METHODS = ["diffmean", "pca", "probe", "control"]
BUILD, JUDGE = ("wetland", "wetlands", "swamp"), ("marsh", "bog")
WORDS = [
    "river",
    "stone",
    "garden",
    "window",
    "letter",
    "market",
    "forest",
    "candle",
    "bridge",
    "pocket",
    "music",
    "silver",
    "harbor",
    "ladder",
    "meadow",
    "orange",
]


def _text(rng, hit: bool) -> str:
    words = list(rng.choice(WORDS, 8, replace=False))
    return " ".join(words + (["marsh"] if hit else [])) + "."


def _concept(
    i: int,
    rng,
    *,
    hit_rate=0.6,
    control_rate=0.0,
    control_norm=1.0,
    build=BUILD,
    judge=JUDGE,
    same_reply=False,
):
    """One concept's steering: diffmean names the concept in `hit_rate` of prompts at steps 2-4, the
    control in `control_rate`; sector bin 2 names it on every prompt from step 2; p = 0 from step 2,
    p = 1 from step 3."""
    lab = np.ones((len(METHODS), S, K), np.int64)
    for s in range(S):
        lab[0, s, 1:] = np.where(s < round(hit_rate * S), 2, 1)
        lab[3, s, 1:] = np.where(s < round(control_rate * S), 2, 1)
    texts = [
        "the the the the the the" if same_reply else _text(rng, bool(lab[m, s, k] == 2))
        for m in range(len(METHODS))
        for s in range(S)
        for k in range(K)
    ]
    norms = np.tile(np.arange(1.0, K + 1), (len(METHODS), 1))
    norms[3] *= control_norm
    bl = BaselineCurves(
        methods=list(METHODS),
        labels=lab,
        strengths=np.arange(1.0, K + 1),
        directions=np.eye(len(METHODS), 6),
        texts=texts,
        norms=norms,
    )
    sec = np.ones((S, NB, K), np.int64)
    sec[:, 2, 1:] = 2
    pen = np.ones((S, 2, K), np.int64)
    pen[:, 0, 1:] = 2
    pen[:, 1, 2:] = 2
    nll = {
        "null": rng.normal(2.5, 0.3, S),
        "baselines": rng.normal(2.5, 0.3, (len(METHODS), S, K)),
        "sector": rng.normal(2.5, 0.3, (S, NB, K)),
        "penalty": rng.normal(2.5, 0.3, (S, 2, K)),
    }
    return SimpleNamespace(
        baselines=bl,
        nll=nll,
        judge_words=tuple(judge),
        build_words=tuple(build),
        control="pseudo",
        sector=SectorMap(
            labels=sec,
            strengths=np.arange(1.0, K + 1),
            bin_angles=sector_angles(NB),
            gamma_deg=45.0,
            texts=[_text(rng, bool(x == 2)) for x in sec.ravel()],
        ),
        penalty=PenaltyMap(
            labels=pen,
            ps=np.array([0.0, 1.0]),
            strengths=np.arange(1.0, K + 1),
            cos_theta=np.full(S, 0.7),
            texts=[_text(rng, bool(x == 2)) for x in pen.ravel()],
        ),
    )


def study(n: int = 20, *, control_ev: float = 0.25, **kw):
    rng = np.random.default_rng(0)
    concepts = {f"c{i}": _concept(i, rng, **kw) for i in range(n)}
    layers = [0, 5, 10]
    stats = pd.DataFrame(
        [
            {"concept": c, "layer": L, "plane_explained": 0.35 + 0.01 * (i % 3)}
            for i, c in enumerate(concepts)
            for L in layers
        ]
    )
    ctl = pd.DataFrame(
        [
            {
                "concept": c,
                "control": "p",
                "layer": L,
                "plane_explained": control_ev + 0.01 * (i % 2),
            }
            for i, c in enumerate(concepts)
            for L in layers
        ]
    )
    return SimpleNamespace(
        concepts=concepts,
        steered=True,
        stats=stats,
        control_stats=ctl,
        steer_layer=10,
        trig_concept=None,
        pairwise=None,
    )


def choice(st, *, selection=("s0", "s1", "s2", "s3", "s4")) -> ReadChoice:
    return ReadChoice(
        position="mean",
        layer=10,
        step=3,
        selection=list(selection),
        scored=list(st.concepts),
        replies=pd.DataFrame(),
        threshold=3.0,
    )


def verdicts(st, ch=None) -> dict:
    return {v.claim: v for v in crh_verdicts(st, ch or choice(st), B=500)}


def failed(v) -> set[tuple[str, str]]:
    return {(c.kind, c.subject.split(" (")[0].split(",")[0]) for c in v.failed}


def test_a_good_study_reproduces_elicitation_with_every_check_passing():
    vs = verdicts(study())
    v = vs[CLAIMS["elicit"]]
    assert v.outcome == "reproduced", v.reason
    assert {c.kind for c in v.checks} >= {
        "repeated_reply",
        "distinct_tokens",
        "reply_nll",
        "floor_ceiling",
        "match_target",
        "held_out",
        "sampling_units",
        "multiple_testing",
    }
    assert "0.60" in v.measured and "+0.60" in v.measured
    for key in ("sector", "impl1", "geometry"):
        assert vs[CLAIMS[key]].outcome == "reproduced", (key, vs[CLAIMS[key]].reason)


def test_a_control_as_good_as_the_concept_does_not_reproduce():
    v = verdicts(study(control_rate=0.6))[CLAIMS["elicit"]]
    assert not v.failed and v.outcome == "not reproduced"


def test_a_judge_that_shares_the_vectors_words_is_flagged():
    """The issue-28 protocol (the judge's words built the vector), and a subtler one: the judge
    looks for an inflection of a build word."""
    for build, judge in ((JUDGE, JUDGE), (BUILD, ("wetlands", "bog")), ((), JUDGE)):
        v = verdicts(study(build=build, judge=judge))[CLAIMS["elicit"]]
        assert ("held_out", "judge words against the words that built the vector") in failed(v), (
            build,
            judge,
        )
        assert v.outcome == "inconclusive"


def test_a_control_at_half_the_norm_misses_its_match_target():
    v = verdicts(study(control_norm=0.5))[CLAIMS["elicit"]]
    bad = [c for c in v.failed if c.kind == "match_target"]
    assert len(bad) == 1 and bad[0].measured == pytest.approx(0.5) and v.outcome == "inconclusive"
    assert not [
        c
        for c in verdicts(study(control_norm=1.05))[CLAIMS["elicit"]].failed
        if c.kind == "match_target"
    ]


def test_a_read_position_chosen_on_the_scored_concepts_is_flagged():
    st = study()
    for ch in (
        choice(st, selection=["c0", "s1"]),
        in_sample_choice("mean", 10, 3, list(st.concepts)),
    ):
        for v in verdicts(st, ch).values():
            assert any(
                c.kind == "held_out" and c.subject.startswith("read position") for c in v.failed
            ), v.claim
            assert v.outcome == "inconclusive"


def test_degenerate_replies_and_floored_arms_are_flagged():
    v = verdicts(study(same_reply=True))[CLAIMS["elicit"]]
    assert {"repeated_reply", "distinct_tokens"} <= {c.kind for c in v.failed}
    v = verdicts(study(hit_rate=0.0))[CLAIMS["elicit"]]
    assert [c.kind for c in v.failed] == ["floor_ceiling"]
    st = study()
    for c in st.concepts.values():  # replies the unsteered model finds far less likely
        c.nll["baselines"] = c.nll["baselines"] + 5.0
    assert "reply_nll" in {c.kind for c in verdicts(st)[CLAIMS["elicit"]].failed}


def test_too_few_concepts_for_the_interval_are_flagged():
    v = verdicts(study(12))[CLAIMS["elicit"]]
    assert [c.kind for c in v.failed] == ["sampling_units"]


def test_geometry_is_tested_against_the_paired_pseudo_concepts_over_layers():
    vs = verdicts(
        study(control_ev=0.355)
    )  # controls as planar as the concepts: no layer passes Holm
    v = vs[CLAIMS["geometry"]]
    assert v.outcome == "not reproduced" and "0 of 3 layers" in v.measured
    assert any(c.kind == "multiple_testing" and c.passed and c.measured == 3 for c in v.checks)


def test_implication_2_needs_concepts_shuffled_not_samples():
    from interplab.probes.crh.implications import trig_law_scan

    rng = np.random.default_rng(0)
    g = np.repeat(np.arange(20), 5)
    cos = rng.uniform(0.3, 0.9, g.size)
    S_c = rng.uniform(0, 1, 20)[g]
    kw = dict(a_max=2.0, a_step=0.5, p_step=0.25, n_perm=50)
    by_group = trig_law_scan(np.sqrt(1 - cos**2), cos, S_c, 1.0, groups=g, **kw)
    by_sample = trig_law_scan(np.sqrt(1 - cos**2), cos, S_c, 1.0, **kw)
    assert by_group.global_r == by_sample.global_r and by_group.config["permuted"] == "group"
    st = study()
    for tr, ok in ((by_group, True), (by_sample, False)):
        v = verdicts(replace_trig(st, tr))[CLAIMS["impl2"]]
        assert any(c.kind == "sampling_units" for c in v.failed) is not ok
    from interplab.core.errors import InputError

    with pytest.raises(InputError, match="group-level"):
        trig_law_scan(np.sqrt(1 - cos**2), cos, rng.uniform(0, 1, g.size), 1.0, groups=g, **kw)


def replace_trig(st, tr):
    return SimpleNamespace(**{**vars(st), "trig_concept": tr})


def test_implication_3_null_decides_nothing_and_a_relation_does_not_reproduce():
    st = study()
    for p, outcome in ((0.4, "inconclusive"), (0.01, "not reproduced")):
        pt = SimpleNamespace(r=-0.3, p_perm=p, x=np.zeros(40), n_samples=60)
        v = verdicts(SimpleNamespace(**{**vars(st), "pairwise": pt}))[CLAIMS["impl3"]]
        assert v.outcome == outcome and not v.failed


def test_read_choice_summary_and_replace_keep_the_record():
    st = study()
    ch = in_sample_choice("last", 5, 2, list(st.concepts))
    assert not ch.held_out and ch.summary()["chosen_fluent_concept_rate"] is None
    assert replace(ch, selection=["x"]).held_out


def test_the_spiral_verdict_follows_the_held_out_shape_and_flags_one_prompt_pair():
    from interplab.probes.crh.helix import planted_helix, planted_line
    from interplab.probes.crh.verdicts import spiral_verdicts

    for X, chosen in ((planted_helix(30, 1.0, seed=0), True), (planted_line(30, seed=0), False)):
        (v,) = spiral_verdicts(SimpleNamespace(vectors=SimpleNamespace(vectors=X)))
        assert v.supported is chosen and [c.kind for c in v.failed] == ["sampling_units"]
        assert v.outcome == "inconclusive" and "1 prompt pair" in v.reason
    short = SimpleNamespace(vectors=SimpleNamespace(vectors=planted_line(6, seed=0)))
    (v,) = spiral_verdicts(short)
    assert v.supported is None and v.measured.startswith("not computable")   # too few budgets
