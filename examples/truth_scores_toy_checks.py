"""Checks behind the toy-organism section of docs/truth_scores.md that no `interplab run` experiment covers.

    python examples/truth_scores_toy_checks.py decodability zoo:toy-base raw
    python examples/truth_scores_toy_checks.py null zoo:toy-base raw
    python examples/truth_scores_toy_checks.py gate-perm --source RUN/sweep/source_scores

decodability: the model's Mode-V accuracy on the Truth-Score prompts, and where the CtxMem verification label is
  linearly readable at the scored token (`ver`): a scikit-learn LogisticRegression (same KFold(5, shuffle, 42)
  folds as the Truth-Score recipe) on each head's z, on each layer's heads concatenated, on all heads, and on the
  residual stream after each layer.
null: the Truth-Score recipe on the model's own activations with shuffled labels (20 shuffles): the chance range.
gate-perm: the gating gain of a score map vs within-layer permutations of the same map (100 permutations), on
  toy-chat with the k = 12-16 counterfactual prompts of `truth-gating-sweep --set eval_k_min=12 --set eval_k_max=16`,
  site z, contrast alpha 6 and normalize alpha 0.3; plus the Spearman correlation over permutations between each
  head's gate and context-following accuracy.
Prints JSON; single-threaded.
"""
from __future__ import annotations

import argparse
import json
import warnings

import numpy as np
import torch


def _items(model, fmt):
    from interplab.probes.truth.data import ctxmem_truth_set

    items = ctxmem_truth_set(292, seed=0, fmt=fmt, tokenizer=model.tokenizer)
    return items, np.array([it["label"] for it in items])


def decodability(name, fmt):
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import KFold, cross_val_score

    import interplab
    from interplab.probes.truth.analysis import verification_accuracy
    from interplab.probes.truth.scores import capture_head_outputs

    m = interplab.load_model(name, device="cpu")
    items, y = _items(m, fmt)
    texts = [it["text"] for it in items]
    X = capture_head_outputs(m, texts).numpy()
    kf = KFold(5, shuffle=True, random_state=42)

    def cv(F):
        return round(float(cross_val_score(LogisticRegression(max_iter=2000), F, y, cv=kf).mean()), 3)

    n = len(y)
    with torch.no_grad():
        res = m.run(texts, capture=[f"resid_post.{layer}" for layer in range(m.n_layers)], logits=False)
    kinds = {}
    for it in items:
        kinds[it["candidate_kind"]] = kinds.get(it["candidate_kind"], 0) + 1
    return {"model": name, "fmt": fmt, "candidate_kinds": kinds, "mode_v_accuracy": verification_accuracy(m, items),
            "per_head": [[cv(X[:, layer, h]) for h in range(m.n_heads)] for layer in range(m.n_layers)],
            "per_layer_all_heads": [cv(X[:, layer].reshape(n, -1)) for layer in range(m.n_layers)],
            "all_heads": cv(X.reshape(n, -1)),
            "resid_post": [cv(res.cache.last(f"resid_post.{layer}").float().cpu().numpy())
                           for layer in range(m.n_layers)]}


def null(name, fmt, n_shuffles=20):
    import interplab
    from interplab.probes.truth.scores import capture_head_outputs, truth_scores_from_activations

    m = interplab.load_model(name, device="cpu")
    items, y = _items(m, fmt)
    X = capture_head_outputs(m, [it["text"] for it in items])
    real = truth_scores_from_activations(X, y).scores
    rng = np.random.default_rng(0)
    nulls = np.stack([truth_scores_from_activations(X, rng.permutation(y)).scores for _ in range(n_shuffles)])
    flat = nulls.reshape(n_shuffles, -1)
    return {"model": name, "fmt": fmt, "real_mean": float(real.mean()), "real_max": float(real.max()),
            "null_head_q025": float(np.quantile(nulls, .025)), "null_head_q975": float(np.quantile(nulls, .975)),
            "null_map_max_mean": float(flat.max(1).mean()),
            "null_map_mean_range": [float(flat.mean(1).min()), float(flat.mean(1).max())]}


def gate_perm(source, n_perm=100):
    from scipy.stats import spearmanr

    import interplab
    from interplab.interventions.head_gate import HeadGate, truth_gates
    from interplab.probes.truth.data import context_following, ctxmem_counterfactual_set
    from interplab.probes.truth.scores import TruthScores

    warnings.simplefilter("ignore")  # negative gates cannot occur at these alphas; HeadGate warns otherwise
    s = TruthScores.load(source).scores
    chat = interplab.load_model("zoo:toy-chat", device="cpu")
    evals = ctxmem_counterfactual_set(256, seed=1, fmt="chat", k_min=12, k_max=16)
    cells = {"contrast6": ("contrast", 6.0), "normalize0.3": ("normalize", 0.3)}

    def acc(mp, mode, a):
        g = truth_gates(mp, mode, a, n_layers=chat.n_layers, n_heads=chat.n_heads)
        return context_following(chat, evals, [HeadGate(g, site="z")])["context_acc"]

    out = {"baseline": context_following(chat, evals)["context_acc"],
           "observed": {k: acc(s, *v) for k, v in cells.items()}}
    rng = np.random.default_rng(0)
    perms = [np.stack([rng.permutation(row) for row in s]) for _ in range(n_perm)]
    for k, (mode, a) in cells.items():
        v = np.array([acc(p, mode, a) for p in perms])
        G = np.stack([truth_gates(p, mode, a).ravel() for p in perms])
        rho = [float(spearmanr(G[:, j], v)[0]) if G[:, j].std() > 0 else float("nan") for j in range(G.shape[1])]
        out[k] = {"median": float(np.median(v)), "q05": float(np.quantile(v, .05)),
                  "q95": float(np.quantile(v, .95)), "min": float(v.min()), "max": float(v.max()),
                  "n_ge_observed": int((v >= out["observed"][k]).sum()),
                  "p": float(((v >= out["observed"][k]).sum() + 1) / (n_perm + 1)),
                  "spearman_gate_vs_acc": np.round(np.array(rho).reshape(s.shape), 2).tolist()}
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("check", choices=("decodability", "null", "gate-perm"))
    ap.add_argument("model", nargs="?", default="zoo:toy-base")
    ap.add_argument("fmt", nargs="?", default="raw")
    ap.add_argument("--source", help="gate-perm: a saved TruthScores folder (e.g. a sweep run's sweep/source_scores)")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    if a.check == "decodability":
        out = decodability(a.model, a.fmt)
    elif a.check == "null":
        out = null(a.model, a.fmt)
    else:
        if not a.source:
            ap.error("gate-perm needs --source")
        out = gate_perm(a.source)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
