"""What the atlas feeds each method for one model: a clean / corrupt pair, texts for the per-layer geometry, a
shipped SAE's decoder, the planted truth of a validation organism (`interplab.zoo.validation`), and each method's own
data (Truth-Score verification items, decode prompts per task, concept pairs, ...).

The atlas does not know the methods: each declares an `AtlasPart` (`interplab.probes.atlas_contract`) named by its
`MethodSpec.atlas`, and `atlas_parts()` resolves them in `interplab.methods.methods()` order. A part says which
fields of `AtlasInputs` hold its data and how to find that data for a model, for a validation organism of its own
kind and from a user's file.

A method whose data does not exist for the model (a real tokenizer has no CtxMem vocabulary, a non-multitask
organism has no decode tasks, no SAE was shipped) gets a reason instead of data, and the atlas shows
"not available: <reason>". Only interplab's typed errors count as "does not apply"; anything else propagates."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from interplab.core.errors import ConfigError, InterplabError
from interplab.probes.atlas_contract import AtlasContext, AtlasPart

__all__ = ["AtlasInputs", "atlas_parts", "atlas_inputs", "with_user_data", "planted_truth", "shipped_decoder",
           "truth_items", "PLANTED_KINDS"]


def atlas_parts() -> list[AtlasPart]:
    """The atlas contribution of every method that declares one (`MethodSpec.atlas`), in methods() order."""
    from interplab.methods import methods, resolve

    parts = []
    for spec in methods():
        if not spec.atlas:
            continue
        part = resolve(spec.atlas)
        if not isinstance(part, AtlasPart) or part.method != spec.name:
            raise ConfigError(f"method {spec.name!r}: its atlas reference {spec.atlas!r} must name an AtlasPart "
                              f"(interplab.probes.atlas_contract) whose method is {spec.name!r}")
        parts.append(part)
    return parts


def _field_owner(name: str) -> AtlasPart | None:
    return next((p for p in atlas_parts() if name in p.fields), None)


def __getattr__(name: str):
    if name == "PLANTED_KINDS":   # the kinds of validation organism some part scores, in methods() order
        return tuple(dict.fromkeys(k for p in atlas_parts() for k in p.planted_kinds.values()))
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass
class AtlasInputs:
    """Inputs per method; `missing[method]` says why a method has none. planted: (kind, truth dict) of a
    validation organism, or None. direction_layer: where the direction methods read (resid_post.L).

    data: method -> its fields (`AtlasPart.fields`). Each field is also an attribute (`inp.truth_items`,
    `inp.concept_pairs`, ...), read and set through `data`, so callers that predate the parts keep working."""

    pair: tuple | None = None
    answer: object = None
    wrong: object = None
    texts: list = field(default_factory=list)
    sae_decoder: np.ndarray | None = None
    sae_name: str = ""
    direction_layer: int = 0
    planted: tuple | None = None
    missing: dict = field(default_factory=dict)
    data: dict = field(default_factory=dict)

    def method_data(self, part: AtlasPart) -> dict:
        """`part`'s fields: its defaults overlaid by what the inputs hold."""
        return {**part.fields, **self.data.get(part.method, {})}

    def __getattr__(self, name: str):
        if name.startswith("_") or name == "data":
            raise AttributeError(name)
        part = _field_owner(name)
        if part is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return self.method_data(part)[name]

    def __setattr__(self, name: str, value) -> None:
        part = None if name in self.__dataclass_fields__ else _field_owner(name)
        if part is None:
            object.__setattr__(self, name, value)
        else:
            self.data[part.method] = {**self.method_data(part), name: value}


def planted_truth(model) -> tuple[str, dict] | None:
    """(kind, truth) when `model` is a validation organism (its checkpoint holds planted_truth.json) of a kind some
    method's atlas part scores (`PLANTED_KINDS`: "truth", "decodeshare", "crh"), else None."""
    p = Path(str(getattr(model, "path", "") or "")) / "planted_truth.json"
    if not p.is_file():
        return None
    t = json.loads(p.read_text())
    parts = atlas_parts()
    kind = str(t.get("kind", "")).split()[0]
    kind = {k: v for part in parts for k, v in part.planted_kinds.items()}.get(kind, kind)
    if kind not in {v for part in parts for v in part.planted_kinds.values()}:
        return None
    for key in dict.fromkeys(k for part in parts for k in part.planted_arrays):
        if key in t:
            t[key] = np.asarray(t[key], np.float64)
    return kind, t


def shipped_decoder(model, layer: int | None) -> tuple[np.ndarray | None, str, int | None, str]:
    """(W_dec [d_sae, d_model], name, layer, reason) of the first SAE shipped with the model's checkpoint that reads
    resid_post.layer (any layer when `layer` is None). Read straight from the SAELens files: the probes layer does
    not import `interplab.sae` (a sibling layer)."""
    from safetensors.numpy import load_file

    from interplab.zoo import shipped_saes

    dirs = shipped_saes(str(getattr(model, "path", "") or model.name)) or shipped_saes(model.name)
    if not dirs:
        return None, "", None, "no SAE is shipped with this model (train one on the SAE Training page)"
    seen = []
    for d in dirs:
        cfg = json.loads((d / "cfg.json").read_text())
        site = (cfg.get("metadata") or {}).get("interplab_site") or ""
        seen.append(site)
        if not site.startswith("resid_post."):
            continue
        sl = int(site.split(".")[1])
        if layer is None or sl == layer:
            W = load_file(str(d / "sae_weights.safetensors"))["W_dec"].astype(np.float64)
            if W.shape[1] != model.d_model:
                continue
            return W, d.name, sl, ""
    return None, "", None, f"the shipped SAEs read {seen}, not resid_post.{layer}"


def _try(inputs: AtlasInputs, method: str, fn):
    try:
        return fn()
    except InterplabError as exc:
        inputs.missing[method] = str(exc).split("\n")[0]
        return None


def _planted_inputs(model, inp: AtlasInputs, ctx: AtlasContext) -> None:
    """A validation organism: the part of its kind gets its planted data and sets the lens pair, texts and layer;
    every other method with data is "not available" with its `absent` reason."""
    kind, t = ctx.planted
    for part in atlas_parts():
        if kind in part.planted_kinds.values():
            inp.data[part.method] = {**part.fields, **part.inputs(model, ctx)}
            for name, value in part.planted_setup(inp.data[part.method], t).items():
                setattr(inp, name, value)
        elif part.inputs is not None:
            inp.missing[part.method] = part.absent


def _toy_inputs(model, inp: AtlasInputs, ctx: AtlasContext) -> None:
    """A zoo organism or any model: the lens pair and each method's data (CtxMem verification items, multitask
    decode prompts, toy concept pairs, ...), each where the model's vocabulary has them."""
    from interplab.probes.lenses.common import default_fact_pair, default_pair

    parts = atlas_parts()
    inp.pair = default_pair(model, seed=ctx.seed)
    for part in parts:
        if part.inputs is not None:
            got = _try(inp, part.method, lambda: part.inputs(model, ctx))
            if got is not None:
                inp.data[part.method] = {**part.fields, **got}
    texts = [default_pair(model, seed=s)[0] for s in range(16)]
    # one pair for every seed, or a real model's fact pairs (16 copies of one template, varying in one word): a
    # method's data gives the texts instead
    if len(set(map(str, texts))) <= 1 or default_fact_pair(model).answer:
        texts = next((x for x in (p.fallback_texts(inp.method_data(p)) for p in parts if p.fallback_texts) if x), [])
    inp.texts = texts or list(inp.pair)


def truth_items(model, n_items: int = 128, seed: int = 0) -> list[dict]:
    """The Truth-Score verification items the atlas uses for `model` (the data of the part that adds the "truth"
    head map): the planted items of a truth validation organism, else CtxMem items in the model's prompt format (a
    typed error when its vocabulary has no CtxMem words, or when it is another validation organism)."""
    part = next(p for p in atlas_parts() if "truth" in p.head_maps)
    got = part.inputs(model, AtlasContext(n_items=n_items, seed=seed, planted=planted_truth(model)))
    return got[next(iter(part.fields))]


def atlas_inputs(model, *, n_items: int = 128, n_decode: int = 16, n_pairs: int = 48, concept: str = "animal",
                 direction_layer: int | None = None, seed: int = 0) -> AtlasInputs:
    """Every method's inputs for `model` (see `AtlasInputs`); a validation organism gets its own planted data."""
    inp = AtlasInputs()
    planted = planted_truth(model)
    inp.planted = planted
    ctx = AtlasContext(seed=seed, n_items=n_items, n_decode=n_decode, n_pairs=n_pairs, concept=concept,
                       planted=planted)
    if planted is None:
        _toy_inputs(model, inp, ctx)
    else:
        _planted_inputs(model, inp, ctx)
    W, name, sae_layer, reason = shipped_decoder(model, direction_layer)
    if planted is None and direction_layer is None:
        inp.direction_layer = sae_layer if sae_layer is not None else model.n_layers // 2
    elif direction_layer is not None:
        inp.direction_layer = int(direction_layer)
    if W is not None and sae_layer == inp.direction_layer:
        inp.sae_decoder, inp.sae_name = W, name
    else:
        inp.missing["sae"] = reason or (f"the shipped SAE reads resid_post.{sae_layer}, not "
                                        f"resid_post.{inp.direction_layer}")
    return inp


def with_user_data(model, inp: AtlasInputs, *, clean: str = "", corrupt: str = "", concept: str = "",
                   n_items: int = 128, n_decode: int = 16, n_pairs: int = 48, seed: int = 0,
                   **files: str) -> AtlasInputs:
    """`inp` with the inputs a user gave replacing the built-in ones (the atlas experiment's settings; docs/data.md
    names each file's columns): clean / corrupt: the lens pair (both or neither); files: a method's file under its
    part's `user_setting` -- truth_data: a Truth-Score file (text, label; or HaluEval QA); decode_data: a
    DecodeShare file (task, prompt, answer); crh_data: a CRH pair file (concept, question, resp_no_concept,
    resp_with_concept), of which `concept` is used (the first concept when the file has no `concept`). A method
    given data is no longer "not available"."""
    if bool(clean) != bool(corrupt):
        raise ConfigError("give both clean and corrupt (the lens pair) or neither")
    parts = [p for p in atlas_parts() if p.user_setting]
    unknown = sorted(set(files) - {p.user_setting for p in parts})
    if unknown:
        raise ConfigError(f"no method reads the data setting(s) {unknown}; known: {[p.user_setting for p in parts]}")
    if clean:
        inp.pair, inp.answer, inp.wrong = (clean, corrupt), None, None
    ctx = AtlasContext(seed=seed, n_items=n_items, n_decode=n_decode, n_pairs=n_pairs, concept=concept,
                       planted=inp.planted)
    for part in parts:
        if files.get(part.user_setting):
            inp.data[part.method] = {**inp.method_data(part), **part.user_data(model, files[part.user_setting], ctx)}
            inp.missing.pop(part.method, None)
    return inp
