"""The pages' one cached-compute helper (issue 48): a computation cached on what it reads, by name.

    @cached_compute("Reading difference vectors...")
    def diffs(model, data, *, layer: int, position: str):
        ...

    d = diffs(model, data, key=(picked.key, data.name), layer=6, position="mean")

One rule for every cached call: positional arguments are the objects a computation reads but the
cache does not hash (a model, an SAE, a grammar, a dataset); `key` names them (for a model, its
`PageModel.key`: name, backend, device, dtype); every other argument is a setting, passed by
keyword and hashed under its name, so no cache entry is told apart by argument position alone.
Each decorated function has a bounded cache of its own (Streamlit's `st.cache_data`, or
`st.cache_resource` for objects that must be shared rather than copied)."""
from __future__ import annotations

import functools

import streamlit as st

from interplab.core.errors import InputError

__all__ = ["cached_compute"]


def cached_compute(spinner: str | bool = False, *, max_entries: int = 8, resource: bool = False):
    """Decorate `fn(*inputs, **settings)`; call it as `fn(*inputs, key=..., **settings)`.

    `key` (hashable) identifies the positional inputs and is required when there are any;
    `resource=True` caches the returned object itself (shared, not copied). `.clear()` empties
    the function's cache."""
    if not isinstance(max_entries, int) or max_entries < 1:
        raise InputError(f"cached_compute: max_entries must be a positive int, not {max_entries!r}")

    def decorate(fn):
        def run(key, settings, _inputs):       # noqa: ARG001 - key and settings are the cache key
            return fn(*_inputs, **dict(settings))

        # Streamlit names a cache by module, qualified name and source: give `run` those of `fn`,
        # so every decorated function has a cache of its own, dropped when its source changes
        functools.update_wrapper(run, fn)
        cache = st.cache_resource if resource else st.cache_data
        cached = cache(max_entries=max_entries, show_spinner=spinner)(run)

        @functools.wraps(fn)
        def call(*inputs, key=None, **settings):
            if inputs and key is None:
                raise InputError(f"{fn.__qualname__}: key= must name the inputs the cache does not "
                                 "hash (e.g. the PageModel's key for a model)")
            return cached(key=key, settings=tuple(sorted(settings.items())), _inputs=inputs)

        call.clear = cached.clear
        return call

    return decorate
