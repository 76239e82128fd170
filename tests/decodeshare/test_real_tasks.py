"""The built-in real-model DecodeShare tasks (interplab.data.decode_tasks, data=real-tasks; issue 27 §2): gold
answers from the data files, the reply parser, matched steering rows, and the study end to end on a random
checkpoint with a chat template."""
from __future__ import annotations

import numpy as np
import pytest

from interplab.core.errors import ConfigError, InputError
from interplab.data.decode_tasks import (DEFAULT_REAL_TASKS, N_CHOICES, REAL_TASKS, decode_task_rows, load_words,
                                         matched_rows)


def test_rows_take_their_gold_from_the_data_files():
    rows = decode_task_rows(REAL_TASKS, known=None, seed=0)
    assert list(rows) == list(REAL_TASKS)
    by = {t: {r.subject: r for r in rs} for t, rs in rows.items()}
    assert by["capital"]["France"].answer == "Paris"
    assert by["language"]["Brazil"].answer == "Portuguese"
    assert by["plural"]["mouse"].answer == "mice" and by["plural"]["city"].answer == "cities"
    assert by["antonym"]["hot"].answer == "cold"
    assert by["first_letter"]["tree"].answer == "T"
    assert by["mc_capital"]["France"].answer == "Paris" and "Paris" in by["mc_capital"]["France"].message
    for r in rows["yes_no"]:       # the yes rows name the true capital, the no rows another one
        named = r.message.split(" the capital of ")[0].removeprefix("Is ")
        assert (r.answer == "yes") == (named == by["capital"][r.subject].answer)
    assert {r.answer for r in rows["yes_no"]} == {"yes", "no"}
    for r in rows["addition"]:
        a, b = r.echo.split(" + ")
        assert int(r.answer) == int(a) + int(b)
    for t, rs in rows.items():
        assert len({len(r.choices) for r in rs}) == 1, t        # forced choice needs one count per task
        for r in rs:
            assert r.answer in r.choices and r.answer in r.pool
            if t in ("plural", "antonym"):
                assert r.echo not in r.pool           # an echo of the question is never read as the answer
    assert len(rows["capital"][0].choices) == N_CHOICES
    assert "sheep" not in by["plural"]                    # plural == singular cannot be told from an echo


def test_rows_are_seeded_and_the_known_filter_applies():
    a = decode_task_rows(["capital", "plural"], known=None, seed=3)
    assert a == decode_task_rows(["capital", "plural"], known=None, seed=3)
    assert a != decode_task_rows(["capital", "plural"], known=None, seed=4)
    kept = decode_task_rows(["capital"], known="smollm2-135m-instruct")["capital"]
    assert 0 < len(kept) < len(a["capital"])
    with pytest.raises(ConfigError, match="unknown real-model task"):
        decode_task_rows(["capital", "copy"])
    with pytest.raises(ConfigError, match="repeat"):
        decode_task_rows(["capital", "capital"])
    with pytest.raises(ConfigError, match="no word list"):
        load_words("verbs")
    # the default tasks are the ones the screen passes; the methods spec spells them out once more
    from interplab.methods.decodeshare import REAL_DEFAULT

    assert REAL_DEFAULT.split(",") == list(DEFAULT_REAL_TASKS)


@pytest.mark.parametrize("task,subject,reply,ok", [
    ("plural", "mouse", "The plural of 'mouse' is mice.", True),
    ("plural", "mouse", "The plural of 'mouse' is 'mouses'.", False),
    ("plural", "cat", "cats", True),
    ("capital", "France", "The capital of France is Paris.", True),
    ("capital", "France", "The capital of France is Rome, not Paris.", False),
    ("first_letter", "tree", "The first letter of the word 'tree' is 'T'.", True),
    ("first_letter", "tree", "The first letter of the word 'tree' is 'R'.", False),
    ("antonym", "hot", 'The opposite of "hot" is "cold".', True),
    ("antonym", "hot", "Hot.", False),
    ("yes_no", None, "No, it is not.", None),
    ("addition", None, "3 + 5 = 8", None),
])
def test_reply_parser(task, subject, reply, ok):
    from interplab.probes.decodeshare.tasks import TaskSet, reply_correct

    rows = decode_task_rows([task], known=None, seed=0)[task]
    row = next(r for r in rows if r.subject == subject) if subject else rows[0]
    if task == "yes_no":
        ok = row.answer == "no"
    if task == "addition":
        reply = f"{row.echo} = {row.answer}"
        ok = True
    ts = TaskSet(task, [[1]], [[1]], 0, [], np.zeros(1, int), np.zeros((1, 1), bool), [[]], [row],
                 parse=[(row.answer, row.echo, row.pool)])
    assert bool(reply_correct(ts, [reply], [False])[0]) is ok
    # without parse keys the token-level exact match stands
    plain = TaskSet(task, [[1]], [[1]], 0, [], np.zeros(1, int), np.zeros((1, 1), bool), [[]])
    assert bool(reply_correct(plain, [reply], [True])[0]) is True
    with pytest.raises(InputError, match="parse keys"):
        reply_correct(ts, [reply, reply], [False, False])


def test_matched_rows_pair_the_same_nouns():
    fl = decode_task_rows(["first_letter"], known=None)["first_letter"]
    pairs = matched_rows(fl, "plural")
    assert len(pairs) == len(fl) - sum(p == n for n, p in zip(*load_words("nouns").to_numpy().T))
    assert all(a.subject == b.subject and b.task == "plural" for a, b in pairs)
    with pytest.raises(ConfigError, match="matched steering pair"):
        matched_rows(decode_task_rows(["capital"], known=None)["capital"], "plural")


# --------------------------------------------------------------------------------------------- model-facing
@pytest.fixture(scope="module")
def chat_ckpt(tmp_path_factory):
    """A random 2-layer llama with a byte-level BPE tokenizer (chat template, <|im_end|> EOS) trained on the task
    questions, so prompts tokenize into real sub-words."""
    from interplab.data.bpe import train_bpe
    from interplab.train.arch import ArchConfig, build_model
    from interplab.train.checkpoint import save_checkpoint

    rows = decode_task_rows(REAL_TASKS, known=None)
    texts = [r.message + " " + r.answer for rs in rows.values() for r in rs]
    tok = train_bpe(texts * 2, vocab_size=600)
    arch = ArchConfig(family="llama", n_layers=2, d_model=32, d_mlp=64, n_heads=4, n_kv_heads=2, d_head=8, n_ctx=160)
    return save_checkpoint(build_model(arch, tok, seed=0), tok, tmp_path_factory.mktemp("ds_bpe") / "m")


def test_real_task_sets_are_disjoint_and_templated(chat_ckpt):
    import interplab
    from interplab.probes.decodeshare.tasks import real_task_sets

    model = interplab.load_model(str(chat_ckpt), device="cpu")
    calib, evals = real_task_sets(model, ["capital", "plural"], n_calib=5, n_eval=4, seed=0)
    for t in ("capital", "plural"):
        assert len(calib[t]) == 5 and len(evals[t]) == 4 and len(evals[t].parse) == 4
        assert not {r.subject for r in calib[t].examples} & {r.subject for r in evals[t].examples}
        text = model.tokenizer.decode(evals[t].prompts[0])
        assert text.startswith("<|im_start|>") and "assistant" in text       # the chat template
        assert all(c[-1] == model.eos_token_id for cs in evals[t].fc_cands for c in cs)
    with pytest.raises(ConfigError, match="fewer than n_calib"):
        real_task_sets(model, ["capital"], n_calib=500, n_eval=4)


def test_study_and_scan_run_on_real_tasks_end_to_end(tmp_path, chat_ckpt):
    import pandas as pd

    from interplab.experiments.registry import run_experiment
    from interplab.results import load_run

    common = {"model": str(chat_ckpt), "data": "real-tasks", "tasks": "first_letter,plural,antonym",
              "n_calib": "6", "calib_max_new_tokens": "4", "null_perm_B": "5", "null_rot_B": "2",
              "batch_size": "8"}
    path = run_experiment("decodeshare", {**common, "n_eval": "4", "eval_max_new_tokens": "4", "n_boot": "20",
                                          "parts": "table,loto,alpha,steer", "metrics": "gen", "alphas": "0.5,1",
                                          "steer_from": "first_letter", "steer_to": "plural",
                                          "steer_scales": "1.0", "tau_k": "0.5"},
                          root=tmp_path)
    run = load_run(path)
    study = run.result("study")
    assert set(study.table["metric"]) == {"gen"} and set(study.sweep_controls["alpha"]) == {0.5, 1.0}
    # the run judged itself: its verdicts name the layer and every claim its sections can speak to
    claims = list(run.validity().verdicts["claim"])
    assert any("alpha-match control" in c for c in claims) and any("LOTO" in c for c in claims)
    assert any("steering vector" in c for c in claims) and all(c.startswith("L") for c in claims)
    assert study.config.tasks == ["first_letter", "plural", "antonym"]
    assert study.error is None, study.error
    assert set(study.table["task"]) == {"first_letter", "plural", "antonym", "all"}
    assert study.steering is not None and study.steering.info["from"] == "first_letter"
    assert 0 <= study.steering.info["p_sh_v_vs_haar"] <= 1
    scan = run_experiment("decodeshare-layers", {**common, "layers": "all"}, root=tmp_path)
    assert sorted(set(load_run(scan).result("scan").summary["layer"])) == [0, 1]
    assert len(load_run(scan).validity().verdicts) == 2                  # H1 under each null, Holm over layers
    # a saved scan judged again from its tables alone: same verdicts, no model, no recomputation
    again = load_run(run_experiment("decodeshare-layers", {"from_run": str(scan)}, root=tmp_path))
    assert "scan" not in again.result_names and again.json("source")["run"] == str(scan)
    pd.testing.assert_frame_equal(again.validity().verdicts, load_run(scan).validity().verdicts)
    screen = run_experiment("decodeshare-tasks", {"model": str(chat_ckpt), "tasks": "capital,plural",
                                                  "n_calib": "3", "n_eval": "3", "eval_max_new_tokens": "3",
                                                  "n_boot": "20"}, root=tmp_path)
    held = run_experiment("decodeshare-tasks", {"model": str(chat_ckpt), "tasks": "capital,plural",
                                                "n_calib": "3", "n_eval": "3", "eval_max_new_tokens": "3",
                                                "n_boot": "20", "split": "calib"}, root=tmp_path)
    from interplab.probes.decodeshare.tasks import real_task_sets
    import interplab

    calib, evals = real_task_sets(interplab.load_model(str(chat_ckpt), device="cpu"), ["capital"], n_calib=3,
                                  n_eval=3)
    shown = load_run(held).result("screen").examples
    assert load_run(held).json("passing")["split"] == "calib"
    assert len(shown[(shown["task"] == "capital") & (shown["metric"] == "gen")]) == len(calib["capital"]) == 3

    tab = pd.read_csv(screen / "tables" / "tasks.csv")
    assert set(tab["task"]) == {"capital", "plural", "all"} and set(tab["metric"]) == {"fc", "gen"}
    with pytest.raises(ConfigError, match="matched steering pair|must share subjects"):
        run_experiment("decodeshare", {**common, "n_eval": "4", "parts": "steer", "steer_from": "capital",
                                       "steer_to": "plural", "tasks": "capital,plural"}, root=tmp_path)


def test_smollm2_defaults():
    from interplab.experiments.registry import model_defaults

    smol = {"model": "real:smollm2-135m-instruct"}
    d = model_defaults("decodeshare", smol)
    assert d["data"] == "real-tasks" and d["steer_to"] == "plural"
    # the documented runs read the matched-energy sweep over strengths up to 1, on generation, with a rotation
    # null that can reach p = 0.01
    assert "alpha" in d["parts"] and d["metrics"] == "gen" and d["alphas"] == "0.25,0.5,0.75,1"
    assert int(d["null_rot_B"]) >= 39
    assert model_defaults("decodeshare-layers", smol)["data"] == "real-tasks"
    assert model_defaults("decodeshare", {"model": "zoo:toy-chat"}) == {}
