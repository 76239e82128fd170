"""What a method hands the atlas (`interplab.probes.lenses.atlas`), so that the atlas never imports a method.

Each method that appears in the atlas declares one `AtlasPart` in its own package (`<method>.atlas_part:PART`) and
names it in its `MethodSpec.atlas`; the atlas resolves the parts through `interplab.methods` at run time. The part
carries everything that used to be special-cased by method name inside the atlas: which maps and directions it adds
(and their labels), whether its head map is read as-is or by magnitude, how its data is found for a model, how it
is computed, and how a validation organism's planted truth is scored. The atlas keeps only what is its own (the
lens pair, patching, DLA, the shipped SAE, the agreement statistics) and the order of the parts is
`interplab.methods.methods()`, which is why results keep their key order.

This module sits beside the methods, not in any of them, and imports nothing of theirs, so both sides can depend on
it while the methods stay independent (tests/architecture/test_method_independence.py)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

__all__ = ["AtlasContext", "AtlasPart"]


def _call(name: str, fn: Callable):
    return fn()


@dataclass(frozen=True)
class AtlasContext:
    """The atlas's settings as a part sees them. The data sizes (n_items, n_decode, n_pairs, concept) matter when
    inputs are found; the rest when the part computes. layer: the block whose output (resid_post.L) directions are
    read at. texts: the atlas's texts for per-layer geometry. reference: a second model (or None). planted: (kind,
    truth) of a validation organism, or None.

    step(name, fn): run fn as one timed unit under `name` (the key it gets in `Atlas.timings` and, when fn raises an
    InterplabError, in `Atlas.unavailable`); returns None in that case. Parts wrap their own units so that the keys
    are the map names a reader sees (e.g. "pr" and "pr_change"), not always the method's name."""

    seed: int = 0
    n_items: int = 128
    n_decode: int = 16
    n_pairs: int = 48
    concept: str = "animal"
    solver: str = "lbfgs"
    batch_size: int = 32
    layer: int = 0
    texts: tuple = ()
    reference: Any = None
    planted: tuple | None = None
    step: Callable[[str, Callable], Any] = _call


@dataclass(frozen=True)
class AtlasPart:
    """One method's contribution to the atlas.

    method: the method's name (its key in `Atlas.unavailable` and `Atlas.timings` unless `compute` says otherwise).
    head_maps / layer_maps: map name -> axis label of the maps it adds; directions: names of the direction sets it
    adds (columns [d_model, k] at resid_post.L). The atlas runs parts with head maps first, then those with layer
    maps, then the direction parts (each in methods() order), as it always has.
    signed: its head maps are read as they are (a higher score = more implicated); otherwise by |value|.

    fields: the `AtlasInputs` attributes that hold its data, with their defaults; the first one is the data itself,
    and the part is computed only when it is non-empty. Parts without fields (e.g. hyperfit, which reads the atlas's
    own texts) always run.
    inputs(model, ctx) -> {field: value}: its built-in data for `model`; raises an InterplabError when there is none
    (the first line becomes the "not available" reason). On a validation organism it is called only when the
    organism is its own kind; every other part is then "not available" with its `absent` reason.
    user_setting / user_data(model, path, ctx) -> {field: value}: the atlas experiment's setting that names the
    user's file for this method (docs/data.md), and how that file becomes its data.
    compute(model, data, ctx) -> {name: array}: its maps and directions, keyed by the names declared above.

    planted_kinds: the first word of a validation organism's planted_truth.json "kind" -> the kind it scores;
    planted_arrays: keys of that truth read as float64 arrays; planted_setup(data, truth) -> the lens settings its
    organism needs (any of pair, answer, wrong, texts, direction_layer); planted(truth, strengths, dirs) -> rows
    (check, method, value, target, passed) scoring the atlas against the planted truth (strengths: every head map,
    already as strength).
    fallback_texts(data): texts for the per-layer geometry when the lens pair gives only one.
    exports: functions the atlas modules still offer under their old names (callers predate the parts)."""

    method: str
    compute: Callable
    head_maps: Mapping[str, str] = field(default_factory=dict)
    layer_maps: Mapping[str, str] = field(default_factory=dict)
    directions: tuple[str, ...] = ()
    signed: bool = False
    fields: Mapping[str, Any] = field(default_factory=dict)
    inputs: Callable | None = None
    user_setting: str = ""
    user_data: Callable | None = None
    absent: str = ""
    planted_kinds: Mapping[str, str] = field(default_factory=dict)
    planted_arrays: tuple[str, ...] = ()
    planted_setup: Callable | None = None
    planted: Callable | None = None
    fallback_texts: Callable | None = None
    exports: Mapping[str, Callable] = field(default_factory=dict)

    @property
    def axis(self) -> int:
        """0: adds head maps, 1: layer maps, 2: directions only (the order the atlas computes parts in)."""
        return 0 if self.head_maps else 1 if self.layer_maps else 2
