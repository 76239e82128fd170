"""Toy steering-vector pools for the stage-aligned ranking (`ranking.steering_ranking`): CAA, instruction and
random directions built on the multitask organisms."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from interplab.core.errors import InputError
from interplab.probes.decodeshare.model import resid_site
from interplab.probes.decodeshare.ranking import unit_rows
from interplab.probes.decodeshare.tasks import TaskSet

__all__ = ["ranking_pool"]


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
    site = resid_site(model, layer)
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
