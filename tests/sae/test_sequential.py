"""The sequential synthetic benchmark: the generators put the known features where the design says (FAST: bos at
every sample start at full magnitude, positions from 0, no carry-over; packed: full bos only at block starts,
positions from the block start, the previous topic carried over; BT(P): no eot), and a tiny end-to-end run of the
`sae-synthetic` experiment writes its table, summary and figure."""
import numpy as np
import pytest

from interplab.sae.sequential import POS_EDGES, SequentialConfig, SequentialData

CFG = SequentialConfig(min_len=5, max_len=12, context_size=32)


@pytest.fixture(scope="module")
def data():
    return SequentialData(CFG)


def _starts(f, ix):
    return np.nonzero(f[:, ix["topic0"]: ix["topic0"] + CFG.n_topics].max(1) == 1.0)[0]


def test_fast_stream_has_bos_at_every_sample_start(data):
    ix = data.index
    f = data.fast(np.random.default_rng(0), 400)
    bos = np.nonzero(f[:, ix["bos"]])[0]
    eot = np.nonzero(f[:, ix["eot"]])[0]
    assert (f[bos, ix["bos"]] == CFG.bos_magnitude).all()
    assert np.array_equal(eot[:-1] + 1, bos[1:len(eot)])  # a sample ends right before the next one starts
    # positions restart at 0 in each sample: pos0 (0-3) on the first 4 tokens after each bos
    assert (f[bos, ix["pos0"]] == 1).all()
    # exactly one topic per token, always at magnitude 1 (no carry-over)
    topics = f[:, ix["topic0"]: ix["topic0"] + CFG.n_topics]
    assert ((topics > 0).sum(1) == 1).all() and (topics[topics > 0] == 1).all()


def test_packing_moves_bos_positions_and_carries_topic(data):
    ix = data.index
    rng = np.random.default_rng(1)
    f = data.packed(rng, CFG.context_size * 20, finetune=True)
    blocks = f.reshape(20, CFG.context_size, -1)
    assert (blocks[:, 0, ix["bos"]] == CFG.bos_magnitude).all()
    inner = blocks[:, 1:, ix["bos"]]
    assert (inner[inner > 0] == CFG.inner_bos_magnitude).all() and (inner > 0).any()
    # position features count from the block start: the last token of a block is in the 16+ bucket
    assert (blocks[:, -1, ix["pos0"] + len(POS_EDGES)] == 1).all()
    topics = blocks[:, :, ix["topic0"]: ix["topic0"] + CFG.n_topics]
    carried = (topics > 0) & (topics < 1)
    assert carried.any() and np.allclose(topics[carried].max(), CFG.carry)
    p = data.packed(rng, CFG.context_size * 10, finetune=False)
    assert not p[:, ix["eot"]].any()
    assert (p.reshape(10, CFG.context_size, -1)[:, 1:, ix["bos"]] == 0).all()


@pytest.mark.slow
def test_sae_synthetic_experiment_runs(tmp_path):
    from interplab.core.io import read_json
    from interplab.experiments.registry import run_experiment

    path = run_experiment("sae-synthetic", {"steps": 30, "batch": 128, "seeds": [0, 1], "ks": [2, 4],
                                            "eval_tokens": 2000}, root=tmp_path)
    s = read_json(path / "json" / "summary.json")
    assert set(s) == {f"{a}/k={k}" for a in ("fast", "bt_f", "bt_p") for k in (2, 4)}
    assert s["fast/k=4"]["mcc"]["n"] == 2 and s["fast/k=4"]["mcc"]["method"] == "t"
    # TopK: L0 is k on both distributions (the matched-L0 design holds)
    assert abs(s["bt_p/k=2"]["sae_l0"]["mean"] - 2) < 0.1 and "explained_variance_packed" in s["fast/k=2"]
    assert (path / "figures" / "sequential_truth.html").exists() and (path / "figures" / "l0_mcc.html").exists()
