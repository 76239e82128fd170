"""The experiment building blocks and figure builders run end to end on tiny random checkpoints."""
import numpy as np
import plotly.graph_objects as go
import pytest

from interplab.figures import geometry as F
from interplab.probes import hyperfit as E


@pytest.fixture(scope="module")
def eval_result(hf_pair):
    a, b, texts = hf_pair
    cfg = E.EvalConfig(n_prompts=4, context_tokens=8, new_tokens=8, seeds=2, alphas=[0.1, 0.5, 2.0],
                       static_k=10, tf_texts=2, batch_size=4)
    return E.evaluate_settings(a, {"target": b, "target2": b}, texts, cfg)


def test_eval_table(eval_result, tmp_path):
    t = eval_result.table
    settings = list(t["setting"])
    assert settings[0] == "base greedy" and settings[-2:] == ["target", "target2"]
    assert any(s.startswith("base sampled T*=") for s in settings) and "base sampled T=1" in settings
    base = t.iloc[0]
    assert base["top1_agreement"] == 1.0 and base["gen_top1"] == 1.0
    tstar = t[t["setting"].str.startswith("base sampled T*")].iloc[0]
    assert tstar["top1_agreement"] == 1.0  # temperature never changes the argmax
    assert "ttr_sd" in t.columns and tstar["n_seeds"] == 2
    tgt = t[t["setting"] == "target"].iloc[0]
    # the entropy-matched row has the target's teacher-forced entropy (to the bisection tolerance)
    assert abs(tstar["entropy"] - tgt["entropy"]) < 1e-3
    assert eval_result.spearman["greedy_at_T*_identical_to_base"] is True
    assert len(eval_result.sweep) == 3 and set(eval_result.spearman) >= {"ttr", "diversity"}
    assert eval_result.ranks["base greedy"].shape == (4, 8)
    # T* and the static delta are chosen on the first tf_texts texts; the prompts come from the
    # others
    assert not set(eval_result.units["selected_on"]) & set(eval_result.units["scored_on"])
    replies = eval_result.replies
    assert len(replies["target"]) == 4 and len(replies[tstar["setting"]]) == 2 * 4
    assert eval_result.reply_nll["target"].shape == (4,)
    assert np.isfinite(eval_result.reference_nll).all()
    assert base["changed_share"] == 0.0 and tstar["changed_share"] > 0
    eval_result.save(tmp_path / "ev")
    back = E.HyperfitEvalResult.load(tmp_path / "ev")
    assert list(back.table["setting"]) == settings
    assert back.units == eval_result.units and back.replies == eval_result.replies
    outcomes = [v.outcome for v in E.eval_verdicts(eval_result)]
    assert [v.outcome for v in E.eval_verdicts(back)] == outcomes


def test_eval_needs_texts_for_prompts_beyond_the_teacher_forced_ones(hf_pair):
    from interplab.core.errors import ConfigError

    a, b, texts = hf_pair
    with pytest.raises(ConfigError, match="tf_texts"):
        E.evaluate_settings(a, {"t": b}, texts, E.EvalConfig(tf_texts=len(texts), n_prompts=2))


def test_geometry_report(hf_pair):
    a, b, texts = hf_pair
    cfg = E.GeometryReportConfig(n_prompts=3, context_tokens=8, new_tokens=6, batch_size=4, max_tokens=None)
    df = E.geometry_report(a, {"t": b}, texts, cfg).frame
    assert set(df["tokens"]) == {"teacher_forced", "generated"} and set(df["bos"]) == {True, False}
    assert len(df) == 3 * (a.n_layers + 1)
    gen = df[df["tokens"] == "generated"]
    assert (gen["n_tokens"] == 3 * (8 + 6 - 1)).all()


def test_k_sweep_tiny(hf_pair):
    a, _, texts = hf_pair
    seqs = [a.tokenizer(t)["input_ids"] for t in texts[:4]]
    cfg = E.KSweepConfig(max_epochs=2, budget_s=30, lora_r=2, lora_alpha=4, n_prompts=2, tf_texts=2, new_tokens=4,
                         batch_size=2, context_tokens=8)
    df = E.k_sweep(a, seqs, texts, cfg).frame
    assert list(zip(df["placement"], df["k"])) == [("late", 1), ("late", 2), ("early", 1)]
    assert df.loc[df["placement"] == "late", "trainable_params"].is_monotonic_increasing
    assert df.loc[0, "layers"] == "1" and df.loc[2, "layers"] == "0"
    fig = F.k_sweep_figure(df)
    assert isinstance(fig, go.Figure)


def test_figures_build(hf_pair, eval_result):
    from interplab.probes.hyperfit import compute_layer_geometry, match_temperature, rank_reordering

    a, b, texts = hf_pair
    g = compute_layer_geometry(a, b, texts)
    figs = [F.pr_by_layer_figure(g), F.cos_l2_figure(g), F.eigen_spectrum_figure(g),
            F.diversity_bars_figure(eval_result.table),
            F.entropy_temperature_figure(match_temperature(a, b, texts, curve_points=9)),
            F.static_injection_figure(eval_result.sweep, "ttr", references={"base": 0.3}, spearman=-0.5)]
    r = rank_reordering(a, b, texts, context_tokens=8, max_new_tokens=6)
    figs += [F.rank_histogram_figure(r), F.context_dependence_figure(r.token_frame(a.tokenizer)),
             F.lens_entry_figure(r)]
    hist = [{"epoch": i, "train_loss": 1.0 / i, "val_loss": 2.0, "ttr": 0.3} for i in range(1, 5)]
    import pandas as pd
    figs.append(F.training_dashboard_figure(pd.DataFrame(hist)))
    for f in figs:
        assert isinstance(f, go.Figure) and len(f.data) > 0
    ann = figs[0].layout.title.text  # the ΔDim summary is the title's second line (an annotation ran off the left)
    assert "ΔDim last block" in ann and "after final norm" in ann
    html = F.repetition_html("a b c a b c d".split(), n=3, ranks=[1, 2, 50, 1, 1, 1, 1])
    assert html.count("background:#f8c9c4") == 3  # the second "a b c" repeats an earlier trigram
    assert html.count("font-weight:bold") == 2  # ranks 2 and 50 are overrides
