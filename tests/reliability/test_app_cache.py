"""The app's model cache is bounded in entries and bytes, shared safely by concurrent sessions, loads once per key."""
from __future__ import annotations

import threading
import time

import torch

from interplab.app.state import ModelCache


class _Fake(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(n))  # n float32 = 4n bytes


def test_entry_and_byte_bounds_evict_least_recently_used():
    c = ModelCache(max_entries=3, max_bytes=1000)
    a = c.get("a", lambda: _Fake(100))  # 400 B
    c.get("b", lambda: _Fake(100))
    assert c.get("a", lambda: None) is a  # a becomes most recent
    c.get("c", lambda: _Fake(100))  # 1200 B > 1000: the LRU (b) goes
    assert set(k for k in c._items) == {"a", "c"} and c.total_bytes() == 800
    c.get("d", lambda: _Fake(10))
    c.get("e", lambda: _Fake(10))
    assert len(c) == 3  # entry bound
    big = c.get("big", lambda: _Fake(10_000))  # larger than the budget: served, alone
    assert len(c) == 1 and c.get("big", lambda: None) is big


def test_concurrent_sessions_load_a_key_once():
    c = ModelCache(max_entries=2, max_bytes=10**9)
    loads = []

    def load():
        loads.append(1)
        time.sleep(0.2)
        return _Fake(4)

    got = []
    ts = [threading.Thread(target=lambda: got.append(c.get("k", load))) for _ in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert len(loads) == 1 and len({id(g) for g in got}) == 1


def test_a_zoo_name_is_keyed_by_the_directory_it_resolves_to(tmp_path, monkeypatch):
    """A cached organism is not served after it is removed (or the zoo moves): the key holds the directory the name
    resolves to and its stamp, so the page explains a missing model instead of showing a stale one."""
    import importlib

    import pytest

    from interplab.app import state
    from interplab.core.errors import InterplabError
    from interplab.testing import make_random_checkpoint

    zoo_dirs = importlib.import_module("interplab.models.zoo_dirs")
    monkeypatch.setattr(zoo_dirs, "SHIPPED_DIR", tmp_path / "shipped")
    monkeypatch.setenv("INTERPLAB_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(state, "MODELS", ModelCache(max_entries=2, max_bytes=10**9))
    make_random_checkpoint("gpt2", tmp_path / "shipped" / "toy-chat", n_layers=1, d_model=16, n_heads=2, vocab=32)
    m = state.get_model("zoo:toy-chat")
    assert state.get_model("zoo:toy-chat") is m  # loaded once per key
    monkeypatch.setattr(zoo_dirs, "SHIPPED_DIR", tmp_path / "elsewhere")
    with pytest.raises(InterplabError):
        state.get_model("zoo:toy-chat")
