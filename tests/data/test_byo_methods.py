"""Bring your own data: every method end to end from a tiny user CSV/JSONL, in Python and through the CLI
(`--set data=PATH`), on small random checkpoints (word-level vocabulary w0, w1, ...; chat template included).
The run's recorded config carries the data path."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from interplab.core.errors import DataError


def _cli(*args) -> int:
    from interplab.cli import main

    return main(list(args))


def _one_run(root):
    runs = [p for p in root.rglob("config.json")]
    assert len(runs) == 1, runs
    return runs[0].parent, json.loads(runs[0].read_text())


def _truth_csv(path, n=40, seed=0, shuffle_labels=False):
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        y = i % 2
        ctx = " ".join(f"w{int(k)}" for k in rng.integers(10, 40, 5))
        lab = f"w{5 if y else 6}"
        rows.append({"text": f"{ctx} {lab} {lab} {lab}", "label": y})  # the last tokens carry the label
    df = pd.DataFrame(rows)
    if shuffle_labels:
        df["label"] = rng.permutation(df["label"].to_numpy())
    df.to_csv(path, index=False)
    return path


def test_truth_scores_from_user_csv_python(llama, tmp_path):
    from interplab.probes.truth import truth_scores, user_truth_set

    items = user_truth_set(_truth_csv(tmp_path / "t.csv"))
    ts = truth_scores(llama, items, epochs=60)
    assert ts.scores.shape == (llama.n_layers, llama.n_heads) and ts.n_samples == 40
    assert ts.scores.max() >= 0.9  # the label sits in the last token: some head decodes it
    null = truth_scores(llama, user_truth_set(_truth_csv(tmp_path / "n.csv", shuffle_labels=True)), epochs=60)
    assert null.scores.max() < ts.scores.max()


def test_truth_scores_user_file_errors(tmp_path):
    from interplab.probes.truth import user_truth_set

    p = tmp_path / "bad.csv"
    pd.DataFrame({"text": ["w1"], "lbl": [1]}).to_csv(p, index=False)
    with pytest.raises(DataError):
        user_truth_set(p)
    p2 = tmp_path / "one.csv"
    pd.DataFrame({"text": ["w1", "w2"], "label": [1, 1]}).to_csv(p2, index=False)
    with pytest.raises(DataError, match="both labels"):
        user_truth_set(p2)


def test_truth_scores_cli_with_data(llama_ckpt, tmp_path):
    data = _truth_csv(tmp_path / "t.csv")
    out = tmp_path / "runs"
    assert _cli("run", "truth-scores", "--set", f"model={llama_ckpt}", "--set", f"data={data}", "--set",
                "n_samples=30", "--set", "epochs=20", "--set", "figure_formats=", "--out", str(out)) == 0
    run, cfg = _one_run(out)
    assert cfg.get("config", cfg).get("data") == str(data) or str(data) in json.dumps(cfg)
    summary = json.loads((run / "json" / "summary.json").read_text())
    assert summary["n_samples"] == 30 and summary["data"] == str(data)


# the random word-level checkpoint has no 'User:'/'Question:' words: the warning naming them is expected
@pytest.mark.filterwarnings("ignore::interplab.UnknownTokenWarning")
def test_truth_scores_cli_reads_halueval_schema(llama_ckpt, tmp_path):
    rows = [{"knowledge": f"w{10 + i % 20}", "question": "w3 w4", "right_answer": "w5",
             "hallucinated_answer": "w6"} for i in range(30)]
    p = tmp_path / "qa_data.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "runs"
    assert _cli("run", "truth-scores", "--set", f"model={llama_ckpt}", "--set", f"data={p}", "--set",
                "n_samples=30", "--set", "epochs=10", "--set", "figure_formats=", "--out", str(out)) == 0
    run, _ = _one_run(out)
    assert json.loads((run / "json" / "summary.json").read_text())["n_samples"] == 30


# ----------------------------------------------------------------------------------------------- DecodeShare
def _ds_jsonl(path, n=10):
    rows = []
    for t, (task, shift) in enumerate([("alpha", 0), ("beta", 3), ("gamma", 6)]):
        for i in range(n):
            x = [10 + (i + k) % 20 for k in range(3)]
            ans = f"w{10 + (x[0] + shift) % 20}"
            choices = sorted({ans, "w40", "w41"})
            rows.append({"task": task, "prompt": " ".join(f"w{v}" for v in x), "answer": ans,
                         "choices": choices})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_decodeshare_user_task_sets(llama, tmp_path):
    from interplab.data.user import user_records
    from interplab.probes.decodeshare import TaskSet
    from interplab.probes.decodeshare.tasks import user_task_sets

    calib, evals = user_task_sets(llama, user_records("decodeshare", _ds_jsonl(tmp_path / "d.jsonl")))
    assert set(calib) == set(evals) == {"alpha", "beta", "gamma"}
    s = evals["alpha"]
    assert isinstance(s, TaskSet) and len(s) == 5 and len(calib["alpha"]) == 5  # rows alternate
    for ans, cands, g in zip(s.answers, s.fc_cands, s.fc_gold):
        assert cands[g] == ans + [s.stop] and len(cands) == 3
    assert s.prompts[0][0] == llama.tokenizer.bos_token_id  # default special tokens, no chat template


def test_decodeshare_cli_with_data(llama_ckpt, tmp_path):
    data = _ds_jsonl(tmp_path / "d.jsonl")
    out = tmp_path / "runs"
    assert _cli("run", "decodeshare", "--set", f"model={llama_ckpt}", "--set", f"data={data}", "--set", "parts=table",
                "--set", "n_calib=5", "--set", "n_eval=5", "--set", "null_perm_B=20", "--set", "null_rot_B=0",
                "--set", "calib_max_new_tokens=4", "--set", "eval_max_new_tokens=2", "--set", "n_boot=50",
                "--set", "rho=0.8", "--out", str(out)) == 0
    run, cfg = _one_run(out)
    assert str(data) in json.dumps(cfg)
    info = json.loads((run / "json" / "info.json").read_text())
    assert set(info["n_states"]) == {"alpha", "beta", "gamma"}
    if info["k_s"] > 0:
        table = pd.read_csv(run / "tables" / "ablation.csv")
        assert {"alpha", "beta", "gamma", "all"} <= set(table["task"])



def test_decodeshare_layers_cli_with_data(llama_ckpt, tmp_path):
    """decodeshare-layers calibrates on the file's tasks, not the organisms' (which this checkpoint cannot read)."""
    data = _ds_jsonl(tmp_path / "d.jsonl")
    out = tmp_path / "runs"
    assert _cli("run", "decodeshare-layers", "--set", f"model={llama_ckpt}", "--set", f"data={data}",
                "--set", "n_calib=5", "--set", "null_perm_B=10", "--set", "null_rot_B=0",
                "--set", "calib_max_new_tokens=3", "--set", "rho=0.8", "--out", str(out)) == 0
    run, cfg = _one_run(out)
    assert str(data) in json.dumps(cfg)
    layers = pd.read_csv(run / "tables" / "layers.csv")
    n_layers = json.loads((Path(llama_ckpt) / "config.json").read_text())["num_hidden_layers"]
    assert sorted(layers["layer"].unique()) == list(range(n_layers))
    from interplab.core.result import Result
    ss = Result.load_any(next(run.glob("results/subspace_L0_paper_*")) if (run / "results").is_dir()
                         else next(run.glob("subspace_L0_paper_*")))
    assert set(ss.n_rows) == {"alpha", "beta", "gamma"}

# ----------------------------------------------------------------------------------------------- CRH
def _crh_csv(path, n=8):
    rows = []
    for c, (concept, word) in enumerate([("animal words", "w30"), ("color words", "w31")]):
        for i in range(n):
            q = f"w{10 + i} w{11 + i}"
            rows.append({"qid": i, "cid": c, "question": q, "concept": concept,
                         "resp_no_concept": f"w{20 + i % 5} w22", "resp_with_concept": f"w{20 + i % 5} {word}",
                         "concept_words": word})
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_crh_user_concept_data(tmp_path):
    from interplab.data.user import user_records
    from interplab.probes.crh.real_data import concept_words, user_concept_data

    data = user_concept_data(user_records("crh", _crh_csv(tmp_path / "p.csv")), n_test=3)
    assert [d.name for d in data] == ["animal words", "color words"]
    d = data[0]
    assert len(d.train_pairs) == 5 and len(d.test_pairs) == 3 and d.words == ("w30",)
    assert d.train_pairs[0][1].startswith("User: w") and "\nAssistant: " in d.train_pairs[0][1]
    assert d.test_prompts[0].endswith("\nAssistant: ")
    assert concept_words("C/C++ programming syntax elements") == ("c/c++", "programming", "syntax", "elements")


def test_crh_user_pairs_go_through_a_chat_organisms_template(tmp_path):
    """On a model trained on chats (toy-chat) a pair is the templated (user q, assistant r) conversation, and the
    steering prompt is the templated user turn with the generation prompt: no "User:"/"Assistant:" words it cannot
    read."""
    import interplab
    from interplab.data.user import user_records
    from interplab.probes.crh import concept_diffs
    from interplab.probes.crh.real_data import user_concept_data

    m = interplab.load_model("zoo:toy-chat")
    rows = [{"concept": "animal", "question": f"copy s{i} s{i + 1}", "resp_no_concept": f"s{i} s{i + 1}",
             "resp_with_concept": f"s{i} cat"} for i in range(6)]
    d = user_concept_data(rows, n_test=2, model=m)[0]
    no, yes = d.train_pairs[0]
    def conv(r, key):
        return m.apply_chat_template([{"role": "user", "content": r["question"]},
                                      {"role": "assistant", "content": r[key]}], add_generation_prompt=False)
    assert (no, yes) in [(conv(r, "resp_no_concept"), conv(r, "resp_with_concept")) for r in rows]
    assert no != yes and m.tokenizer.unk_token_id not in no + yes
    # the steering prompt is the templated user turn as token ids (steer_generate generates with chat=False)
    assert d.test_prompts[0] in [m.apply_chat_template([{"role": "user", "content": r["question"]}],
                                                       add_generation_prompt=True) for r in rows]
    diffs = concept_diffs(m, d.train_pairs, layer=1)  # UnknownTokenWarning is an error in this suite
    assert diffs.shape == (len(d.train_pairs), m.d_model) and float(abs(diffs).max()) > 0


# the random word-level checkpoint has no 'User:'/'Question:' words: the warning naming them is expected
@pytest.mark.filterwarnings("ignore::interplab.UnknownTokenWarning")
def test_crh_cli_with_pair_file(llama_ckpt, tmp_path):
    data = _crh_csv(tmp_path / "p.csv")
    out = tmp_path / "runs"
    assert _cli("run", "crh-toy", "--set", f"model={llama_ckpt}", "--set", f"data={data}", "--set", "n_test=3",
                "--set", "n_p=2", "--set", "n_strengths=2", "--set", "n_bins=4", "--set", "max_new_tokens=2",
                "--set", "n_perm=10", "--out", str(out)) == 0
    run, cfg = _one_run(out)
    summary = json.loads((run / "json" / "summary.json").read_text())
    assert summary["data"] == str(data)
    stats = pd.read_csv(run / "tables" / "cylinder_stats.csv")
    assert set(stats["concept"]) == {"animal words", "color words"}


# the random word-level checkpoint has no 'User:'/'Question:' words: the warning naming them is expected
@pytest.mark.filterwarnings("ignore::interplab.UnknownTokenWarning")
def test_crh_cli_paper_concepts(llama_ckpt, tmp_path):
    qs = tmp_path / "alpaca.jsonl"
    qs.write_text("".join(json.dumps({"instruction": f"w{10 + i} w{12 + i}", "dataset": "x"}) + "\n"
                          for i in range(6)))
    out = tmp_path / "runs"
    assert _cli("run", "crh-toy", "--set", f"model={llama_ckpt}", "--set", "concepts=paper", "--set",
                f"questions={qs}", "--set", "n_concepts=2", "--set", "n_train=4", "--set", "n_test=2", "--set",
                "max_new_tokens_pairs=3", "--set", "steer=false", "--out", str(out)) == 0
    run, _ = _one_run(out)
    summary = json.loads((run / "json" / "summary.json").read_text())
    assert summary["data"] == "paper"
    stats = pd.read_csv(run / "tables" / "cylinder_stats.csv")
    assert stats["concept"].iloc[0].startswith("C/C++ programming syntax")  # concept id 2, the file's first row


# ----------------------------------------------------------------------------------------------- SAE, hyperfit
def _chat_jsonl(path, n=24):
    rng = np.random.default_rng(0)
    say = lambda: " ".join(f"w{int(k)}" for k in rng.integers(0, 40, rng.integers(3, 8)))
    rows = [{"messages": [{"role": "user", "content": say()}, {"role": "assistant", "content": say()}]}
            for _ in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_sae_user_data_python(tmp_path):
    from interplab.sae.data import user_sae_data

    d = user_sae_data(_chat_jsonl(tmp_path / "c.jsonl"), 16, 4, 8)
    assert len(d.train) == 16 and len(d.eval) == 4 and len(d.texts) == 8
    assert d.train[0][0]["role"] == "user" and d.eval_examples is None
    csv = tmp_path / "c.csv"
    pd.DataFrame({"user": ["w1 w2"] * 3, "assistant": ["w3"] * 3, "split": ["train", "train", "test"]}).to_csv(
        csv, index=False)
    d2 = user_sae_data(csv, 8, 8, 8)
    assert len(d2.train) == 2 and len(d2.eval) == 1


def test_sae_train_cli_with_data(llama_ckpt, tmp_path):
    data = _chat_jsonl(tmp_path / "c.jsonl")
    out = tmp_path / "runs"
    assert _cli("run", "sae-train", "--set", f"model={llama_ckpt}", "--set", f"data={data}", "--set", "steps=8",
                "--set", "n_train=16", "--set", "n_eval=4", "--set", "batch_tokens=32", "--set", "expansion=2",
                "--set", "context_size=32", "--out", str(out)) == 0
    run, cfg = _one_run(out)
    assert str(data) in json.dumps(cfg)
    metrics = pd.read_csv(run / "tables" / "metrics.csv")
    assert len(metrics) == 1
    from interplab.results import load_run
    from interplab.sae.compare import SAERun

    res = load_run(run).result("run")                # the run reopens as its typed result
    assert isinstance(res, SAERun) and res.sae_path == "sae" and (run / res.sae_path).is_dir()
    assert metrics.loc[0, "path"] == "sae" and np.isclose(metrics.loc[0, "log2_mse"], res.metrics["log2_mse"])


def test_hyperfit_geometry_cli_with_data(llama_ckpt, checkpoint_factory, tmp_path):
    from interplab.probes.hyperfit import user_texts

    other = checkpoint_factory("llama", n_layers=3, seed=1)
    p = tmp_path / "texts.csv"
    pd.DataFrame({"text": [" ".join(f"w{(i * 7 + k) % 50}" for k in range(20)) for i in range(12)]}).to_csv(
        p, index=False)
    assert len(user_texts(p, 5)) == 5
    out = tmp_path / "runs"
    assert _cli("run", "hyperfit-geometry", "--set", f"base={llama_ckpt}", "--set", f"targets={other}", "--set",
                f"data={p}", "--set", "n_texts=12", "--set", "n_prompts=0", "--set", "batch_size=6",
                "--out", str(out)) == 0
    run, cfg = _one_run(out)
    assert str(p) in json.dumps(cfg)
    assert len(pd.read_csv(run / "tables" / "geometry.csv")) > 0


def test_decodeshare_user_rows_reproduce_the_organism_encoding():
    """A user file written from the organism's own multitask examples gives the same token ids and the same
    baseline accuracy as the organism's native data path (so the user route adds no tokenisation drift)."""
    import interplab
    from interplab.probes.decodeshare import evaluate_condition
    from interplab.probes.decodeshare.tasks import multitask_sets, user_task_sets

    m = interplab.load_model("zoo:toy-base")
    native = multitask_sets(m, ["copy"], 6, seed=0, split="test", fmt="raw")["copy"]
    rows = [{"task": "copy", "prompt": f"copy {' '.join(ex.meta['x'])} sep", "answer": " ".join(ex.response),
             "choices": None, "split": "test"} for ex in native.examples]
    _, ev = user_task_sets(m, rows + [dict(rows[0], split="train")])
    assert ev["copy"].prompts == native.prompts and ev["copy"].answers == native.answers
    assert ev["copy"].stop == native.stop
    acc = [evaluate_condition(m, s, [], max_new_tokens=12).groupby("metric")["correct"].mean()["gen"]
           for s in ({"copy": native}, ev)]
    assert acc[0] == acc[1]


@pytest.mark.slow
def test_sae_fast_vs_block_cli_with_data(llama_ckpt, tmp_path):
    data = _chat_jsonl(tmp_path / "c.jsonl", n=30)
    out = tmp_path / "runs"
    assert _cli("run", "sae-fast-vs-block", "--set", f"model={llama_ckpt}", "--set", f"data={data}", "--set",
                "architectures=standard", "--set", "methods=fast,bt_f,bt_p", "--set", "steps=6", "--set",
                "gsnr_batches=2", "--set", "steer_alphas=0,1", "--set", "steer_prompts=2", "--set",
                "max_new_tokens=2", "--set", "expansion=2", "--set", "batch_tokens=32", "--set", "context_size=32",
                "--set", "n_train=20", "--set", "n_eval=4", "--set", "n_text=20", "--out", str(out)) == 0
    run, cfg = _one_run(out)
    assert str(data) in json.dumps(cfg)
    assert set(pd.read_csv(run / "tables" / "results.csv")["method"]) >= {"FAST"}
