"""How far a fine-tuned descendant moved from its base (issue 46 §2, Lineage): per-matrix weight
drift, per-head cosines of W_Q/W_K/W_V/W_O and of the QK/OV circuits, and next-token KL(base ||
descendant) on held-out windows of the pydoc corpus (the fine-tuning distribution's held-out split)
and on the world-fact probe texts of truth-scores (the chat distribution the maps are measured on).

Writes into --out: drift.json (the summary), weight_drift.csv (one row per matrix), heads.csv (per
head, spec §2.4), kl_pydoc.csv and kl_facts.csv (one row per text). The README of
results/truth-lineage-smollm2/ quotes it.

    python scripts/descendant_drift.py --descendant /work/ckpt/smollm2-descendant --out /tmp/drift
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def pydoc_heldout_windows(tokenizer, n: int, seq_len: int = 128) -> list[list[int]]:
    """The first `n` non-overlapping windows (<bos> + seq_len - 1 tokens) of the pydoc corpus's
    held-out split, the split no hyperfit-train window comes from."""
    from interplab.data.corpus import load_corpus
    from interplab.zoo.recipes.hyperfit import HYPERFIT_DATA
    from interplab.zoo.recipes.text import encode_paragraphs

    corpus = load_corpus(
        tuple(HYPERFIT_DATA["sources"]), HYPERFIT_DATA["heldout_frac"], HYPERFIT_DATA["corpus_seed"]
    )
    stream = encode_paragraphs(tokenizer, corpus.heldout)
    L = seq_len - 1
    return [
        [tokenizer.bos_token_id] + stream[i * L : (i + 1) * L].tolist()
        for i in range(min(n, len(stream) // L))
    ]


def fact_texts(model, known: str) -> list[list[int]]:
    """The token ids of the truth-scores probe texts (world facts with distractors, `known`'s
    filter, seed 0)."""
    from interplab.data.world_facts import counterfactual_items, load_facts, load_known
    from interplab.probes.truth.facts_map import fact_probe_rows

    facts = load_facts()
    keep = load_known(known, facts).to_numpy()
    items = [it for it, k in zip(counterfactual_items(facts, seed=0, distractor=True), keep) if k]
    return [r["text"] for r in fact_probe_rows(model, items, seed=0)]


def main(argv=None) -> None:
    import numpy as np
    import torch

    import interplab
    from interplab.probes.truth.drift import drift_summary, next_token_kl, weight_drift
    from interplab.probes.truth.weights import WP_COLUMNS, weight_preservation

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", default="real:smollm2-135m-instruct")
    ap.add_argument("--descendant", required=True, help="the fine-tuned checkpoint folder")
    ap.add_argument(
        "--known", default="smollm2-135m-instruct", help="shipped closed-book filter of the facts"
    )
    ap.add_argument("--n-windows", type=int, default=60, help="held-out pydoc windows for the KL")
    ap.add_argument(
        "--n-texts", type=int, default=0, help="at most this many probe texts for the KL (0 = all)"
    )
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    base = interplab.load_model(a.base, device="cpu")
    desc = interplab.load_model(a.descendant, device="cpu")
    wd = weight_drift(base.hf_model, desc.hf_model)
    wd.to_csv(out / "weight_drift.csv", index=False)
    heads = weight_preservation(base, desc)
    heads.to_csv(out / "heads.csv", index=False)
    pad = base.tokenizer.pad_token_id if base.tokenizer.pad_token_id is not None else 0
    kl_pd = next_token_kl(
        base.hf_model, desc.hf_model, pydoc_heldout_windows(base.tokenizer, a.n_windows), pad_id=pad
    )
    kl_pd.to_csv(out / "kl_pydoc.csv", index=False)
    texts = fact_texts(base, a.known)
    kl_f = next_token_kl(
        base.hf_model, desc.hf_model, texts[: a.n_texts] if a.n_texts else texts, pad_id=pad
    )
    kl_f.to_csv(out / "kl_facts.csv", index=False)

    def kl_stats(df):
        w = df["n_tokens"].to_numpy(float)
        return {
            "n_texts": int(len(df)),
            "n_tokens": int(w.sum()),
            "mean_kl": float(np.average(df["kl"], weights=w)),
            "ce_base": float(np.average(df["ce_base"], weights=w)),
            "ce_desc": float(np.average(df["ce_desc"], weights=w)),
        }

    summ = {
        "base": a.base,
        "descendant": Path(a.descendant).name,
        "weights": drift_summary(wd),
        "heads": {f"mean_{c}": float(heads[c].mean()) for c in WP_COLUMNS}
        | {
            "mean_rel_OV": float(heads["rel_OV"].mean()),
            "mean_rel_QK": float(heads["rel_QK"].mean()),
            "one_minus_mean_cos_OV": float(1 - heads["cos_OV"].mean()),
        },
        "kl_pydoc_heldout": kl_stats(kl_pd),
        "kl_world_facts": kl_stats(kl_f),
        "seconds": time.perf_counter() - t0,
    }
    (out / "drift.json").write_text(json.dumps(summ, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(summ, indent=2))


if __name__ == "__main__":
    main()
