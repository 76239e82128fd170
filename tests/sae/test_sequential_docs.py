"""docs/sae.md's sequential-benchmark tables equal the committed `sae-synthetic` run (results/sae-synthetic/): every
row is regenerated here from the run's summary (mean [95 % t interval] over SAE seeds, bounds clipped to [0, 1])."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNS = sorted((ROOT / "results" / "sae-synthetic").glob("2*"))
ARMS = {"fast": "FAST", "bt_f": "BT(F)", "bt_p": "BT(P)"}


def _b(x: float) -> str:
    x = min(max(x, 0.0), 1.0)
    return "1.0" if x == 1.0 else "0.0" if x == 0.0 else f"{x:.3f}"


def _cell(s: dict) -> str:
    return f"{s['mean']:.3f} [{_b(s['lo'])}, {_b(s['hi'])}]"


def matched_rows(summary: dict) -> list[str]:
    """The rows of the docs' matched-L0 table: | k | arm | MCC | recovery bos | EV (FAST) | EV (packed) |."""
    rows = []
    for k in (2, 4, 8):
        for arm, label in ARMS.items():
            s = summary[f"{arm}/k={k}"]
            cells = [str(k), label] + [_cell(s[m]) for m in ("mcc", "rec_bos", "explained_variance",
                                                              "explained_variance_packed")]
            rows.append("| " + " | ".join(cells) + " |")
    return rows


def main_rows(summary: dict) -> list[str]:
    """The rows of the docs' k = 4 table: | arm | MCC | bos | eot | position | topic | EV |."""
    return ["| " + " | ".join([label] + [_cell(summary[f"{arm}/k=4"][m]) for m in
                                         ("mcc", "rec_bos", "rec_eot", "rec_pos", "rec_topic",
                                          "explained_variance")]) + " |" for arm, label in ARMS.items()]


@pytest.fixture(scope="module")
def summary():
    assert RUNS, "no committed sae-synthetic run under results/sae-synthetic/"
    return json.loads((RUNS[-1] / "json" / "summary.json").read_text())


def test_docs_tables_equal_the_committed_run(summary):
    docs = (ROOT / "docs" / "sae.md").read_text()
    for row in matched_rows(summary) + main_rows(summary):
        assert row in docs, f"docs/sae.md lacks the committed row:\n{row}"


def test_a_drifted_number_is_caught(summary):
    drifted = json.loads(json.dumps(summary))
    drifted["fast/k=4"]["mcc"]["mean"] += 0.001
    docs = (ROOT / "docs" / "sae.md").read_text()
    assert main_rows(drifted)[0] not in docs
