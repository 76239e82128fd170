"""interplab.harvest: disk-backed and in-RAM activation stores, positions, resume, crash safety."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import interplab
from interplab.core.errors import InputError, ResultsError, SiteError
from interplab.models.harvest import ActivationStore, HarvestMismatchError, InMemoryStore

PROMPTS = ["w1 w2 w3", "w4 w5", "w6 w7 w8 w9 w10", "w3", "w2 w2 w2 w2", "w9 w8 w7", "w5 w1"]
SITES = ["resid_post.0", "attn_z.1"]


@pytest.fixture(scope="module")
def model(model_factory):
    return model_factory("llama")


def _reference(model, positions):
    """One prompt per forward, no padding: the activations harvest must reproduce."""
    out = {s: [] for s in SITES}
    rows, pos = [], []
    for i, p in enumerate(PROMPTS):
        res = model.run([p], capture=SITES, logits=False)
        n = int(res.batch.lengths[0])
        keep = [n - 1] if positions == "last" else list(range(n))
        for s in SITES:
            out[s].append(res.cache[s][0, keep])
        rows += [i] * len(keep)
        pos += keep
    return {s: torch.cat(v) for s, v in out.items()}, np.array(rows), np.array(pos)


@pytest.mark.parametrize("positions", ["last", "all"])
def test_disk_and_memory_stores_equal_unbatched_runs(model, tmp_path, positions):
    ref, rows, pos = _reference(model, positions)
    disk = interplab.harvest(model, PROMPTS, SITES, tmp_path / "h", batch_size=3, positions=positions)
    mem = interplab.harvest(model, PROMPTS, SITES, None, batch_size=3, positions=positions)
    assert isinstance(disk, ActivationStore) and isinstance(mem, InMemoryStore)
    assert disk.complete and disk.n_shards == 3 and disk.sites == SITES
    for store in (disk, mem):
        assert store.n_rows == len(rows)
        assert store.shape("attn_z.1") == (len(rows), model.n_heads, model.d_head)
        np.testing.assert_array_equal(store.read("row").numpy(), rows)
        np.testing.assert_array_equal(store.read("position").numpy(), pos)
        for s in SITES:
            torch.testing.assert_close(store.read(s), ref[s], atol=1e-5, rtol=1e-5)
    # random-order, repeated and negative row reads
    idx = [len(rows) - 1, 0, 2, 2, -1]
    torch.testing.assert_close(disk.read("resid_post.0", idx), ref["resid_post.0"][[len(rows) - 1, 0, 2, 2, -1]])
    torch.testing.assert_close(disk.read("resid_post.0", slice(1, 4)), mem.read("resid_post.0", slice(1, 4)))
    batches = list(disk)
    assert len(batches) == 3 and set(batches[0]) == {*SITES, "row", "position"}


def test_read_loads_only_the_shards_it_needs(model, tmp_path):
    store = interplab.harvest(model, PROMPTS, SITES, tmp_path / "h", batch_size=2)
    seen = []
    orig = store._shard
    store._shard = lambda i, names: (seen.append(i), orig(i, names))[1]
    store.read("attn_z.1", [4, 5])
    assert seen == [2]


def test_callable_and_list_positions(model):
    lists = [[0], [0, 1], [2, 4], [0], [3], [1], [1]]
    by_list = interplab.harvest(model, PROMPTS, SITES, batch_size=4, positions=lists)
    ref, rows, pos = _reference(model, "all")
    want = [int(np.flatnonzero((rows == i) & (pos == p))[0]) for i, ps in enumerate(lists) for p in ps]
    torch.testing.assert_close(by_list.read("attn_z.1"), ref["attn_z.1"][want], atol=1e-5, rtol=1e-5)

    def first_real(batch):  # every row's first real token
        m = batch.attention_mask.bool()
        return m & (m.cumsum(1) == 1)

    by_fn = interplab.harvest(model, PROMPTS, SITES, batch_size=4, positions=first_real)
    assert by_fn.read("position").tolist() == [0] * len(PROMPTS)
    with pytest.raises(InputError):
        interplab.harvest(model, PROMPTS, SITES, positions=[[0]] * len(PROMPTS[:-1]))
    with pytest.raises(InputError):
        interplab.harvest(model, PROMPTS, SITES, positions=[[99]] * len(PROMPTS))


def test_resume_skips_finished_shards_and_refuses_other_arguments(model, tmp_path):
    out = tmp_path / "h"
    first = interplab.harvest(model, PROMPTS, SITES, out, batch_size=2)
    want = first.read("attn_z.1")
    # simulate a crash after shard 1: drop the complete flag and the last two shards
    man = json.loads((out / "manifest.json").read_text())
    man["complete"] = False
    (out / "manifest.json").write_text(json.dumps(man))
    for i in (2, 3):
        (out / "shards" / f"shard_{i:06d}.safetensors").unlink()
    with pytest.raises(ResultsError, match="incomplete"):
        ActivationStore(out)
    partial = ActivationStore(out, allow_incomplete=True)
    assert partial.n_shards == 2 and not partial.complete

    calls = []
    orig_run = model.run
    model.run = lambda *a, **k: (calls.append(1), orig_run(*a, **k))[1]
    try:
        again = interplab.harvest(model, PROMPTS, SITES, out, batch_size=2)
    finally:
        del model.run
    assert len(calls) == 2  # only the two missing batches were recomputed
    torch.testing.assert_close(again.read("attn_z.1"), want)
    for kw in (dict(batch_size=3), dict(positions="all"), dict(sites=["resid_post.1"])):
        args = dict(sites=SITES, batch_size=2) | kw
        with pytest.raises(HarvestMismatchError, match="differs in"):
            interplab.harvest(model, PROMPTS, args.pop("sites"), out, **args)
    with pytest.raises(HarvestMismatchError, match="inputs_sha256"):
        interplab.harvest(model, PROMPTS[::-1], SITES, out, batch_size=2)


def test_crash_mid_harvest_never_reads_complete(model, tmp_path):
    out = tmp_path / "h"
    orig_run = model.run
    n = []

    def flaky(*a, **k):
        n.append(1)
        if len(n) == 3:
            raise RuntimeError("simulated crash")
        return orig_run(*a, **k)

    model.run = flaky
    try:
        with pytest.raises(RuntimeError):
            interplab.harvest(model, PROMPTS, SITES, out, batch_size=2)
    finally:
        del model.run
    with pytest.raises(ResultsError):
        ActivationStore(out)
    assert not list((out / "shards").glob(".*.tmp"))   # no half-written shard left behind
    store = interplab.harvest(model, PROMPTS, SITES, out, batch_size=2)
    assert store.complete and store.n_rows == len(PROMPTS)


def test_bad_arguments(model, tmp_path):
    with pytest.raises(SiteError):
        interplab.harvest(model, PROMPTS, ["attn_pattern.0"])
    with pytest.raises(SiteError):
        interplab.harvest(model, PROMPTS, ["resid_post.99"])
    with pytest.raises(interplab.ConfigError):
        interplab.harvest(model, PROMPTS, SITES, positions="first")
    with pytest.raises(ResultsError, match="not an activation store"):
        ActivationStore(tmp_path)
    store = interplab.harvest(model, PROMPTS, SITES)
    with pytest.raises(SiteError):
        store.read("resid_post.1")
    with pytest.raises(InputError):
        store.read("row", [len(PROMPTS)])
