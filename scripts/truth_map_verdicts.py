"""Add the context-vs-distractor contrast and (re)write the validity report of saved world-facts
`truth-scores` runs, exactly as the experiment does at its end (`facts_contrast`, `map_verdicts`):
the verdicts are a pure function of the saved `facts_map`, so a run made before a verdict rule
changed gets the current rule's report without rerunning the model (issue 46; the runs' READMEs say
when this was done and by which commit).

Writes json/contrast.json, tables/contrast.csv and validity/ into each run folder and lists them in
its run.json.

    python scripts/truth_map_verdicts.py results/truth-scores-smollm2/with-distractors
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def revalidate(path: Path, n_boot: int = 1000) -> str:
    from interplab.core.io import write_json, write_table
    from interplab.experiments.truth_scores import facts_contrast
    from interplab.probes.truth.map_verdicts import map_verdicts
    from interplab.probes.validity import VALIDITY_RESULT, ValidityReport
    from interplab.results import load_run

    fm = load_run(path).result("facts_map")
    contrast = facts_contrast(fm, n_boot=n_boot)
    manifest_path = path / "run.json"
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    if contrast is not None:
        write_json(path / "json" / "contrast.json", contrast[0])
        write_table(path / "tables" / "contrast.csv", contrast[1])
        manifest["files"].update({"json/contrast.json": "json", "tables/contrast.csv": "table"})
    report = ValidityReport.of(map_verdicts(fm, contrast=None if contrast is None else contrast[0]))
    report.save(path / VALIDITY_RESULT, overwrite=True)
    manifest["files"][VALIDITY_RESULT] = "result"
    manifest["files"] = dict(sorted(manifest["files"].items()))
    write_json(manifest_path, manifest)
    return report.render()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="saved world-facts truth-scores run folders")
    ap.add_argument("--n-boot", type=int, default=1000)
    a = ap.parse_args(argv)
    for r in a.runs:
        t0 = time.process_time()
        print(revalidate(Path(r), a.n_boot))
        print(f"{r}: {time.process_time() - t0:.0f} s CPU")


if __name__ == "__main__":
    main()
