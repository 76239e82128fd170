"""Concept difference vectors through a model: residual activations at `resid_post.L` read at each row's last real
token (left padding handled by the hook layer's `cache.last`), and with-concept minus without-concept diffs.

The CRH steering protocols read and write the same site (`resid_post.L`) unless `offbyone=True` reproduces the
repo's B1 bug (write at `resid_pre.L`, one block earlier than the read); both site names are built here."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from interplab.core.errors import ConfigError, DataError, InputError


def _read_site(layer: int, site: str = "resid_post") -> str:
    if site not in ("resid_post", "resid_pre"):
        raise ConfigError(f"CRH reads the residual stream: site must be 'resid_post' or 'resid_pre', got {site!r}")
    return f"{site}.{int(layer)}"


def _write_site(layer: int, site: str, offbyone: bool) -> str:
    if not offbyone:
        return _read_site(layer, site)
    if site != "resid_post":
        raise ConfigError("offbyone=True reproduces the repo: read at resid_post.L, write at resid_pre.L")
    return f"resid_pre.{int(layer)}"


def concept_acts(model, texts: Sequence, *, layer: int, position: str = "last", site: str = "resid_post",
                 batch_size: int = 32) -> np.ndarray:
    """Residual activations [n, d] (float64) at `site.layer`, read at each row's last real token (`position="last"`)
    or averaged over its real tokens (`"mean"`). `texts`: strings or token-id lists."""
    return concept_acts_by_layer(model, texts, layers=[layer], position=position, site=site,
                                 batch_size=batch_size)[int(layer)]


def concept_acts_by_layer(model, texts: Sequence, *, layers: Sequence[int], position: str = "last",
                          site: str = "resid_post", batch_size: int = 32) -> dict[int, np.ndarray]:
    """`concept_acts` at several layers from one forward pass per batch: {layer: [n, d]}. A study over every layer
    would otherwise run the model once per layer for the same texts."""
    import torch

    texts = list(texts)
    if not texts:
        raise InputError("concept_acts needs at least one text")
    if position not in ("last", "mean"):
        raise ConfigError(f"position must be 'last' or 'mean', got {position!r}")
    names = {int(L): _read_site(L, site) for L in layers}
    for name in names.values():
        model.site(name)                                  # SiteError with the valid names if the layer is bad
    out = {L: [] for L in names}
    with torch.no_grad():
        for i in range(0, len(texts), batch_size):
            res = model.run(texts[i: i + batch_size], capture=list(names.values()), logits=False, chat=False)
            for L, name in names.items():
                if position == "last":
                    a = res.cache.last(name)
                else:
                    a = res.cache.mean(name)
                out[L].append(a.detach().float().cpu().numpy().astype(np.float64))
    return {L: np.concatenate(v, 0) for L, v in out.items()}


def _pairs_to_lists(pairs) -> tuple[list, list]:
    if hasattr(pairs, "columns"):                         # a DataFrame in the repo's pair-CSV schema
        cols = set(pairs.columns)
        need = {"resp_no_concept", "resp_with_concept"}
        if not need <= cols:
            raise DataError(f"pair table needs columns {sorted(need)} (+ optional 'question'); got {sorted(cols)}")
        q = pairs["question"] if "question" in cols else [None] * len(pairs)
        fmt = (lambda qq, r: f"User: {qq}\nAssistant: {r}" if qq is not None else r)
        return ([fmt(a, b) for a, b in zip(q, pairs["resp_no_concept"])],
                [fmt(a, b) for a, b in zip(q, pairs["resp_with_concept"])])
    pairs = list(pairs)
    if not pairs:
        raise InputError("concept_diffs needs at least one (without, with) pair")
    for p in pairs:
        if not (isinstance(p, (tuple, list)) and len(p) == 2):
            raise InputError(f"each pair must be (text_without_concept, text_with_concept); got {p!r:.80}")
    return [p[0] for p in pairs], [p[1] for p in pairs]


def concept_diffs(model, pairs, *, layer: int, position: str = "last", site: str = "resid_post",
                  batch_size: int = 32, return_acts: bool = False):
    """Difference vectors [n, d] = act(with concept) − act(without concept) at `resid_post.layer`, read at each
    row's last real token (spec §2.1). `pairs`: (without, with) texts or token-id lists, or a DataFrame with
    `resp_no_concept`, `resp_with_concept` (+ `question`, rendered as "User: {q}\\nAssistant: {r}", no template).
    With `return_acts=True` returns (diffs, acts_without, acts_with)."""
    d, a_no, a_yes = concept_diffs_by_layer(model, pairs, layers=[layer], position=position, site=site,
                                            batch_size=batch_size)[int(layer)]
    return (d, a_no, a_yes) if return_acts else d


def concept_diffs_by_layer(model, pairs, *, layers: Sequence[int], position: str = "last", site: str = "resid_post",
                           batch_size: int = 32) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """`concept_diffs(..., return_acts=True)` at several layers from one pass per batch: {layer: (d, no, yes)}."""
    no, yes = _pairs_to_lists(pairs)
    kw = dict(layers=layers, position=position, site=site, batch_size=batch_size)
    a_no, a_yes = concept_acts_by_layer(model, no, **kw), concept_acts_by_layer(model, yes, **kw)
    return {L: (a_yes[L] - a_no[L], a_no[L], a_yes[L]) for L in a_no}
