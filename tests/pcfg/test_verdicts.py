"""Issue 46: the PCFG verdict functions (interplab.probes.pcfg.verdicts) on the committed depth
sweep and construction tables and on constructed bad variants of them: each check fires on the bad
case and stays quiet on the good one; the one-sample t test they use equals scipy's."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from interplab.probes.pcfg import verdicts as pv
from interplab.probes.pcfg.depth_seeds import DepthSeedSweep
from interplab.probes.stats import t_test_p

ROOT = Path(__file__).resolve().parents[2]
SWEEP = ROOT / "results" / "pcfg-depth-sweep"
SIB_SEEDS = ROOT / "results" / "pcfg-construction" / "sib-L4-seeds" / "tables" / "truncated_kl.csv"
ORGANISMS = (
    ROOT / "results" / "pcfg-construction" / "all-L2-L4-L6-sib-L4" / "tables" / "truncated_kl.csv"
)
SPLITS = dict(probe_sequences=400, n_splits=3, probe_seed=0)


@pytest.fixture(scope="module")
def sweep() -> DepthSeedSweep:
    return DepthSeedSweep.load(SWEEP / "sweep")


def _failed(v) -> set[str]:
    return {c.kind for c in v.failed}


def test_t_test_p_equals_scipy():
    from scipy.stats import ttest_1samp

    x = np.array([0.3, 0.9, 0.4, 1.2])
    for alt in ("greater", "less", "two-sided"):
        assert t_test_p(x, mu=0.2, alternative=alt) == pytest.approx(
            ttest_1samp(x, 0.2, alternative=alt).pvalue
        )
    assert (
        np.isnan(t_test_p([1.0]))
        and t_test_p([2.0, 2.0]) == 0.0
        and t_test_p([2.0, 2.0], alternative="less") == 1
    )
    with pytest.raises(ValueError):
        t_test_p(x, alternative="up")


def test_committed_sweep_verdicts(sweep):
    vs = {v.claim: v for v in pv.depth_sweep_verdicts(sweep, **SPLITS)}
    out = {c.split(":")[0].split(" (")[0][:40]: v.outcome for c, v in vs.items()}
    assert len(vs) == 4 and all(not v.failed for v in vs.values()), out
    by = {
        ("span_posterior" in c, "inside" in c, "match" in c, "untrained" in c): v
        for c, v in vs.items()
    }
    assert by[(False, False, True, False)].outcome == "reproduced"
    assert (
        by[(False, False, False, True)].supported is None
    )  # depth 3 misses after Holm over 24 tests
    assert by[(True, False, False, False)].outcome == "reproduced"
    assert by[(False, True, False, False)].supported is None  # depth 4 misses


def test_two_seeds_per_depth_fail_sampling_units(sweep):
    keep = lambda d: d[d["seed"] < 2]
    two = dataclasses.replace(
        sweep, organisms=keep(sweep.organisms), slopes=keep(sweep.slopes), probes=keep(sweep.probes)
    )
    vs = pv.depth_sweep_verdicts(two, **SPLITS)
    assert all("sampling_units" in _failed(v) for v in vs)


def test_probes_at_ceiling_fail_floor_ceiling(sweep):
    probes = sweep.probes.assign(score=0.995, score_random_init=0.99)
    l_star = sweep.l_star.assign(best_score=0.995)
    vs = pv.depth_sweep_verdicts(dataclasses.replace(sweep, probes=probes, l_star=l_star), **SPLITS)
    assert all("floor_ceiling" in _failed(v) for v in vs[1:])
    assert not vs[0].failed  # the KL claim has no probe check


def test_a_model_no_better_than_the_bigram_baseline_does_not_match(sweep):
    org = sweep.organisms.assign(kl_ratio_bigram=sweep.organisms["kl_ratio_bigram"] * 20)
    v = pv.depth_sweep_verdicts(dataclasses.replace(sweep, organisms=org), **SPLITS)[0]
    assert v.outcome == "not reproduced"


def test_split_check_fires_when_validation_and_test_share_sequences(monkeypatch):
    assert pv.probe_split_check(400, 3, 0).passed

    def leaky(b, n, seed):
        part = np.arange(n) % 3
        return part == 0, part >= 1, part == 2  # validation and test overlap

    monkeypatch.setattr(pv, "split_sequences", leaky)
    assert not pv.probe_split_check(400, 3, 0).passed


def test_construction_verdicts_on_the_committed_seeds_and_a_bad_case():
    kl = pd.read_csv(SIB_SEEDS)
    (v,) = pv.construction_verdicts(kl)
    assert v.outcome == "not reproduced" and not v.failed
    # one organism of the uniform-binary grammar: one seed, and truncation costs ~0 nats at the
    # output
    (u,) = pv.construction_verdicts(pd.read_csv(ORGANISMS), ["zoo:pcfg-L4"])
    assert _failed(u) == {"sampling_units", "floor_ceiling"}


def test_construction_layer_matched_lens_is_reproduced():
    """A constructed table where each intermediate layer's lens is nearest the k = l + 1 predictor.
    """
    rows = []
    for s in range(3):
        for layer in range(-1, 4):
            for k in range(-1, 4):
                d = 0.02 + 0.1 * abs(k - (layer + 1)) if layer >= 0 else 2.0
                rows.append(
                    {
                        "model": f"m{s}",
                        "layer": layer,
                        "k": k,
                        "kl_trunc_model": d,
                        "kl_exact_trunc": {-1: 0.7, 0: 0.27, 1: 0.1, 2: 0.03, 3: 0.0}[k],
                    }
                )
    (v,) = pv.construction_verdicts(pd.DataFrame(rows))
    assert v.outcome == "reproduced" and not v.failed


def test_pcfg_verdicts_experiment_reproduces_the_committed_report(tmp_path):
    from interplab.experiments.registry import run_experiment
    from interplab.probes.validity import ValidityReport
    from interplab.results.runs import load_run

    committed = sorted((ROOT / "results" / "pcfg-verdicts").glob("*/validity"))
    assert committed, "results/pcfg-verdicts holds no committed verdict run"
    src = load_run(committed[0].parent).json("sources")
    path = run_experiment(
        "pcfg-verdicts", {k: str(ROOT / v) for k, v in src.items()}, root=tmp_path
    )
    fresh = load_run(path).validity()
    old = ValidityReport.load(committed[0])
    assert fresh.markdown() == old.markdown()


def test_docs_claim_table_equals_the_committed_verdicts():
    from tests.real_model_docs import assert_claim_table, doc_section

    run = ROOT / "results" / "pcfg-verdicts" / "sweep-and-sib-seeds"
    section = doc_section("pcfg.md", "## Verdicts (issue 46)")
    assert_claim_table(section, run)
    assert "interplab run pcfg-verdicts --set sweep_run=results/pcfg-depth-sweep" in section


def test_readme_quotes_the_committed_verdicts():
    from tests.real_model_docs import validity_report

    rep = validity_report(ROOT / "results" / "pcfg-verdicts" / "sweep-and-sib-seeds")
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    out = {
        (
            "match"
            if "match the grammar" in c
            else "probe"
            if "untrained" in c
            else "inside"
            if "inside" in c
            else "span"
            if "span_posterior" in c
            else "mirror"
        ): o
        for c, o in rep.outcomes.items()
    }
    assert out == {
        "match": "reproduced",
        "span": "reproduced",
        "probe": "inconclusive",
        "inside": "inconclusive",
        "mirror": "not reproduced",
    }
    for q in ("Holm p 0.053", "Holm p 0.052"):
        assert q in " ".join(rep.verdicts["measured"]) and q in readme, q
    assert "`pcfg-verdicts`" in readme
