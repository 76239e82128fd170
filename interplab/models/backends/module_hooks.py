"""The escape hatch: capture or edit any named module of the Hugging Face model (`module:PATH` sites), the same way
on both backends: a PyTorch forward hook (output) or forward pre-hook (input) on the module as it is called in
the forward, registered for one forward and removed when it ends, also when it raises."""
from __future__ import annotations

import contextlib

import torch

from interplab.core.errors import SiteError
from interplab.core.sites import ModuleSite
from interplab.models.backends.base import ForwardRequest, apply_edits, keep
from interplab.models.layout import resolve_module


@contextlib.contextmanager
def module_hooks(hf_model, req: ForwardRequest, captures: dict, backend: str):
    """Hook every module site of `req` for the length of the `with` block; afterwards check that each ran (once,
    when captured): a module the backend never calls (the bridge re-implements attention, so the Hugging Face
    attention's own submodules may not run there) must not be a silent no-op."""
    sites = req.module_sites()
    if not sites:
        yield
        return
    counts = {s: 0 for s in sites}
    handles = []
    try:
        for site in sites:
            module = resolve_module(hf_model, site.path)
            if site.io == "output":
                handles.append(module.register_forward_hook(_output_hook(site, req, captures, counts)))
            else:
                handles.append(module.register_forward_pre_hook(_input_hook(site, req, captures, counts),
                                                                with_kwargs=True))
        yield
    finally:
        for h in handles:
            h.remove()
    _check_counts(counts, req, backend)


def _check_counts(counts: dict, req: ForwardRequest, backend: str) -> None:
    capture = set(req.capture)
    why = {"bridge": "TransformerLens re-implements attention, so some submodules of the Hugging "
                     "Face attention never run on the bridge: use backend='nnsight' or a canonical site",
           "nnsight": "the Hugging Face forward does not call it on this code path (e.g. a dropout module the "
                      "eager/SDPA path replaces by a function call): pick a module that runs, or a canonical site"}
    for site, n in counts.items():
        if n == 0:
            raise SiteError(f"{site.name}: that module did not run in this forward; {why.get(backend, '')}")
        if n > 1 and site in capture:
            raise SiteError(f"{site.name}: that module ran {n} times in one forward, so one capture cannot hold "
                            "it; capture a module that runs once per forward")


def _edit_and_keep(site: ModuleSite, x, req: ForwardRequest, captures: dict):
    if not isinstance(x, torch.Tensor):
        raise SiteError(f"{site.name}: the module's {site.io} is a {type(x).__name__}, not a tensor; pick a module "
                        "whose first output/input is a tensor")
    y = apply_edits(site, x, req)
    if site in req.capture:
        captures[site.name] = keep(y, req)
    return y


def _output_hook(site: ModuleSite, req: ForwardRequest, captures: dict, counts: dict):
    def hook(module, args, output):
        counts[site] += 1
        tup = isinstance(output, (tuple, list))
        x = output[0] if tup else output
        y = _edit_and_keep(site, x, req, captures)
        if y is x:
            return None
        return type(output)((y, *output[1:])) if tup else y
    return hook


def _input_hook(site: ModuleSite, req: ForwardRequest, captures: dict, counts: dict):
    def hook(module, args, kwargs):
        counts[site] += 1
        if args:
            y = _edit_and_keep(site, args[0], req, captures)
            return None if y is args[0] else ((y, *args[1:]), kwargs)
        key = "hidden_states" if "hidden_states" in kwargs else next(
            (k for k, v in kwargs.items() if isinstance(v, torch.Tensor)), None)
        if key is None:
            raise SiteError(f"{site.name}: the module was called without a tensor input")
        y = _edit_and_keep(site, kwargs[key], req, captures)
        return None if y is kwargs[key] else (args, {**kwargs, key: y})
    return hook
