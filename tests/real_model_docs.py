"""What the docs-equal-outputs tests of the real-model sections share (tests/<method>/test_real_model_docs.py): where
a committed run lives and which part of a doc is its "On a real model" section."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
SMOLLM2_SECTION = "## On a real model: SmolLM2-135M-Instruct"


def run_dir(kind: str, label: str, model: str = "smollm2") -> Path:
    """results/<kind>-<model>/<label>, which must be a committed run."""
    d = RESULTS / f"{kind}-{model}" / label
    assert (d / "config.json").is_file(), f"missing committed run {d}"
    return d


def doc_section(doc: str, title: str = SMOLLM2_SECTION) -> str:
    """The text of docs/<doc> from `title` to the next level-2 heading."""
    text = (ROOT / "docs" / doc).read_text(encoding="utf-8")
    assert title in text, f"docs/{doc} lacks {title!r}"
    return text.split(title, 1)[1].split("\n## ", 1)[0]


def validity_report(run: Path):
    """The `ValidityReport` a committed run saved (its verdicts and the checks behind them)."""
    from interplab.probes.validity import VALIDITY_RESULT, ValidityReport

    d = Path(run) / VALIDITY_RESULT
    assert (d / "result.json").is_file(), f"{run} saved no validity report"
    return ValidityReport.load(d)


def assert_claim_table(section: str, *runs: Path) -> None:
    """Every verdict of the committed runs appears in the doc section as its claim-table row (claim
    | measured | validity checks | verdict), rendered from the saved report, so the docs cannot
    drift from the runs."""
    rows = [line for r in runs for line in validity_report(r).markdown().splitlines()[2:]]
    assert rows, f"the runs {[str(r) for r in runs]} carry no verdicts"
    missing = [r for r in rows if r not in section]
    assert not missing, ("claim-table rows missing from the doc (regenerate them from the runs' "
                         "validity reports):\n" + "\n".join(missing))
