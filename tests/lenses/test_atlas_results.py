"""The atlas numbers quoted in docs/lenses.md equal the committed `atlas` run (results/atlas/), so docs and outputs
cannot drift; the committed result folders load and their stored maps reproduce the committed tables."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from interplab.core.result import Result
import interplab.probes.lenses  # noqa: F401  (registers Atlas for load_any)
from interplab.probes import stats

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "results" / "atlas" / "20261201-183024-52b69d"
DOC = (ROOT / "docs" / "lenses.md").read_text()


def _section() -> str:
    start = DOC.index("### Measured (`interplab run atlas`")
    return " ".join(DOC[start:DOC.index("### What the tests guarantee", start)].split())  # line breaks = spaces


def _f(x: float, nd: int = 2) -> str:
    return f"{x:.{nd}f}"


@pytest.fixture(scope="module")
def tables():
    return {t: pd.read_csv(RUN / "tables" / f"{t}.csv") for t in ("agreement", "overlaps", "planted")}


def test_the_docs_name_the_committed_run():
    assert RUN.name in _section() and (RUN / "json" / "summary.json").exists()
    assert "20.7 s" in _section() and "20.7 s" in (ROOT / "results" / "atlas" / "README.md").read_text()


def test_agreement_numbers_in_docs_equal_the_run(tables):
    text = _section()
    ag = tables["agreement"].set_index(["model", "map_a", "map_b"])
    label = {"truth": "truth", "patching": "patching", "dla": "DLA"}
    for a, b in (("truth", "patching"), ("truth", "dla"), ("patching", "dla")):
        r = ag.loc[("toy-chat", a, b)]
        row = (f"| {label[a]} vs {label[b]} | {_f(r.rho)} [{_f(r.lo)}, {_f(r.hi)}] | {_f(r.p, 3)} | "
               f"{r.topk_overlap:.1f} |")
        assert row in text, row
    r = ag.loc[("planted-truth", "truth", "patching")]
    assert f"ρ = {_f(r.rho)} [{_f(r.lo)}, {_f(r.hi)}] (p = {_f(r.p)})" in text
    assert f"top-5 overlap {r.topk_overlap:.1f}" in text
    for a, b in (("truth", "dla"), ("patching", "dla")):
        r = ag.loc[("planted-truth", a, b)]
        assert f"ρ = {_f(r.rho)} [{_f(r.lo)}, {_f(r.hi)}]" in text
    r = ag.loc[("toy-chat", "pr", "patching_resid")]
    assert f"ρ = {_f(r.rho)} over four layers (p = {_f(r.p)}" in text
    assert np.isnan(ag.loc[("planted-crh", "patching", "dla")].rho)


def test_overlap_and_planted_numbers_in_docs_equal_the_run(tables):
    text = _section()
    ov = tables["overlaps"].set_index(["a", "b"])
    for (a, b), r in ov.iterrows():
        best = r.best.replace("feature ", "") if isinstance(r.best, str) else ""
        cells = f"| {_f(r.max_cos)} | {best} | {_f(r.baseline_max_cos)} |".replace("|  |", "| |")
        assert cells in text, (a, b, cells)
    pl = tables["planted"].set_index(["model", "method", "check"])
    assert pl["passed"].all()
    ax = pl.loc[("planted-crh", "crh", "angle axis to planted axis (deg)")].value
    plane = pl.loc[("planted-crh", "crh", "largest principal angle plane to planted plane (deg)")].value
    ds = pl.loc[("planted-decodeshare", "decodeshare", "largest principal angle to planted P (deg)")].value
    assert f"{ax:.2f}° from the planted axis" in text and f"planted plane is {plane:.2f}°" in text
    assert f"(largest principal angle {ds:.1f}°)" in text


def test_map_values_in_docs_equal_the_stored_results(tables):
    text = _section()
    toy = Result.load_any(RUN / "atlas_toy-chat")
    p, d = toy.head_maps["patching"], toy.head_maps["dla"]
    assert f"L0H0 ({p[0, 0]:.3f}) and L3H1 ({p[3, 1]:.3f})" in text and f"L3H1 first ({d[3, 1]:.2f})" in text
    t = toy.head_maps["truth"]
    assert f"chance ({t.min():.2f}–{t.max():.2f}" in text
    pr, res = toy.layer_maps["pr"], toy.layer_maps["patching_resid"]
    assert "grows " + ", ".join(f"{x:.2f}" for x in pr) in text
    assert "stays at " + ", ".join(f"{x:.2f}" for x in res) in text
    pt = Result.load_any(RUN / "atlas_planted-truth")
    mask = np.zeros(pt.head_maps["truth"].shape, bool)
    heads = [tuple(h) for h in pt.planted_heads]
    mask[tuple(np.array(heads).T)] = True
    assert ", ".join(f"{pt.head_maps['patching'][h]:.3f}" for h in heads) in text
    assert ", ".join(f"{pt.head_maps['dla'][h]:.3f}" for h in heads) in text
    assert np.abs(pt.head_maps["patching"][~mask]).max() <= 0.0015      # "|x| ≤ 0.001 at every decoy"
    assert np.abs(pt.head_maps["dla"][~mask]).max() < 5e-4              # "0.000 elsewhere"
    tr = pt.head_maps["truth"]
    assert np.allclose(tr[mask], 1.0) and f"{tr[~mask].min():.2f}–{tr[~mask].max():.2f} elsewhere" in text
    # the stored maps reproduce the committed agreement table
    row = tables["agreement"].set_index(["model", "map_a", "map_b"]).loc[("planted-truth", "patching", "dla")]
    assert np.isclose(row.rho, stats.spearman(np.abs(pt.head_maps["patching"]), np.abs(pt.head_maps["dla"])))
    summary = json.loads((RUN / "json" / "summary.json").read_text())
    assert summary["models"]["toy-chat"]["unavailable"] == {} and summary["models"]["planted-truth"]["planted_passed"]
