"""The organism registry: name -> `Recipe`.

Recipes live in `interplab/zoo/recipes/<family>.py`, one module per family; every module in that package is imported
on first use and registers its recipes with `register(Recipe(...))`. Another module adds organisms simply by adding
a file there (e.g. recipes/pcfg.py, recipes/hyperfit.py).
"""
from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from interplab.core.errors import ConfigError, ModelNotFoundError


@dataclass
class BuildContext:
    """What a recipe's build function gets besides the recipe.

    out_dir: the checkpoint directory to create (via `interplab.train.checkpoint.save_checkpoint`).
    work_dir: scratch space for resumable training checkpoints (kept on failure, so `resume` continues).
    steps: the number of optimiser steps to run (recipe.steps unless overridden by `--steps`).
    parent_dir: the resolved parent checkpoint (None when recipe.parent is None).
    resume: continue from the latest resumable checkpoint in work_dir.
    log_path: a JSON-lines file the build may append training records to.
    progress: show progress bars. num_threads: torch threads (None = leave).
    time_budget_s: optional wall-clock budget; builds pass it to `TrainConfig.time_budget_s` (the cosine then
        completes within the budget; `steps` becomes a cap).
    overrides: recipe-specific knobs for quick smoke builds (tests, `--smoke`): toy and text recipes honour
        "batch_size", "eval_n" (held-out examples per task for the card), text also "max_paragraphs" (corpus
        subset) and "bpe_vocab".
    """

    out_dir: Path
    work_dir: Path
    steps: int
    parent_dir: Path | None = None
    resume: bool = False
    log_path: Path | None = None
    progress: bool = True
    num_threads: int | None = None
    time_budget_s: float | None = None
    overrides: dict = field(default_factory=dict)


@dataclass
class Recipe:
    """How to build one organism.

    name: zoo name (`load_model("zoo:<name>")`).
    description: one line for `interplab zoo list`.
    family: recipe family / module ("toy", "text", "pcfg", "hyperfit", ...).
    arch: architecture config (an `interplab.train.arch.ArchConfig`, or any dataclass/dict a custom build reads;
        None for a descendant that keeps its parent's architecture).
    data: the data mixture, free-form but JSON-serialisable (e.g. {"tasks": {task: weight}, "format": "raw",
        "batch_size": 64}); recorded on the model card.
    steps: optimiser steps of a full build. seed: the build seed (init + data order).
    parent: zoo name of the checkpoint this one is fine-tuned from (None = from scratch). Built/resolved first.
    train: training hyper-parameters (an `interplab.train.trainer.TrainConfig`; `steps`/`seed` are overridden by
        the fields above).
    build: `build(recipe, ctx: BuildContext) -> dict` trains and saves the checkpoint at ctx.out_dir and returns a
        report ({"train": TrainResult dict, "metrics": {name: value}, ...}) that goes on the model card.
    evaluate: optional `evaluate(model, tokenizer, recipe, n: int, seed: int) -> {metric: value}`: re-measures the
        card metrics on a held-out sample (used by the card writer and by tests).
    thresholds: {metric: minimum value} a shipped checkpoint must reach (tests re-check them).
    ceilings: {metric: maximum value} a shipped checkpoint must stay under (e.g. text-base's greedy TTR < 0.5).
    lora: optional LoRA spec (`interplab.train.finetune.LoraSpec`) for descendants fine-tuned with LoRA.
    tags: free-form labels ("default", "control", ...).
    notes: free text shown on the model card.
    """

    name: str
    description: str
    family: str
    build: Callable[["Recipe", BuildContext], dict]
    arch: Any = None
    data: Mapping[str, Any] = field(default_factory=dict)
    steps: int = 1000
    seed: int = 0
    parent: str | None = None
    train: Any = None
    evaluate: Callable[..., dict] | None = None
    thresholds: Mapping[str, float] = field(default_factory=dict)
    ceilings: Mapping[str, float] = field(default_factory=dict)
    lora: Any = None
    tags: tuple[str, ...] = ()
    notes: str = ""

    @property
    def path(self) -> Path | None:
        """The checkpoint directory used for this organism, or None when it is not built."""
        from interplab.models.zoo_dirs import find  # not zoo.resolve, which imports this module

        return find(self.name)

    @property
    def available(self) -> bool:
        return self.path is not None

    def summary(self) -> dict:
        from dataclasses import asdict, is_dataclass

        def plain(x):
            if is_dataclass(x):
                return asdict(x)
            return x

        return {
            "name": self.name, "description": self.description, "family": self.family, "parent": self.parent,
            "arch": plain(self.arch), "data": dict(self.data), "steps": self.steps, "seed": self.seed,
            "train": plain(self.train), "lora": plain(self.lora), "thresholds": dict(self.thresholds),
            "ceilings": dict(self.ceilings), "tags": list(self.tags), "available": self.available,
            "path": str(self.path) if self.path else None,
        }


_REGISTRY: dict[str, Recipe] = {}
_LOADED = False
_BROKEN: dict[str, str] = {}  # recipe module -> error (a broken module must not take the whole zoo down)


def register(recipe: Recipe, *, replace: bool = False) -> Recipe:
    """Add a recipe to the registry (name clash is an error unless `replace`)."""
    if not isinstance(recipe, Recipe):
        raise ConfigError(f"register() needs a Recipe, got {type(recipe).__name__}")
    if recipe.name in _REGISTRY and not replace and _REGISTRY[recipe.name] is not recipe:
        raise ConfigError(f"zoo organism {recipe.name!r} is already registered")
    _REGISTRY[recipe.name] = recipe
    return recipe


def _load_all() -> None:
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    import interplab.zoo.recipes as pkg

    for mod in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
        if mod.name.startswith("_"):
            continue
        try:
            importlib.import_module(f"{pkg.__name__}.{mod.name}")
            _BROKEN.pop(mod.name, None)
        except Exception as err:  # noqa: BLE001 - reported, and the other recipes stay usable
            import warnings

            _BROKEN[mod.name] = f"{type(err).__name__}: {err}"
            warnings.warn(f"zoo recipe module interplab.zoo.recipes.{mod.name} failed to import ({err}); "
                          "its organisms are unavailable", RuntimeWarning, stacklevel=2)


def known_names() -> list[str]:
    _load_all()
    return sorted(_REGISTRY)


SEED_SUFFIX = re.compile(r"^(?P<base>.+)-s(?P<seed>\d+)$")


def seed_variant(recipe: Recipe, seed: int) -> Recipe:
    """`recipe` with only its build seed (init + data order) changed, named NAME-s<seed>: a training-seed replica.
    Seed variants are not listed; they resolve by name (`zoo:pcfg-sib-L4-s1`) once built."""
    return dataclasses.replace(recipe, name=f"{recipe.name}-s{seed}", seed=int(seed),
                               description=f"{recipe.description} (training seed {seed})")


def get_recipe(name: str) -> Recipe:
    """The recipe of zoo organism `name` (without the "zoo:" prefix); NAME-s<seed> is NAME's seed variant."""
    _load_all()
    name = name[4:] if name.startswith("zoo:") else name
    m = SEED_SUFFIX.match(name)
    if name not in _REGISTRY and m and m["base"] in _REGISTRY:
        return seed_variant(_REGISTRY[m["base"]], int(m["seed"]))
    if name not in _REGISTRY:
        broken = "".join(f"; recipe module {m!r} failed to import ({e})" for m, e in sorted(_BROKEN.items()))
        raise ModelNotFoundError(f"unknown zoo organism {name!r}; known: {', '.join(sorted(_REGISTRY)) or 'none'}"
                                 + broken)
    return _REGISTRY[name]


def list_organisms() -> list[Recipe]:
    """Every registered recipe (sorted by name); `.available` / `.path` say whether and where it is built."""
    _load_all()
    return [_REGISTRY[n] for n in sorted(_REGISTRY)]
