"""One numbers path for the PCFG docs: the numbers docs/pcfg.md and README.md quote equal the committed experiment
outputs under results/ (pcfg-depth, pcfg-construction), and the model cards' KL equals pcfg-depth's (same sample),
so docs, README, cards and outputs cannot drift apart."""
import json
import re
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
DEPTH_UB = ROOT / "results" / "pcfg-depth" / "uniform-binary"
DEPTH_SIB = ROOT / "results" / "pcfg-depth" / "sib-L4"
CONS = ROOT / "results" / "pcfg-construction" / "all-L2-L4-L6-sib-L4"
WEIGHTS = ROOT / "interplab" / "zoo" / "weights"


def _flat(text: str) -> str:
    """Docs text with line breaks and indentation collapsed (numbers may wrap across lines)."""
    return re.sub(r"\s+", " ", text)


DOCS = _flat((ROOT / "docs" / "pcfg.md").read_text())
README = _flat((ROOT / "README.md").read_text())


def fmt(x: float) -> str:
    """How the docs write a KL: 0 when exact, 3 decimals from 0.01 up, else 2 significant digits."""
    if abs(x) < 1e-12:
        return "0"
    return f"{x:.3f}" if abs(x) >= 0.01 else f"{x:.4f}" if x >= 0.001 else f"{x:.1e}"


def _depth(folder):
    return pd.read_csv(folder / "tables" / "depth_summary.csv").set_index("model")


def test_committed_runs_used_the_documented_settings():
    from interplab.experiments.pcfg import PCFGDepthConfig
    from interplab.zoo.recipes.pcfg import EVAL_SEED

    assert PCFGDepthConfig().seed == EVAL_SEED and PCFGDepthConfig().n_sequences == 512
    for folder in (DEPTH_UB, DEPTH_SIB):
        cfg = json.loads((folder / "config.json").read_text())["config"]
        assert cfg["seed"] == EVAL_SEED and cfg["n_sequences"] == 512
    cfg = json.loads((CONS / "config.json").read_text())["config"]
    assert cfg["n_sequences"] == 400 and cfg["seed"] == 0 and "zoo:pcfg-sib-L4" in cfg["models"]


@pytest.mark.parametrize("name", ["pcfg-L2", "pcfg-L4", "pcfg-L6", "pcfg-sib-L4"])
def test_cards_equal_pcfg_depth(name):
    """The card's KL is the recipe's evaluation on EVAL_SEED; pcfg-depth's default sample is the same one."""
    row = _depth(DEPTH_SIB if "sib" in name else DEPTH_UB).loc[f"zoo:{name}"]
    card = json.loads((WEIGHTS / name / "card.json").read_text())["metrics"]
    for k in ("kl", "kl_se", "tv", "kl_bigram"):
        assert abs(card[k] - row[k]) < 1e-8, (name, k, card[k], row[k])
    md = (WEIGHTS / name / "MODEL_CARD.md").read_text()
    assert f"| kl | {row['kl']:.4f} |" in md
    note = f"`interplab run pcfg-depth --set models=zoo:{name}` (its defaults) evaluates the same sample"
    assert note in md and note in json.loads((WEIGHTS / name / "card.json").read_text())["extra"]["notes"]


def test_docs_and_readme_quote_pcfg_depth():
    d = _depth(DEPTH_UB)
    names = ["zoo:pcfg-L2", "zoo:pcfg-L4", "zoo:pcfg-L6"]
    kl = [f"{d.loc[n, 'kl']:.4f}" for n in names]
    for n, k in zip(names, kl):
        assert f"{k} ± {d.loc[n, 'kl_se']:.4f}" in DOCS, (n, k)
    assert "KL " + "/".join(kl) + " nats/token (`pcfg-depth`" in README
    pct = [f"{100 * d.loc[n, 'kl'] / d.loc[n, 'kl_bigram']:.1f}" for n in names]
    assert f"{pct[0]} %, {pct[1]} % and {pct[2]} % of the bigram baseline's KL ({d.loc[names[0], 'kl_bigram']:.3f})" \
        in DOCS
    assert "/".join(pct) + " % of the bigram" in README
    s = _depth(DEPTH_SIB).loc["zoo:pcfg-sib-L4"]
    assert f"| pcfg-sib-L4 | 4 | 4000 | 0.64 MB | {s['kl']:.4f} ± {s['kl_se']:.4f} | {s['tv']:.3f} | " \
           f"{s['kl_bigram']:.3f} |" in DOCS


def _summary():
    return json.loads((CONS / "json" / "summary.json").read_text())


def test_docs_quote_pcfg_construction():
    summ = _summary()
    sib = summ["zoo:pcfg-sib-L4"]
    gaps = ", ".join(fmt(sib["kl_exact_trunc_by_k"][str(k)]) for k in range(-1, 4))
    assert f"is **{gaps}** (`pcfg-construction`" in DOCS
    assert f"p_trunc,k) = {gaps} for k = −1..3)" in DOCS
    assert gaps.replace(", ", "/") in README
    ub = summ["zoo:pcfg-L4"]["kl_exact_trunc_by_k"]
    assert ", ".join(fmt(ub[str(k)]) for k in range(-1, 4)) + " on the zoo's uniform-binary grammar" in DOCS
    for name in ("pcfg-L2", "pcfg-L4", "pcfg-L6"):
        fin = summ[f"zoo:{name}"]["final_kl_by_k"]
        assert f"{name} " + ", ".join(fmt(fin[str(k)]) for k in range(-1, 3)) in DOCS, name
    kl = pd.read_csv(CONS / "tables" / "truncated_kl.csv")
    kl = kl[kl.model == "zoo:pcfg-sib-L4"].pivot(index="layer", columns="k", values="kl_trunc_model")
    for layer in (2, 3):
        vals = [fmt(kl.loc[layer, k]) for k in range(-1, 4)]
        best = int(kl.loc[layer].idxmin())
        vals[best + 1] = f"**{vals[best + 1]}**"
        assert f"layer {layer}: " + ", ".join(vals) in DOCS, layer
    assert sib["best_k_by_layer"]["2"] == 0 and sib["best_k_by_layer"]["3"] == 3  # the reading the docs give
    assert f"layer 2 is closest to the local k = 0 predictor ({fmt(kl.loc[2, 0])} nats) and the last layer to the " \
           f"exact one ({fmt(kl.loc[3, 3])})" in README
    pr = pd.read_csv(CONS / "tables" / "dyadic_probe.csv")
    pr = pr[pr.model == "zoo:pcfg-sib-L4"]
    for k in (1, 2, 3):
        r = pr[pr.k == k].sort_values("layer")
        vals = [f"{x:.2f}" for x in r.r2]
        vals[-1] = f"**{vals[-1]}**"
        assert f"k = {k}: " + ", ".join(vals) in DOCS, k
    assert f"random init at most {pr[pr.k >= 1].r2_random_init.max():.2f} for all three" in DOCS



def test_docs_quote_the_training_seed_replicas():
    seeds = ROOT / "results" / "pcfg-construction" / "sib-L4-seeds"
    names = ["zoo:pcfg-sib-L4", "zoo:pcfg-sib-L4-s1", "zoo:pcfg-sib-L4-s2"]
    summ = json.loads((seeds / "json" / "summary.json").read_text())
    assert sorted(summ) == sorted(names)
    for s, name in enumerate(names[1:], start=1):  # the replicas' cards: same recipe, only the seed differs
        card = json.loads((seeds / "cards" / f"pcfg-sib-L4-s{s}" / "card.json").read_text())
        ship = json.loads((WEIGHTS / "pcfg-sib-L4" / "card.json").read_text())
        assert card["recipe"]["seed"] == s and card["train"]["steps_done"] == 4000
        for k in ("arch", "data", "train", "steps"):
            assert card["recipe"][k] == ship["recipe"][k], k
    fin = [summ[n]["final_kl_by_k"] for n in names]
    assert "final layer is " + " / ".join(fmt(f["3"]) for f in fin) + " nats from the exact predictor" in DOCS
    assert "and " + " / ".join(fmt(f["2"]) for f in fin) + " from p_trunc,2 (seeds 0 / 1 / 2)" in DOCS
    kl = pd.read_csv(seeds / "tables" / "truncated_kl.csv")
    l2 = {n: kl[(kl.model == n) & (kl.layer == 2)].set_index("k")["kl_trunc_model"] for n in names}
    assert [int(v.idxmin()) for v in l2.values()] == [0, 1, 0]  # the reading the docs give
    a, b, c = (l2[n] for n in names)
    assert f"closest to k = 0 in seed 0 ({fmt(a[0])}), to k = 1 in seed 1 ({fmt(b[1])}; k = 0 and k = 2 at " \
           f"{fmt(b[0])} and {fmt(b[2])})" in DOCS
    assert f"it is {c.min():.2f}–{c.max():.2f} nats from every predictor (k = 0 nearest at {c[0]:.2f})" in DOCS
    pr = pd.read_csv(seeds / "tables" / "dyadic_probe.csv")
    last = [" / ".join(f"{pr[(pr.model == n) & (pr.layer == 3) & (pr.k == k)].r2.iloc[0]:.2f}" for k in (1, 2, 3))
            for n in names[1:]]
    assert f"seeds 1 and 2 reach {last[0]} and {last[1]} for k = 1 / 2 / 3 (random init at most " \
           f"{pr[pr.k >= 1].r2_random_init.max():.2f})" in DOCS
    readme_fin = [fin[i]["3"] for i in range(3)]
    assert f"exact in all ({fmt(min(readme_fin))}–{fmt(max(readme_fin))} nats)" in README


def test_the_page_helpers_compute_what_the_page_did():
    """Issue 26 §4: the PCFG page's per-sentence KL and summary line come from probes.pcfg (same numbers)."""
    import numpy as np

    from interplab.probes.pcfg import describe_kl_summary, position_kl

    rng = np.random.default_rng(0)
    p, q = rng.dirichlet(np.ones(5), 7), rng.dirichlet(np.ones(5), 7)
    p[0, 0] = 0.0
    page = np.where(p > 0, p * (np.log(np.clip(p, 1e-300, None)) - np.log(np.clip(q, 1e-300, None))), 0).sum(-1)
    np.testing.assert_array_equal(position_kl(p, q), page)
    line = describe_kl_summary({"kl": 0.5, "kl_se": 0.01, "tv": 0.2, "excess_nll": 0.49, "kl_token": 0.5,
                                "entropy_rate": 1.2, "kl_bigram": 0.9, "kl_unigram": 1.1})
    assert line.startswith("mean KL **0.5000** ± 0.0100 nats/token (bigram 0.9000, unigram 1.1000)")
    assert "bigram" not in describe_kl_summary({"kl": 0.5})
