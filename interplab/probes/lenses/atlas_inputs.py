"""What the atlas feeds each method for one model: a clean / corrupt pair, Truth-Score verification items,
decode prompts per task, concept pairs, texts for the per-layer geometry, a shipped SAE's decoder, and the planted
truth of a validation organism (`interplab.zoo.validation`).

A method whose data does not exist for the model (a real tokenizer has no CtxMem vocabulary, a non-multitask
organism has no decode tasks, no SAE was shipped) gets a reason instead of data, and the atlas shows
"not available: <reason>". Only interplab's typed errors count as "does not apply"; anything else propagates."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from interplab.core.errors import InterplabError

PLANTED_KINDS = ("truth", "decodeshare", "crh")


@dataclass
class AtlasInputs:
    """Inputs per method; `missing[method]` says why a method has none. planted: (kind, truth dict) of a
    validation organism, or None. direction_layer: where the direction methods read (resid_post.L)."""

    pair: tuple | None = None
    answer: object = None
    wrong: object = None
    truth_items: list | None = None
    decode_prompts: dict | None = None
    decode_max_new_tokens: int = 8
    concept_pairs: list | None = None
    texts: list = field(default_factory=list)
    sae_decoder: np.ndarray | None = None
    sae_name: str = ""
    direction_layer: int = 0
    planted: tuple | None = None
    missing: dict = field(default_factory=dict)


def planted_truth(model) -> tuple[str, dict] | None:
    """(kind, truth) when `model` is a validation organism (its checkpoint holds planted_truth.json), else None.
    kind is "truth", "decodeshare" or "crh"."""
    p = Path(str(getattr(model, "path", "") or "")) / "planted_truth.json"
    if not p.is_file():
        return None
    t = json.loads(p.read_text())
    kind = str(t.get("kind", "")).split()[0]
    kind = {"truth-scores": "truth"}.get(kind, kind)
    if kind not in PLANTED_KINDS:
        return None
    for key in ("axis", "e1", "e2"):
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


def _planted_truth_inputs(inp: AtlasInputs, t: dict, n_items: int, seed: int) -> None:
    """Conflict prompts `c_x q_0` vs `c_x' q_0`: entity 0 has the weakest memory, so the planted heads' copy of the
    context value decides the answer (a_x vs a_x'); x, x' avoid the memorised value."""
    from interplab.zoo.validation.truth_scores import planted_truth_items

    M = t["memory_map"]
    x, x2 = [v for v in range(len(M)) if v != M[0]][:2]
    inp.pair, inp.answer, inp.wrong = (f"c{x} q0", f"c{x2} q0"), f"a{x}", f"a{x2}"
    inp.truth_items = planted_truth_items(n_items, seed=seed, memory_map=M)
    inp.texts = [it["text"] for it in inp.truth_items[:64]]
    inp.direction_layer = 0
    inp.missing["decodeshare"] = "this validation organism has no decode tasks"
    inp.missing["crh"] = "this validation organism has no concept pairs"


def _planted_decode_inputs(inp: AtlasInputs, n_items: int) -> None:
    from interplab.zoo.validation.decodeshare import task_prompts

    tasks = task_prompts()
    inp.pair = ("T0 x1", "T1 x1")
    inp.decode_prompts = {t: [r["prompt"] for r in rows] for t, rows in tasks.items()}
    inp.decode_max_new_tokens = 6
    inp.texts = [p for ps in inp.decode_prompts.values() for p in ps]
    inp.direction_layer = 0
    inp.missing["truth"] = "this validation organism has no verification items"
    inp.missing["crh"] = "this validation organism has no concept pairs"


def _planted_crh_inputs(inp: AtlasInputs, t: dict) -> None:
    from interplab.zoo.validation.crh import planted_crh_pairs

    pairs, _ = planted_crh_pairs(int(t["spec"]["n_samples"]), seed=int(t["spec"]["seed"]))
    inp.pair = (pairs[0][1], pairs[0][0])          # with the concept (clean) vs without
    inp.concept_pairs = pairs
    inp.texts = [p for pr in pairs for p in pr]
    inp.direction_layer = int(str(t.get("site", "resid_post.0")).split(".")[1])
    inp.missing["truth"] = "this validation organism has no verification items"
    inp.missing["decodeshare"] = "this validation organism has no decode tasks"


def _toy_inputs(model, inp: AtlasInputs, *, n_items: int, n_decode: int, n_pairs: int, concept: str,
                seed: int) -> None:
    """A zoo organism or any model: the lens pair, CtxMem verification items, multitask decode prompts and toy
    concept pairs, each where the model's vocabulary has them."""
    from interplab.probes.crh import model_format, toy_concept_data
    from interplab.probes.decodeshare import SEQ_TASKS, multitask_sets
    from interplab.probes.lenses.common import default_pair

    fmt = model_format(model)
    inp.pair = default_pair(model, seed=seed)
    inp.truth_items = _try(inp, "truth", lambda: truth_items(model, n_items, seed))
    sets = _try(inp, "decodeshare", lambda: multitask_sets(model, list(SEQ_TASKS), n_decode, seed=seed, fmt=fmt))
    if sets:
        inp.decode_prompts = {name: s.prompts for name, s in sets.items()}
    if concept:
        data = _try(inp, "crh", lambda: toy_concept_data(model, concept, n_train=n_pairs, seed=seed, fmt=fmt))
        inp.concept_pairs = data.train_pairs if data is not None else None
    else:
        inp.missing["crh"] = "no concept chosen"
    texts = [default_pair(model, seed=s)[0] for s in range(16)]
    inp.texts = texts if len(set(map(str, texts))) > 1 else [it["text"] for it in (inp.truth_items or [])][:64]
    inp.texts = inp.texts or list(inp.pair)


def truth_items(model, n_items: int = 128, seed: int = 0) -> list[dict]:
    """The Truth-Score verification items the atlas uses for `model`: the planted items of a truth validation
    organism, else CtxMem items in the model's prompt format (a typed error when its vocabulary has no CtxMem
    words, or when it is another validation organism)."""
    from interplab.core.errors import InputError

    planted = planted_truth(model)
    if planted is not None and planted[0] == "truth":
        from interplab.zoo.validation.truth_scores import planted_truth_items

        return planted_truth_items(n_items, seed=seed, memory_map=planted[1]["memory_map"])
    if planted is not None:
        raise InputError(f"this validation organism ({planted[0]}) has no verification items")
    from interplab.probes.crh import model_format
    from interplab.probes.truth import ctxmem_truth_set

    return ctxmem_truth_set(n_items, seed=seed, fmt=model_format(model), tokenizer=model.tokenizer)


def atlas_inputs(model, *, n_items: int = 128, n_decode: int = 16, n_pairs: int = 48, concept: str = "animal",
                 direction_layer: int | None = None, seed: int = 0) -> AtlasInputs:
    """Every method's inputs for `model` (see `AtlasInputs`); a validation organism gets its own planted data."""
    inp = AtlasInputs()
    planted = planted_truth(model)
    inp.planted = planted
    if planted is None:
        _toy_inputs(model, inp, n_items=n_items, n_decode=n_decode, n_pairs=n_pairs, concept=concept, seed=seed)
    elif planted[0] == "truth":
        _planted_truth_inputs(inp, planted[1], n_items, seed)
    elif planted[0] == "decodeshare":
        _planted_decode_inputs(inp, n_items)
    else:
        _planted_crh_inputs(inp, planted[1])
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


def with_user_data(model, inp: AtlasInputs, *, clean: str = "", corrupt: str = "", truth_data: str = "",
                   decode_data: str = "", crh_data: str = "", concept: str = "", n_items: int = 128,
                   n_decode: int = 16, n_pairs: int = 48, seed: int = 0) -> AtlasInputs:
    """`inp` with the inputs a user gave replacing the built-in ones (the atlas experiment's settings; docs/data.md
    names each file's columns): clean / corrupt: the lens pair (both or neither); truth_data: a Truth-Score file
    (text, label; or HaluEval QA); decode_data: a DecodeShare file (task, prompt, answer); crh_data: a CRH pair
    file (concept, question, resp_no_concept, resp_with_concept), of which `concept` is used (the first concept
    when the file has no `concept`). A method given data is no longer "not available"."""
    from interplab.core.errors import ConfigError

    if bool(clean) != bool(corrupt):
        raise ConfigError("give both clean and corrupt (the lens pair) or neither")
    if clean:
        inp.pair, inp.answer, inp.wrong = (clean, corrupt), None, None
    if truth_data:
        from interplab.probes.truth.data import user_truth_set

        inp.truth_items = user_truth_set(truth_data, limit=n_items, seed=seed)
        inp.missing.pop("truth", None)
    if decode_data:
        from interplab.data.user import user_records
        from interplab.probes.decodeshare.tasks import user_task_sets

        calib, _ = user_task_sets(model, list(user_records("decodeshare", decode_data)), seed=seed)
        inp.decode_prompts = {name: s.prompts[:n_decode] for name, s in calib.items()}
        inp.missing.pop("decodeshare", None)
    if crh_data:
        from interplab.data.user import user_records
        from interplab.probes.crh.real_data import user_concept_data

        data = user_concept_data(user_records("crh", crh_data), seed=seed, max_train=n_pairs, model=model)
        chosen = [d for d in data if d.name == concept] or data[:1]  # the default concept is a toy one
        inp.concept_pairs = chosen[0].train_pairs
        inp.missing.pop("crh", None)
    return inp
