"""Distribution match of a `LabModel` to its grammar: `interplab.train.grammar_eval.grammar_kl` (the one
implementation, also used while training) with the logits read through `LabModel.run`."""
from __future__ import annotations

import pandas as pd

from interplab.grammar import PCFG
from interplab.models.lab_model import LabModel
from interplab.probes.pcfg.capture import forward, require_lab_model
from interplab.train.grammar_eval import grammar_kl, kl_summary

__all__ = ["pcfg_kl", "kl_summary"]


def pcfg_kl(model: LabModel, g: PCFG, n_sequences: int = 512, seed: int = 0, *, max_len: int | None = None,
            batch_size: int = 64, baselines: bool = True, n_baseline: int = 20000, eval_set=None) -> pd.DataFrame:
    """Per-position KL(p_G ‖ q_θ), TV, excess NLL, entropy floor and n-gram baselines on ``n_sequences`` held-out
    samples of ``g`` (seed ``seed``); columns and ``df.attrs["summary"]`` (`kl_summary`) as in
    `interplab.train.grammar_eval.grammar_kl`."""
    model = require_lab_model(model)
    return grammar_kl(model, g, n_sequences, seed, tokenizer=model.tokenizer, max_len=max_len, batch_size=batch_size,
                      baselines=baselines, n_baseline=n_baseline, eval_set=eval_set,
                      logits_fn=lambda ids, att: forward(model, ids, att)[0])
