"""Verdicts of the PCFG claims (spec ../shared/methods/pcfg_parse.md §1; issue 46): pure functions
of saved outputs (a `DepthSeedSweep`, a `pcfg-construction` KL table) -> `Verdict`s with their
validity checks.

The training seed is the sampling unit (an organism is one seed of one depth); intervals and tests
are Student-t over seeds; tests of one claim are Holm-corrected together (over layers, depths and
targets as each claim says). A direction claim is supported when its rule's Holm-adjusted one-sided
p-values are < ALPHA, not supported when the opposite direction is significant at that level,
undecided (None) otherwise. Rules:

* claim 1 (match): KL to the exact grammar is far below the bigram baseline's — the upper 95 % t
  bound of KL / KL_bigram below MATCH_RATIO at every depth;
* claim 2 (linear probes find parse information): span-posterior R² above the same probe on a
  random-init copy of the architecture (mean over span buckets ℓ >= 2; ℓ = 1 is fixed by the token),
  one test per (depth, layer >= 0), Holm over all of them; supported when every depth has a
  significant layer;
* claim 3 (local to global): the l*(ℓ) slope against log2 ℓ is > 0 at every depth >= log2 n (enough
  layers for the construction's one level per layer), Holm over those depths and both span targets;
* claim 4 (construction mirror): at every intermediate layer whose logit lens reads a truncated
  predictor (within READABLE nats/token of the nearest), the nearest is k = layer + 1; not supported
  when a readable layer is nearer another k by more than MARGIN_NATS."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from interplab.probes.pcfg.fit import split_sequences
from interplab.probes.stats import holm_adjust, intervals, t_test_p
from interplab.probes.validity import (
    Check,
    Verdict,
    floor_ceiling,
    held_out,
    multiple_testing,
    sampling_units,
)

__all__ = [
    "depth_sweep_verdicts",
    "construction_verdicts",
    "probe_split_check",
    "ALPHA",
    "SEED_MINIMUM",
    "MATCH_RATIO",
    "READABLE",
    "MARGIN_NATS",
]

METHOD = "pcfg"
ALPHA = 0.05
SEED_MINIMUM = 3  # a t interval over training seeds needs 2 degrees of freedom
MATCH_RATIO = 0.10  # "matches the grammar": KL at most a tenth of the bigram baseline's
READABLE = 0.5  # nats/token: a lens farther than this from every predictor reads none of them
MARGIN_NATS = 0.01  # a nearer predictor must win by this much (no verdict on float-level ties)


def probe_split_check(n_sequences: int, n_splits: int, seed: int) -> Check:
    """The probes' regulariser is chosen on the validation sequences and scored on the test
    sequences of each split (`fit.split_sequences`, seeds seed + 101·s as `parse_probes` draws
    them): they must not share a sequence."""
    seqs = np.arange(int(n_sequences))
    val, test = set(), set()
    for s in range(int(n_splits)):
        _, va, te = split_sequences(seqs, int(n_sequences), int(seed) + 101 * s)
        val |= {(s, int(i)) for i in seqs[va]}
        test |= {(s, int(i)) for i in seqs[te]}
    return held_out(
        val, test, subject="probe regulariser (validation sequences) vs scored test sequences"
    )


def _seed_check(n: int, what: str) -> Check:
    return sampling_units(n, unit="training seed", subject=what, minimum=SEED_MINIMUM)


def _match_verdict(org: pd.DataFrame) -> Verdict:
    rows, ok = [], []
    for L, g in org.groupby("n_layers", sort=True):
        iv = intervals(g["kl_ratio_bigram"].to_numpy(float), method="t")
        ok.append(iv["hi"] < MATCH_RATIO)
        rows.append(
            f"depth {int(L)}: {100 * iv['mean']:.1f} % [{100 * iv['lo']:.1f}, {100 * iv['hi']:.1f}]"
        )
    n = int(org.groupby("n_layers")["seed"].nunique().min())
    return Verdict(
        METHOD,
        "Transformers trained on PCFG samples match the grammar's next-token distribution",
        "KL / bigram-baseline KL: " + "; ".join(rows),
        all(ok),
        (_seed_check(n, "organisms per depth"),),
        f"match = upper 95 % t bound of KL / KL_bigram below {MATCH_RATIO:.0%} at every depth",
    )


def _probe_verdict(probes: pd.DataFrame, split: Check) -> Verdict | None:
    s = probes[
        (probes["target"] == "span_posterior")
        & (probes["span_len_lo"] >= 2)
        & (probes["layer"] >= 0)
    ]
    if s.empty or "score_random_init" not in s:
        return None
    s = s.assign(margin=s["score"] - s["score_random_init"])
    cells = s.groupby(["n_layers", "layer", "seed"])["margin"].mean().reset_index()
    keys, xs = [], []
    for (L, layer), g in cells.groupby(["n_layers", "layer"], sort=True):
        keys.append((int(L), int(layer)))
        xs.append(g["margin"].to_numpy(float))
    adj = holm_adjust([t_test_p(x, alternative="greater") for x in xs])
    opp = holm_adjust([t_test_p(x, alternative="less") for x in xs])
    depths = sorted({L for L, _ in keys})
    best = {}
    for (L, layer), x, q in zip(keys, xs, adj):
        if L not in best or q < best[L][2]:
            best[L] = (layer, float(x.mean()), float(q))
    sig = {L for (L, _), q in zip(keys, adj) if q < ALPHA}
    all_below = [L for L in depths if all(o < ALPHA for (d, _), o in zip(keys, opp) if d == L)]
    supported = True if sig >= set(depths) else (False if all_below else None)
    shown = "; ".join(
        f"depth {L}: layer {l} {m:+.3f} (Holm p {q:.2g})" for L, (l, m, q) in sorted(best.items())
    )
    arms = {
        "trained": float(s["score"].mean()),
        "random init": float(s["score_random_init"].mean()),
    }
    n = int(cells.groupby(["n_layers", "layer"])["seed"].nunique().min())
    checks = (
        _seed_check(n, "organisms per (depth, layer)"),
        floor_ceiling(arms, subject="span-posterior R² (ℓ >= 2), trained and random-init"),
        multiple_testing(len(keys), "Holm", subject="(depth, layer) tests"),
        split,
    )
    return Verdict(
        METHOD,
        "Linear probes find parse information in the hidden states: span-posterior R² above "
        "an untrained network's",
        f"R² − random-init R² (ℓ >= 2), best layer per depth: {shown}; "
        f"significant at {len(sig)} of {len(depths)} depths",
        supported,
        checks,
        "supported when every depth has a layer significantly above the random-init control",
    )


def _slope_verdicts(sweep, split: Check) -> list[Verdict]:
    sl = sweep.slopes[sweep.slopes["view"] == "buckets"]
    lg = sweep.log2_n
    if sl.empty or lg is None:
        return []
    sl = sl[sl["n_layers"] >= lg]
    keys, xs = [], []
    for (t, L), g in sl.groupby(["target", "n_layers"], sort=True):
        keys.append((t, int(L)))
        xs.append(g["slope"].to_numpy(float))
    if not keys:
        return []
    adj = holm_adjust([t_test_p(x, alternative="greater") for x in xs])
    opp = holm_adjust([t_test_p(x, alternative="less") for x in xs])
    out = []
    for target in dict.fromkeys(t for t, _ in keys):
        idx = [i for i, (t, _) in enumerate(keys) if t == target]
        if all(adj[i] < ALPHA for i in idx):
            supported = True
        elif any(opp[i] < ALPHA for i in idx):
            supported = False
        else:
            supported = None
        shown = "; ".join(f"depth {keys[i][1]}: {_ci(xs[i])} (Holm p {adj[i]:.2g})" for i in idx)
        l_star = sweep.l_star[sweep.l_star["target"] == target]
        arms = {
            f"ℓ={b}": float(g["best_score"].mean()) for b, g in l_star.groupby("bucket", sort=False)
        }
        n = min(len(xs[i]) for i in idx)
        checks = (
            _seed_check(n, f"organisms per depth (depths >= log2 n = {lg:g})"),
            floor_ceiling(
                arms, subject=f"best {target} R² per span bucket (l* needs room below 1)"
            ),
            multiple_testing(len(keys), "Holm", subject="depth x target slope tests"),
            split,
        )
        out.append(
            Verdict(
                METHOD,
                f"Local to global: longer spans become decodable at later layers ({target} l*(ℓ) "
                "slope > 0)",
                f"l* slope per doubling of ℓ, mean [95 % t] over seeds: {shown}",
                supported,
                checks,
                f"tested at depths >= log2 n = {lg:g}; one-sided t over seeds",
            )
        )
    return out


def _ci(x: np.ndarray) -> str:
    iv = intervals(x, method="t")
    return f"{iv['mean']:.2f} [{iv['lo']:.2f}, {iv['hi']:.2f}]"


def depth_sweep_verdicts(
    sweep, *, probe_sequences: int, n_splits: int, probe_seed: int
) -> list[Verdict]:
    """Claims 1–3 on a `DepthSeedSweep` (the probe settings of its config give the held-out split
    check)."""
    split = probe_split_check(probe_sequences, n_splits, probe_seed)
    out = [_match_verdict(sweep.organisms)]
    pv = _probe_verdict(sweep.probes, split)
    if pv is not None:
        out.append(pv)
    return out + _slope_verdicts(sweep, split)


def construction_verdicts(kl: pd.DataFrame, models: Sequence[str] | None = None) -> list[Verdict]:
    """Claim 4 on the `truncated_kl` table of `pcfg-construction` (columns model, layer, k,
    kl_trunc_model, kl_exact_trunc), over `models` (default: all; each one training seed of one
    grammar, so give organisms of one grammar)."""
    kl = kl if models is None else kl[kl["model"].isin(list(models))]
    if kl.empty:
        return []
    rows, matched, mismatched = [], 0, []
    for m, g in kl.groupby("model", sort=False):
        L = int(g["layer"].max()) + 1
        for layer in range(0, L - 1):
            h = g[g["layer"] == layer].set_index("k")["kl_trunc_model"].sort_values()
            if h.empty or h.iloc[0] > READABLE:
                rows.append(
                    f"{m} layer {layer}: unreadable ({h.iloc[0]:.2f} nats)" if len(h) else ""
                )
                continue
            best_k, best = int(h.index[0]), float(h.iloc[0])
            want = float(h.get(layer + 1, np.inf))
            rows.append(
                f"{m} layer {layer}: nearest k={best_k} ({best:.3f}); k={layer + 1}: {want:.3f}"
            )
            if best_k == layer + 1:
                matched += 1
            elif want - best > MARGIN_NATS:
                mismatched.append((m, layer))
    n_read = matched + len(mismatched)
    supported = False if mismatched else (True if n_read and matched == n_read else None)
    first = kl.drop_duplicates("k").set_index("k")["kl_exact_trunc"]
    L = int(kl["layer"].max()) + 1
    arms = {f"k={k}": float(first.get(k, np.nan)) for k in range(1, L) if k in first.index}
    checks = (
        _seed_check(kl["model"].nunique(), "organisms (training seeds of one grammar)"),
        floor_ceiling(
            arms,
            subject="KL(p_G ‖ p_trunc,k) at the layer-matched k: the levels must differ at "
            "the output",
            ceiling=None,
        ),
    )
    return [
        Verdict(
            METHOD,
            "The construction mirror: layer l's logit lens matches the k = l + 1 truncated "
            "predictor",
            "; ".join(r for r in rows if r),
            supported,
            checks,
            f"readable = nearest predictor within {READABLE:g} nats/token; a mismatch needs "
            f"k = l + 1 farther than the nearest by more than {MARGIN_NATS:g}",
        )
    ]
