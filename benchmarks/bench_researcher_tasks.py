"""Issue 49: three researcher questions on SmolLM2-135M-Instruct (benchmarks/researcher_tasks/), each written with
interplab, with plain transformers + PyTorch hooks and with nnsight, timed in this one process (single thread,
models loaded once beforehand) and checked to compute the same numbers. `extra` carries the lines of code of both
sides (non-blank, non-comment lines of the task module) and the agreement.

    python -m benchmarks.harness researcher_tasks --markdown out.md
"""
from __future__ import annotations

import inspect
import tempfile
from pathlib import Path

import numpy as np
import torch

from benchmarks.harness import timeit

NAME = "real:smollm2-135m-instruct"
_cache: dict = {}


def _loc(module) -> int:
    return sum(1 for line in inspect.getsource(module).splitlines()
               if line.strip() and not line.strip().startswith("#"))


def _models():
    if not _cache:
        torch.set_num_threads(1)
        import nnsight
        from transformers import AutoModelForCausalLM, AutoTokenizer

        import interplab
        from interplab.models.real import checkpoint_for

        path = str(checkpoint_for(NAME.split(":", 1)[1]))
        _cache["ours"] = interplab.load_model(NAME)
        _cache["hf"] = AutoModelForCausalLM.from_pretrained(path).eval()
        _cache["tok"] = AutoTokenizer.from_pretrained(path)
        _cache["nn"] = nnsight.LanguageModel(path, tokenizer=_cache["tok"], dispatch=True)
    return _cache


def _row(ours_mod, anchor_mod, t_ours, t_anchor, same, **extra):
    return dict(ours=t_ours, anchor=t_anchor, ratio=t_ours / t_anchor, goal="<= 1.2x the anchor's time, fewer lines",
                ok=bool(same) and t_ours <= 1.2 * t_anchor and _loc(ours_mod) < _loc(anchor_mod),
                extra={"loc_ours": _loc(ours_mod), "loc_anchor": _loc(anchor_mod), "same_numbers": bool(same), **extra})


def _induction(anchor: str):
    from benchmarks.researcher_tasks import data, induction_interplab, induction_nnsight, induction_transformers

    m = _models()
    mod, model = ((induction_transformers, m["hf"]) if anchor == "transformers" else (induction_nnsight, m["nn"]))
    args = dict(tokens=data.TOKENS, T=data.T, top_k=data.TOP)
    ours = induction_interplab.task(m["ours"], **args)
    theirs = mod.task(model, **args)
    same = (np.allclose(ours[0], theirs[0], atol=1e-5) and ours[1] == theirs[1]
            and abs(ours[2] - theirs[2]) < 1e-3 and abs(ours[3] - theirs[3]) < 1e-3)
    t_ours = timeit(lambda: induction_interplab.task(m["ours"], **args), repeat=3)
    t_anchor = timeit(lambda: mod.task(model, **args), repeat=3)
    return _row(induction_interplab, mod, t_ours, t_anchor, same, loss_clean=ours[2], loss_ablated=ours[3])


def _steering(anchor: str):
    from benchmarks.researcher_tasks import data, steering_interplab, steering_nnsight, steering_transformers

    m = _models()
    mod, model = ((steering_transformers, m["hf"]) if anchor == "transformers" else (steering_nnsight, m["nn"]))
    kw = dict(formal=data.FORMAL, casual=data.CASUAL, question=data.QUESTION, layer=data.LAYER, scale=data.SCALE,
              new_tokens=data.NEW_TOKENS)
    ours = steering_interplab.task(m["ours"], **kw)
    theirs = mod.task(model, m["tok"], **kw)
    cos = float(torch.nn.functional.cosine_similarity(ours[0].float(), theirs[0].float(), dim=0))
    same = cos > 0.9999 and ours[1] == theirs[1]
    t_ours = timeit(lambda: steering_interplab.task(m["ours"], **kw), repeat=3)
    t_anchor = timeit(lambda: mod.task(model, m["tok"], **kw), repeat=3)
    return _row(steering_interplab, mod, t_ours, t_anchor, same, vector_cos=cos, steered=ours[1]["steered"][:60])


def _heatmap():
    from benchmarks.researcher_tasks import heatmap_interplab, heatmap_plotly

    scores = np.random.default_rng(0).normal(size=(30, 9))
    with tempfile.TemporaryDirectory() as d:
        out = Path(d)
        heatmap_interplab.task(scores, out)
        heatmap_plotly.task(scores, out)
        t_ours = timeit(lambda: heatmap_interplab.task(scores, out), repeat=3)
        t_anchor = timeit(lambda: heatmap_plotly.task(scores, out), repeat=3)
    return _row(heatmap_interplab, heatmap_plotly, t_ours, t_anchor, True)


BENCHMARKS = {
    "task_induction_vs_transformers": lambda: _induction("transformers"),
    "task_induction_vs_nnsight": lambda: _induction("nnsight"),
    "task_steering_vs_transformers": lambda: _steering("transformers"),
    "task_steering_vs_nnsight": lambda: _steering("nnsight"),
    "task_heatmap_vs_plotly": _heatmap,
}
