"""Which shipped world facts SmolLM2-135M-Instruct answers right closed-book (issue 27 §1 /
methods/truth_scores.md): the counterfactual-context Truth-Score set keeps the known facts, so following the
context is a choice against a memory the model has.

Greedy, chat-templated "Answer with the answer only.\\n\\nQuestion: ..." per fact; a reply counts as known when
the first object of the fact's relation it names is the true one (`interplab.data.world_facts.first_named`).
Writes `known.csv` (relation, subject, object, reply, named, known) and a README with per-relation counts.

    python scripts/known_facts.py [--threads 1] [--max-new-tokens 16] [--out results/world-facts-smollm2]
"""
from __future__ import annotations

import argparse
import os
import platform
import time
from datetime import datetime, timezone
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

MODEL = "real:smollm2-135m-instruct"


def _cpu() -> str:
    if Path("/proc/cpuinfo").is_file():
        for ln in Path("/proc/cpuinfo").read_text().splitlines():
            if ln.startswith("model name"):
                return ln.split(":", 1)[1].strip()
    return platform.machine()


def main(argv=None) -> None:
    import torch

    import interplab
    from interplab.core.io import write_text
    from interplab.data.world_facts import known_facts, load_facts

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    # 16, not known_facts' 8: SmolLM2 restates the question before the object ("The currency of Japan is the
    # Japanese yen.") and 8 tokens cut long subjects off before it
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--out", default="results/world-facts-smollm2")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    facts = load_facts()
    model = interplab.load_model(MODEL)
    df = known_facts(model, facts, max_new_tokens=args.max_new_tokens, batch_size=args.batch_size)
    wall = time.perf_counter() - t0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / "known.csv", df.to_csv(index=False))  # atomic: temp file in `out`, then os.replace
    per = df.groupby("relation", sort=False)["known"].agg(["sum", "count"])
    table = "\n".join(f"| {rel} | {int(r['sum'])} | {int(r['count'])} | {r['sum'] / r['count']:.2f} |"
                      for rel, r in per.iterrows())
    n_known = int(df["known"].sum())
    write_text(out / "README.md", (
        "# world-facts-smollm2: which shipped world facts SmolLM2-135M-Instruct knows closed-book\n\n"
        f"Command: `python scripts/known_facts.py --threads {args.threads} --max-new-tokens {args.max_new_tokens} "
        f"--batch-size {args.batch_size}`\n\n"
        f"Date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; wall time {wall:.0f} s (model load included); "
        f"machine: {_cpu()}, {os.cpu_count()} CPUs, torch {torch.__version__}, {args.threads} thread(s).\n\n"
        "Facts: `interplab/data/resources/facts/world_facts.csv` (hand-compiled public facts, no model output). "
        "Prompt: the chat template around \"Answer with the answer only.\\n\\nQuestion: {question}\", greedy. "
        "known = the first object of the fact's relation that the reply's first line names (whole words, case- "
        "and accent-folded, echoes of the subject skipped) is the true object (`world_facts.first_named`).\n\n"
        f"Known: **{n_known} / {len(df)}**.\n\n"
        "| relation | known | total | rate |\n|---|---|---|---|\n" + table + "\n\n"
        "`known.csv`: one row per fact (relation, subject, object, reply, named, known).\n"))
    print(per.assign(rate=per["sum"] / per["count"]).to_string())
    print(f"known {n_known} / {len(df)}; wrote {out} in {wall:.0f} s")


if __name__ == "__main__":
    main()
