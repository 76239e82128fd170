"""interplab.app.compute.cached_compute, the pages' one cached-compute helper: a result is cached
per (key, settings by name), the unhashed inputs never take part in the key, and each decorated
function has a cache of its own."""
from __future__ import annotations

import pytest

pytest.importorskip("streamlit")

from interplab.app.compute import cached_compute  # noqa: E402
from interplab.core.errors import InputError  # noqa: E402


class Model:
    """An input the cache must not hash (it could not: it has no stable value)."""

    def __init__(self, scale: int):
        self.scale = scale

    def __reduce__(self):
        raise TypeError("not hashable by value")


def test_results_are_cached_per_key_and_named_settings():
    calls = []

    @cached_compute(max_entries=8)
    def scaled(model, *, x: int, y: int = 0):
        calls.append((model.scale, x, y))
        return model.scale * x + y

    scaled.clear()
    a, b = Model(2), Model(3)
    assert scaled(a, key="a", x=1, y=5) == 7
    assert scaled(a, key="a", y=5, x=1) == 7      # the same settings by name, in another order
    assert len(calls) == 1
    assert scaled(a, key="a", x=2, y=5) == 9      # another setting
    assert scaled(b, key="b", x=1, y=5) == 8      # another model (key)
    assert len(calls) == 3
    # the key is what names the inputs: the same key with another object is served from cache
    assert scaled(b, key="a", x=1, y=5) == 7 and len(calls) == 3


def test_each_function_has_its_own_cache():
    @cached_compute()
    def first(*, x: int):
        return ("first", x)

    @cached_compute()
    def second(*, x: int):
        return ("second", x)

    first.clear()
    second.clear()
    assert first(x=1) == ("first", 1) and second(x=1) == ("second", 1)


def test_inputs_need_a_key_and_settings_are_named():
    @cached_compute()
    def f(model, *, x: int):
        return x

    with pytest.raises(InputError, match="key="):
        f(Model(1), x=1)
    f.clear()
    # a setting passed by position is an input the cache does not hash: the key must name it,
    # and the function rejects it where it expects a named setting
    with pytest.raises(TypeError):
        f(Model(1), 3, key="m")
    with pytest.raises(InputError, match="max_entries"):
        cached_compute(max_entries=0)
