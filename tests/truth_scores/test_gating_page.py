"""AppTest: the Truth Scores page opens a committed world-facts gating run (results/truth-gating-sweep-smollm2/)
without a model and shows its verdicts beside the numbers: an inconclusive one as a visible warning that names
why (issue 46 §1)."""
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

import interplab.app  # noqa: E402

PAGE = str(Path(interplab.app.__file__).resolve().parent / "pages" / "2_Truth_Scores.py")


def test_page_shows_the_gating_run_and_its_verdicts(monkeypatch, tmp_path):
    from interplab.results import load_run
    from interplab.results.runs import shipped_runs

    runs = [d for d in shipped_runs("truth-gating-sweep") if (d / "facts_gating").exists()]
    assert runs
    monkeypatch.setenv("INTERPLAB_DEFAULT_MODEL", str(tmp_path / "missing"))
    monkeypatch.setenv("INTERPLAB_HOME", str(tmp_path / "home"))
    at = AppTest.from_file(PAGE, default_timeout=180).run()
    assert not at.exception, at.exception
    shown = at.selectbox(key="ts_fg_run").value
    res, report = load_run(shown).result("facts_gating"), load_run(shown).validity()
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["chosen on the tune split"] == f"{res.mode} α {res.alpha:g}"
    assert metrics["p against shuffled maps"] == f"{res.p:.3f}"
    assert "ts_fg_null__chart" in [c.key for c in at.get("plotly_chart")]
    boxes = [w.value for w in (*at.warning, *at.success, *at.info)]
    for claim, outcome in report.outcomes.items():
        hit = [b for b in boxes if claim in b]
        assert hit and hit[0].startswith(f"**{outcome}**"), (claim, boxes)
        if outcome == "inconclusive":
            assert any(claim in w.value and "Inconclusive because" in w.value for w in at.warning)
