"""Snapshots of every experiment output the suite writes, for behaviour-preserving refactors (issue 26: "every
experiment's numbers stay identical"). With INTERPLAB_OUTPUT_SNAPSHOT=DIR set, each finished run records, per test
and per output file, a hash of its numbers (tables, JSON, arrays; figures and timing fields left out) into
DIR/<worker>.jsonl. `python -m tests.output_snapshot BEFORE AFTER` lists every output that changed. Unset, nothing
happens."""
from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from pathlib import Path

VOLATILE = re.compile(r"(time|timings|wall|second|date|elapsed|duration|created|finished|started|_s$|per_s|tokens_per|"
                      r"version|path|dir$|host|machine|platform|python|torch|transformers|timestamp|id$)", re.I)


# a model named after its temporary folder: tmp_pytest-of-... paths, and the session fixtures' ckpt_<arch><n>
# folders, whose number depends on how many checkpoints that worker made before
TMP_NAME = re.compile(r"tmp_pytest-of-[\w.-]+|\bckpt_[a-z0-9]+?\d+\b")


def _norm(obj):
    if isinstance(obj, dict):
        return {_norm(k): _norm(v) for k, v in sorted(obj.items()) if not VOLATILE.search(str(k))}
    if isinstance(obj, list):
        return [_norm(v) for v in obj]
    if isinstance(obj, float):
        return float(f"{obj:.9g}")
    if isinstance(obj, str) and ("/tmp" in obj or obj.startswith(("/", "~"))):
        return "<path>"  # each pytest session builds its checkpoints under a fresh temporary root
    if isinstance(obj, str):
        return TMP_NAME.sub("<tmp>", obj)  # a model named after its temporary folder
    return obj


def file_content(p: Path):
    """The normalised content behind a digest (tables and JSON only), kept for small files so a changed output can be
    shown, not only flagged."""
    import pandas as pd

    if p.suffix == ".csv":
        df = pd.read_csv(p)
        return {str(k): [_norm(x) for x in v] for k, v in df.to_dict(orient="list").items()
                if not VOLATILE.search(str(k))}
    if p.suffix == ".json":
        return _norm(json.loads(p.read_text()))
    return None


def file_digest(p: Path) -> str | None:
    import numpy as np
    import pandas as pd

    if p.suffix == ".csv":
        df = pd.read_csv(p)
        df = df[[c for c in df.columns if not VOLATILE.search(str(c))]]
        cols = {str(k): [_norm(x) for x in v] for k, v in df.to_dict(orient="list").items()}
        return hashlib.sha256(json.dumps(cols, default=str, sort_keys=True).encode()).hexdigest()
    if p.suffix == ".json":
        return hashlib.sha256(json.dumps(_norm(json.loads(p.read_text())), default=str).encode()).hexdigest()
    if p.suffix in (".npz", ".npy"):
        arrs = np.load(p, allow_pickle=False)
        items = arrs.items() if hasattr(arrs, "items") else [("a", arrs)]
        h = hashlib.sha256()
        for k, a in sorted(items):
            h.update(k.encode())
            a = np.asarray(a)
            h.update((np.round(a.astype(np.float64), 9) if a.dtype.kind == "f" else a).tobytes())
        return h.hexdigest()
    return None


def run_digest(run_dir: Path) -> dict[str, str]:
    out = {}
    for p in sorted(run_dir.rglob("*")):
        rel = p.relative_to(run_dir).as_posix()
        if not p.is_file() or rel.startswith("figures/") or p.name in ("run.json", "config.json"):
            continue
        try:
            d = file_digest(p)
        except Exception as e:  # noqa: BLE001 - an unreadable file is recorded, not fatal
            d = f"unreadable: {type(e).__name__}"
        if d is not None:
            out[TMP_NAME.sub("<tmp>", rel)] = d
    return out


def install(snapshot_dir: str) -> None:
    """Wrap RunDir.finish so each finished run appends its digest (keyed by the current test) to the snapshot."""
    from interplab.results import runs

    orig = runs.RunDir.finish
    counter: dict[tuple, int] = {}

    def finish(self):
        test = os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" (", 1)[0]
        key = (test, self.kind)
        counter[key] = counter.get(key, 0) + 1
        run_dir = Path(self.partial_path)
        rec = {"test": test, "kind": self.kind, "n": counter[key], "files": run_digest(run_dir),
               "content": {TMP_NAME.sub("<tmp>", p.relative_to(run_dir).as_posix()): file_content(p)
                           for p in run_dir.rglob("*")
                           if p.is_file() and p.suffix in (".csv", ".json") and p.stat().st_size < 50_000
                           and not p.relative_to(run_dir).as_posix().startswith("figures/")}}
        Path(snapshot_dir).mkdir(parents=True, exist_ok=True)
        with open(Path(snapshot_dir) / f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')}-{os.getpid()}.jsonl",
                  "a") as fh:
            fh.write(json.dumps(rec) + "\n")
        return orig(self)

    runs.RunDir.finish = finish


def load(d: str) -> dict:
    recs = {}
    for f in Path(d).glob("*.jsonl"):
        for line in f.read_text().splitlines():
            r = json.loads(line)
            for rel, h in r["files"].items():
                recs[(r["test"], r["kind"], r["n"], rel)] = h
    return recs


def main(argv=None) -> int:
    a, b = (load(x) for x in (argv or sys.argv[1:])[:2])
    changed = sorted(k for k in a.keys() & b.keys() if a[k] != b[k])
    only_a, only_b = sorted(a.keys() - b.keys()), sorted(b.keys() - a.keys())
    for k in changed:
        print("changed:", *k)
    for k in only_a:
        print("only before:", *k)
    for k in only_b:
        print("only after:", *k)
    print(f"{len(a.keys() & b.keys())} outputs in both, {len(changed)} changed, {len(only_a)} only before, "
          f"{len(only_b)} only after")
    return 1 if changed else 0


if __name__ == "__main__":
    raise SystemExit(main())
