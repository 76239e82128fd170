"""Where the real models' massive activations sit (docs/real_models.md, "Massive activations"): for four short
public-fact dialogues (chat template on SmolLM2, a plain Question/Answer text on Gemma-3), the positions whose
residual norm exceeds `core.scale.MASSIVE_FACTOR` x the median, their tokens, and the typical / median / all-position
mean / max norm.

    python scripts/massive_positions.py [--threads 1]
"""
from __future__ import annotations

import argparse
import collections
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

DIALOGUES = [("What is the capital of France?", "The capital of France is Paris."),
             ("Name a primary colour.", "Red is a primary colour."),
             ("How many legs does a spider have?", "A spider has eight legs."),
             ("Translate 'cat' into Spanish.", "'Cat' in Spanish is 'gato'.")]
MODELS = (("real:smollm2-135m-instruct", "resid_post.15"), ("real:gemma-3-270m", "resid_post.9"))


def main(argv=None) -> None:
    import torch

    import interplab
    from interplab.core.scale import MASSIVE_FACTOR, activation_scale

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    torch.set_num_threads(ap.parse_args(argv).threads)
    for name, site in MODELS:
        m = interplab.load_model(name)
        tok = m.tokenizer
        if tok.chat_template:
            texts = [tok.apply_chat_template([{"role": "user", "content": q}, {"role": "assistant", "content": a}],
                                             tokenize=False) for q, a in DIALOGUES]
        else:
            texts = [f"Question: {q}\nAnswer: {a}" for q, a in DIALOGUES]
        where, n, n_massive, rows = collections.Counter(), 0, 0, []
        for t in texts:
            ids = m.tokenize([t], chat=False).input_ids
            a = m.run(ids, capture=[site], logits=False).cache[site][0]
            s = activation_scale(a)
            norms = a.norm(dim=-1)
            for i in (norms > MASSIVE_FACTOR * norms.median()).nonzero().flatten().tolist():
                where[f"position {i} {tok.convert_ids_to_tokens([int(ids[0, i])])[0]}"] += 1
            n, n_massive = n + s.n, n_massive + s.n_massive
            rows.append((s.typical, s.median, s.mean_all, float(norms.max())))
        mean = [sum(r[k] for r in rows) / len(rows) for k in range(4)]
        print(f"{name} {site}: {n} positions, {n_massive} massive ({dict(where)}); mean over dialogues: typical "
              f"{mean[0]:.1f}, median {mean[1]:.1f}, all-position mean {mean[2]:.1f}, max {mean[3]:.1f} "
              f"(max / median {mean[3] / mean[1]:.0f}x)")


if __name__ == "__main__":
    main()
