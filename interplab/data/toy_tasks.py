"""The toy organisms' task registry: every trainable/evaluable task name -> an `rng -> Example` generator.

| task | generator |
|---|---|
| ctxmem_gen, ctxmem_ver | `CtxMem().generation`, `CtxMem().verification` |
| copy, rev, sort, inc, mc | `Multitask().fn(task)` |
| concept_with, concept_no | `Concepts().instructed`, `Concepts().plain` |
"""
from __future__ import annotations

from typing import Mapping

from interplab.data.concepts import Concepts
from interplab.data.ctxmem import CtxMem, CtxMemConfig
from interplab.data.examples import ExampleFn
from interplab.data.multitask import TASKS as MT_TASKS
from interplab.data.multitask import Multitask

TOY_TASKS = ("ctxmem_gen", "ctxmem_ver", *MT_TASKS, "concept_with", "concept_no")


def toy_task_fns(ctxmem: CtxMemConfig | None = None) -> dict[str, ExampleFn]:
    """{task name: rng -> Example} for every toy task."""
    cm, mt, co = CtxMem(ctxmem), Multitask(), Concepts()
    fns: dict[str, ExampleFn] = {"ctxmem_gen": cm.generation, "ctxmem_ver": cm.verification}
    for t in MT_TASKS:
        fns[t] = mt.fn(t)
    fns["concept_with"] = co.instructed
    fns["concept_no"] = co.plain
    return fns


def toy_mixture(weights: Mapping[str, float], fmt="raw", batch_size: int = 128, seed: int = 0,
                ctxmem: CtxMemConfig | None = None):
    """A `TaskMixture` over the toy tasks with the given weights (tasks with weight 0 are dropped)."""
    from interplab.data.examples import TaskMixture
    from interplab.data.toy_vocab import toy_vocab
    from interplab.core.errors import ConfigError

    fns = toy_task_fns(ctxmem)
    unknown = set(weights) - set(fns)
    if unknown:
        raise ConfigError(f"unknown toy tasks {sorted(unknown)}; known: {TOY_TASKS}")
    tasks = {t: (fns[t], w) for t, w in weights.items() if w > 0}
    return TaskMixture(tasks, toy_vocab(), fmt=fmt, batch_size=batch_size, seed=seed)
