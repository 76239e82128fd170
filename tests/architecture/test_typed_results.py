"""Every experiment saves a typed result (issue 26 §3): its tables and JSON are views of a `Result` that a run
reopens with `load_run(path).result(name)`, not the only record of what it measured."""
from __future__ import annotations

import ast
import inspect
import sys
import textwrap

import pytest

from interplab.experiments import registry


def _saves_result(fn, depth: int = 2) -> bool:
    """Whether `fn`, or a function of its own module that it calls (to `depth`), calls ``run.save_result``."""
    src = inspect.getsource(fn)
    if "save_result(" in src:
        return True
    if depth == 0:
        return False
    module = sys.modules[fn.__module__]
    called = {n.func.id for n in ast.walk(ast.parse(textwrap.dedent(src)))
              if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    helpers = [getattr(module, c) for c in called if inspect.isfunction(getattr(module, c, None))
               and getattr(module, c).__module__ == module.__name__]
    return any(_saves_result(h, depth - 1) for h in helpers)


registry.discover()
EXPERIMENTS = [e for e in registry.list_experiments() if e.module.startswith("interplab.")]


def test_the_experiment_list_is_not_empty():
    assert len(EXPERIMENTS) >= 30


@pytest.mark.parametrize("exp", EXPERIMENTS, ids=lambda e: e.name)
def test_experiment_saves_a_typed_result(exp):
    assert _saves_result(exp.fn), (
        f"experiment {exp.name!r} ({exp.module}) saves no typed result: wrap what it measures in a `Result` "
        "dataclass (interplab.core.result) and `run.save_result(name, result)` it; tables are views of it")


def test_the_check_sees_a_table_only_experiment():
    def table_only(cfg, run):
        run.save_table("t", None)

    def via_helper(cfg, run):
        _saves_result(cfg)  # a call to a module function that itself contains the call below
        run.save_table("t", None)

    assert not _saves_result(table_only)
    assert _saves_result(via_helper)  # _saves_result's own source names save_result(
