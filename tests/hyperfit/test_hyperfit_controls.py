"""Hyperfitting controls (issue 17 part 3): the training controls (shuffled windows, early-stopped fine-tuning,
weight change) and a smoke run of the `hyperfit-controls` experiment on tiny settings."""
import numpy as np
import pytest
import torch

from interplab.core.errors import ConfigError
from interplab.train.hyperfit_controls import (FinetuneConfig, early_stop_index, finetune_early_stopping,
                                               shuffle_within_windows, weight_change)


def test_shuffle_keeps_tokens_and_bos_and_changes_order():
    seqs = [[1] + list(range(10, 40)), [1] + list(range(50, 90))]
    out = shuffle_within_windows(seqs, seed=3)
    for s, o in zip(seqs, out):
        assert o[0] == s[0] and sorted(o) == sorted(s) and o != s
    assert shuffle_within_windows(seqs, seed=3) == out  # seeded
    assert shuffle_within_windows(seqs, seed=4) != out


def test_early_stop_index_planted():
    # improves to index 3, then 2 evaluations without improvement: patience 2 stops at 5 and keeps 3
    vals = [3.0, 2.5, 2.2, 2.1, 2.15, 2.3, 2.0]
    assert early_stop_index(vals, patience=2) == (3, 5)
    assert early_stop_index(vals, patience=3) == (6, None)  # the late improvement arrives within patience 3
    assert early_stop_index([1.0, 0.9, 0.8], patience=1) == (2, None)
    # min_delta: 2.1 is not better than 2.2 by more than 0.2, so the best stays at index 1 (2.5 -> 2.2 is 0.3)
    assert early_stop_index(vals, patience=2, min_delta=0.2) == (2, 4)


def test_weight_change_matches_manual_norm(hf_pair):
    a, b, _ = hf_pair
    from interplab.models.loading import load_hf_model

    ha = load_hf_model(a.path, device="cpu", dtype=torch.float32)
    hb = load_hf_model(b.path, device="cpu", dtype=torch.float32)
    df = weight_change(ha, hb).set_index("group")
    pa, pb = dict(ha.named_parameters()), dict(hb.named_parameters())
    manual = sum(float(((pb[n] - pa[n]).detach().double() ** 2).sum()) for n in pa) ** 0.5
    assert df.loc["total", "delta_fro"] == pytest.approx(manual, rel=1e-9)
    blocks = [g for g in df.index if g.startswith("block.")]
    assert blocks == ["block.0", "block.1"]
    parts = df.drop(index="total")["delta_fro"].to_numpy()
    assert float(np.sqrt((parts ** 2).sum())) == pytest.approx(manual, rel=1e-9)
    assert weight_change(ha, ha).loc[:, "delta_fro"].max() == 0.0
    # a change planted in block 1 only shows up in block 1
    hc = load_hf_model(a.path, device="cpu", dtype=torch.float32)
    with torch.no_grad():
        next(p for n, p in hc.named_parameters() if ".layers.1." in n and p.ndim == 2).add_(1.0)
    d = weight_change(ha, hc).set_index("group")["delta_fro"]
    assert d["block.1"] > 0 and d.drop(["block.1", "total"]).max() == 0.0


def test_finetune_early_stopping_keeps_best(hf_pair):
    a, _, texts = hf_pair
    seqs = [a.tokenizer(t)["input_ids"] for t in texts[:4]]
    val = [a.tokenizer(t)["input_ids"] for t in texts[4:]]
    res = finetune_early_stopping(a, seqs, val, steps=12, config=FinetuneConfig(lr=5e-2, batch_size=2, patience=1,
                                                                               seq_len=32))
    h = res.to_frame()
    assert res.budget_steps == 12 and res.steps == 12  # run_to_end: the budget is trained in full
    assert list(h["step"]) == [0, 2, 4, 6, 8, 10, 12]
    best, stop = early_stop_index(list(h["val_loss"]), 1)
    assert res.best_step == h["step"][best] and res.best_val_loss == pytest.approx(h["val_loss"][best])
    assert res.initial_val_loss == pytest.approx(h["val_loss"][0])
    # the kept weights are the best evaluation's, the end weights the last one's (re-measured, not copied)
    from interplab.train.hyperfit import HyperfitConfig, _validate

    pad = a.tokenizer.pad_token_id or 0
    assert _validate(res.model, val, pad, HyperfitConfig(), None)["val_loss"] == pytest.approx(res.best_val_loss,
                                                                                                rel=1e-5)
    assert _validate(res.final_model, val, pad, HyperfitConfig(), None)["val_loss"] == pytest.approx(
        h["val_loss"].iloc[-1], rel=1e-5)
    assert (res.stop_step is None) == (stop is None)
    with pytest.raises(ConfigError):
        FinetuneConfig(patience=0).validate()


@pytest.fixture(scope="module")
def controls_run(tmp_path_factory):
    from interplab.experiments.registry import run_experiment

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("hf_controls")
    return run_experiment("hyperfit-controls", {
        "seeds": "0,1", "n_sequences": "4", "seq_len": "16", "n_heldout": "2", "max_epochs": "2",
        "shuffled_max_epochs": "1", "n_texts": "4", "max_tokens": "24", "reuse": "", "lora_seeds": "0",
        "lora_max_epochs": "1", "ft_patience": "1"}, root=root)


def test_controls_experiment_smoke(controls_run):
    import interplab.probes.hyperfit  # noqa: F401 - registers the result class
    from interplab.results.runs import load_run

    run = load_run(controls_run)
    res = run.result("controls")
    r = res.runs.set_index(["arm", "seed"])
    assert sorted(set(res.runs["arm"])) == ["finetune", "finetune-steps", "hyperfit", "late-lora", "shuffled"]
    for seed in (0, 1):
        # the fine-tuning budget is the hyperfit run's step count; early stopping keeps an earlier step or the end
        assert r.loc[("finetune-steps", seed), "steps"] == r.loc[("hyperfit", seed), "steps"]
        assert r.loc[("finetune", seed), "steps"] <= r.loc[("hyperfit", seed), "steps"]
    assert r.loc[("shuffled", 0), "epochs"] == 1 and r.loc[("late-lora", 0), "trainable_params"] < 1e5
    geo = res.geometry
    assert len(geo) == len(res.runs) * 5  # 4 blocks + the final norm per trained model
    s = res.summary
    dd = s[(s["quantity"] == "delta_pr") & (s["arm"] == "hyperfit")]
    assert len(dd) == 5 and (dd["n"] == 2).all() and (dd["lo"] <= dd["mean"]).all() and (dd["mean"] <= dd["hi"]).all()
    tot = s[(s["quantity"] == "delta_fro") & (s["group"] == "total")].set_index("arm")
    assert (tot["mean"] > 0).all()
    assert res.delta_dim("shuffled")["layer"] == 3
    assert set(run.table_names) >= {"runs", "summary", "histories"}
    assert res.runs["heldout_loss"].notna().all()
    h = res.histories
    ft = h[(h["arm"] == "finetune") & (h["seed"] == 0)]
    assert ft["step"].iloc[0] == 0 and ft["val_loss"].notna().all()  # the held-out curve early stopping watched
    assert r.loc[("finetune", 0), "heldout_loss"] == pytest.approx(r.loc[("finetune", 0), "best_val_loss"],
                                                                   abs=0.05)  # float16 rounding only


def test_controls_figures(controls_run):
    import plotly.graph_objects as go

    from interplab.figures.geometry import delta_dim_by_arm_figure, weight_change_figure
    from interplab.results.runs import load_run

    s = load_run(controls_run).table("summary")
    f1, f2 = delta_dim_by_arm_figure(s), weight_change_figure(s)
    assert isinstance(f1, go.Figure) and len(f1.data) == 5 and list(f1.data[0].x)[-1] == "final norm"
    assert f1.data[0].error_y.array is not None and len(f2.data) == 5


def test_reuse_must_match_the_recipe(tmp_path):
    from interplab.experiments.registry import run_experiment

    with pytest.raises(ConfigError, match="other settings"):
        run_experiment("hyperfit-controls", {"n_sequences": "4", "reuse": "zoo:text-hyperfit"}, root=tmp_path)


def test_hyperfit_windows_train_split_and_disjoint_heldout():
    import interplab
    from interplab.zoo.recipes.hyperfit import HYPERFIT_DATA, hyperfit_sequences, hyperfit_windows

    tok = interplab.load_model("zoo:text-base").tokenizer
    data = {**HYPERFIT_DATA, "n_sequences": 6, "seq_len": 32}
    train, held = hyperfit_windows(tok, data, 5)
    assert train == hyperfit_sequences(tok, data)  # the fine-tuning control trains on exactly the hyperfit windows
    assert len(held) == 5 and all(len(h) == 32 and h[0] == tok.bos_token_id for h in held)
    assert not {tuple(h) for h in held} & {tuple(t) for t in train}


def test_hyperfit_train_records_its_checkpoint_inside_the_finished_run(tmp_path):
    """The checkpoint path in json/hyperfit.json is relative to the run folder, which is renamed from .partial when
    the run finishes, so it still points at the saved checkpoint afterwards."""
    import json
    from pathlib import Path

    from interplab.experiments.registry import run_experiment

    torch.set_num_threads(1)
    run = run_experiment("hyperfit-train", {"n_sequences": "2", "max_epochs": "1"}, root=tmp_path)
    rec = json.loads((Path(run) / "json" / "hyperfit.json").read_text())
    assert rec["checkpoint"] == "checkpoint"
    assert (Path(run) / rec["checkpoint"] / "config.json").is_file()
    from interplab.results import load_run
    from interplab.train.hyperfit import HyperfitResult

    res = load_run(run).result("hyperfit")           # the run reopens as its typed result, path relative too
    assert isinstance(res, HyperfitResult) and res.checkpoint == "checkpoint" and res.epochs == rec["epochs"] == 1


def test_hyperfit_train_takes_any_text_file(tmp_path):
    """`--set text=FILE`: the windows are cut from the file's paragraphs (not the recipe's corpus), and a missing,
    empty or non-UTF-8 file is a typed error that says what to give."""
    from interplab.core.errors import ConfigError, DataError
    from interplab.experiments.hyperfit import TrainHyperfitConfig
    from interplab.experiments.registry import run_experiment
    from interplab.zoo.recipes.hyperfit import HYPERFIT_DATA, hyperfit_sequences, text_file_paragraphs
    import interplab

    words = [f"w{i}" for i in range(50)]
    f = tmp_path / "held_in.txt"
    f.write_text("\n\n".join(" ".join(words[(3 * k + j) % 50] for j in range(40)) for k in range(60)) + "\n",
                 encoding="utf-8")
    assert len(text_file_paragraphs(f)) == 60
    tok = interplab.load_model("zoo:text-base").tokenizer
    seqs = hyperfit_sequences(tok, {**HYPERFIT_DATA, "n_sequences": 4, "text_file": str(f)})
    file_ids = set(tok(" ".join(words), add_special_tokens=False)["input_ids"]) | {tok.eos_token_id}
    assert len(seqs) == 4 and all(len(s) == 128 and set(s[1:]) <= file_ids for s in seqs)
    assert seqs != hyperfit_sequences(tok, {**HYPERFIT_DATA, "n_sequences": 4})
    with pytest.raises(ConfigError, match="no such file"):
        TrainHyperfitConfig(text=str(tmp_path / "missing.txt"))
    (tmp_path / "empty.txt").write_text("\n\n  \n", encoding="utf-8")
    with pytest.raises(DataError, match="holds no text"):
        text_file_paragraphs(tmp_path / "empty.txt")
    (tmp_path / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    with pytest.raises(DataError, match="not UTF-8"):
        text_file_paragraphs(tmp_path / "latin1.txt")
    torch.set_num_threads(1)
    run = run_experiment("hyperfit-train", {"n_sequences": "2", "max_epochs": "1", "text": str(f)}, root=tmp_path)
    assert (run / "checkpoint" / "config.json").is_file()
