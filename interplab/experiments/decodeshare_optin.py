"""The `decodeshare` experiment's opt-in parts (`--set parts=patchback`, `--set parts=ranking`): patchback rescue
rates and the stage-aligned steering ranking with its toy vector pools. `run_decodeshare` calls them; they live
here to keep the main experiment module to the default study."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from interplab.core.errors import InputError
from interplab.experiments.decodeshare import TaskSet, multitask_sets

def _patchback(model, cfg, L, bases, evals, say):
    """Rescue rates of the shared-subspace removal (decode-only, plain variant, alpha = cfg.alpha) on the
    generation flip set, per window: same-example (identity check), transfer donor (another baseline-correct
    example of the same task), and the same-example donor patched through the variance-matched non-shared and the
    Haar bases of the ablation table."""
    from interplab.probes.decodeshare_patchback import patchback_controls, patchback_rescue

    windows = [w.strip() for w in str(cfg.patch_windows).split(";") if w.strip()]
    controls = patchback_controls(bases)
    stops = sorted({s.stop for s in evals.values()})
    return patchback_rescue(model, {t: s.prompts for t, s in evals.items()},
                            {t: s.answers for t, s in evals.items()}, layer=L,
                            ablation_basis=bases["shared"]["basis"], alpha=bases["shared"]["alpha"],
                            controls=controls, windows=windows, max_new_tokens=cfg.eval_max_new_tokens,
                            batch_size=cfg.batch_size, stop_tokens=stops, seed=cfg.seed, n_boot=cfg.n_boot,
                            progress=say)


def ranking_pool(model, layer: int, calib: Mapping[str, TaskSet], *, n_caa: int = 8, n_instr: int = 8,
                 n_random: int = 8, caa_subset: int = 32, fmt: str = "raw", seed: int = 0,
                 batch_size: int = 64) -> dict[str, np.ndarray]:
    """Toy steering-vector pools for the stage-aligned ranking, {family: unit-norm [n, d]}:

    * caa: mean last-token state of prompt + gold answer minus prompt + a wrong answer (a random non-equivalent
      forced-choice candidate; answers without the stop token), pooled over the tasks of `calib`, each vector from
      a bootstrapped subset of `caa_subset` pairs;
    * instruction: per concept of `interplab.data.concepts`, the mean last-prompt-token state of
      "mention <concept> q.. sep" minus "q.. sep" (same question words), bootstrapped over 16 questions, cycling
      through the concepts;
    * random: Gaussian directions."""
    from interplab.data import toy_vocab as tv
    from interplab.data.concepts import CONCEPT_NAMES, Concepts
    from interplab.data.examples import Example, encode
    from interplab.probes.decodeshare_model import _site
    from interplab.probes.decodeshare_ranking import unit_rows

    site = _site(model, layer)
    rng = np.random.default_rng(seed)
    d = model.d_model

    def last_states(seqs):
        out = []
        for i in range(0, len(seqs), batch_size):
            r = model.run(seqs[i:i + batch_size], capture=[site], logits=False)
            out.append(r.cache.last(site).detach().double().cpu().numpy())
        return np.concatenate(out, 0) if out else np.zeros((0, d))

    pool: dict[str, np.ndarray] = {}
    if n_caa > 0:
        gold, wrong = [], []
        for s in calib.values():
            for j in range(len(s)):
                bad = [c for c, eq in zip(s.fc_cands[j], s.fc_equiv[j]) if not eq]
                if not bad:
                    continue
                w = bad[int(rng.integers(len(bad)))]
                gold.append(s.prompts[j] + list(s.fc_cands[j][s.fc_gold[j]][:-1]))
                wrong.append(s.prompts[j] + list(w[:-1]))
        if not gold:
            raise InputError("no calibration example has a wrong forced-choice candidate for CAA vectors")
        diff = last_states(gold) - last_states(wrong)
        m = min(int(caa_subset), len(diff))
        pool["caa"] = unit_rows(np.stack([diff[rng.choice(len(diff), m, replace=True)].mean(0)
                                          for _ in range(n_caa)]))
    if n_instr > 0:
        vocab = model.tokenizer.get_vocab()
        gen = Concepts()
        vecs = []
        for i in range(n_instr):
            name = CONCEPT_NAMES[i % len(CONCEPT_NAMES)]
            w_, n_ = [], []
            for _ in range(16):
                ex = gen.instructed(rng, name)
                q = ex.meta["question"]
                plain = Example("concept_no", (), (*q, tv.SEP), tuple(q), {})
                w_.append(list(encode(ex, vocab, fmt).ids[:encode(ex, vocab, fmt).prompt_len]))
                e2 = encode(plain, vocab, fmt)
                n_.append(list(e2.ids[:e2.prompt_len]))
            vecs.append((last_states(w_) - last_states(n_)).mean(0))
        pool["instruction"] = unit_rows(np.stack(vecs))
    if n_random > 0:
        pool["random"] = unit_rows(rng.standard_normal((n_random, d)))
    return pool


def _ranking(model, cfg, L, calib, fmt, say):
    """Stage-aligned steering ranking on toy pools (module `probes.decodeshare_ranking`)."""
    from interplab.probes.decodeshare import collect_prefill_states
    from interplab.probes.decodeshare_ranking import steering_ranking

    tasks = list(calib)
    say("ranking: vector pools")
    pool = ranking_pool(model, L, calib, n_caa=cfg.rank_n_caa, n_instr=cfg.rank_n_instr, n_random=cfg.rank_n_random,
                        caa_subset=cfg.rank_caa_subset, fmt=fmt, seed=cfg.seed + 51, batch_size=cfg.batch_size)
    pre = collect_prefill_states(model, {t: s.prompts for t, s in calib.items()}, layer=L, batch_size=cfg.batch_size)
    mean_norm = float(np.mean(np.linalg.norm(np.concatenate(list(pre.values())), axis=1)))
    scale = cfg.rank_alpha * mean_norm
    rank_sets = multitask_sets(model, tasks, cfg.rank_n_eval, seed=cfg.seed + 61, split="test", fmt=fmt)
    real_sets = [multitask_sets(model, tasks, cfg.rank_n_eval, seed=cfg.seed + 71 + r, split="test", fmt=fmt)
                 for r in range(cfg.rank_real_sets)]
    res = steering_ranking(model, L, pool, rank_sets, real_sets, scale=scale, stage=cfg.rank_stage,
                           max_new_tokens=cfg.eval_max_new_tokens, top_k=cfg.rank_top_k, progress=say)
    res.info |= {"alpha": cfg.rank_alpha, "mean_resid_norm": mean_norm,
                 "rank_seed": cfg.seed + 61, "real_seeds": [cfg.seed + 71 + r for r in range(cfg.rank_real_sets)]}
    return res
