"""Issue 46: the SAE verdict functions (interplab.experiments.sae_verdicts). Every check they use
fires on a constructed bad run and stays quiet on a good one; the decision rules give the outcome
they state."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from interplab.experiments.sae_verdicts import (
    NULL_FEATURE_MINIMUM,
    eval_verdicts,
    pareto_verdicts,
    steering_verdicts,
    template_text,
)
from interplab.probes.validity import ValidityReport


def _failed(v) -> set[str]:
    return {c.kind for c in v.failed}


# ------------------------------------------------------------------------------------------------
# FAST vs BT
def pareto_table(
    n_seeds=3, ev=(0.9, 0.85, 0.7), gap=-0.5, packed_gap=+0.4, noise=0.02
) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    rows = []
    for seed in range(n_seeds):
        for e in ("fast", "packed"):
            for m, ex in zip(("FAST", "BT(F)", "BT(P)"), ev):
                off = {
                    "FAST": 0.0,
                    "BT(F)": -gap if e == "fast" else -packed_gap,
                    "BT(P)": -2 * gap,
                }[m]
                rows.append(
                    {
                        "method": m,
                        "architecture": "topk",
                        "sparsity": 32.0,
                        "seed": seed,
                        "eval": e,
                        "log2_mse": 1.0 + off + noise * rng.standard_normal(),
                        "log2_mse_special": -1.0 + off + noise * rng.standard_normal(),
                        "explained_variance": ex,
                    }
                )
    return pd.DataFrame(rows)


def test_pareto_good_run_reproduces_with_every_check_quiet():
    vs = pareto_verdicts(pareto_table())
    assert len(vs) == 4
    assert all(v.outcome == "reproduced" and not v.failed for v in vs), ValidityReport.of(
        vs
    ).render()
    assert {c.kind for v in vs for c in v.checks} == {
        "sampling_units",
        "floor_ceiling",
        "multiple_testing",
    }


def test_pareto_two_seeds_is_too_few():
    vs = pareto_verdicts(pareto_table(n_seeds=2))
    assert all(v.outcome == "inconclusive" and _failed(v) == {"sampling_units"} for v in vs)
    assert all(v.supported is True for v in vs)  # the numbers alone would say "reproduced"


def test_pareto_floored_sae_arms_are_flagged():
    vs = pareto_verdicts(pareto_table(ev=(0.02, 0.01, 0.0)))
    assert all("floor_ceiling" in _failed(v) for v in vs)


def test_pareto_opposite_direction_is_not_reproduced():
    vs = pareto_verdicts(pareto_table(gap=+0.5))  # FAST worse on chat activations
    assert vs[0].outcome == "not reproduced" and vs[1].outcome == "not reproduced"


def test_the_committed_smollm2_pareto_run_is_inconclusive_at_two_seeds():
    from tests.real_model_docs import run_dir

    t = pd.read_csv(run_dir("sae-pareto", "topk32-2seeds") / "tables" / "runs.csv")
    vs = pareto_verdicts(t)
    assert [v.outcome for v in vs] == ["inconclusive"] * 4
    assert all(_failed(v) == {"sampling_units"} for v in vs)


# ------------------------------------------------------------------------------------------------
# evaluation
def _conv(dl: float) -> dict:
    out = {}
    for c in ("interplab_positions", "saelens_positions", "all_tokens"):
        out.update(
            {
                f"delta_loss_pct_{c}": dl,
                f"mse_sum_d_{c}": 100.0,
                f"ce_loss_score_{c}": 0.99,
                f"kl_sae_{c}": 0.2,
                f"explained_variance_{c}": 0.9,
            }
        )
    return out


REF = {"mse": 100.0, "ce_loss_score": 0.99, "kl_div_with_sae": 0.2, "explained_variance": 0.9}


def test_eval_verdicts_rules_and_checks():
    good = eval_verdicts({"n_sequences": 64, "delta_loss_pct_response": 0.3}, _conv(-0.2), REF)
    assert [v.outcome for v in good] == ["reproduced", "reproduced"]
    far = eval_verdicts({"n_sequences": 64, "delta_loss_pct_response": 7.0}, _conv(2.0), REF)
    assert far[0].outcome == "not reproduced"
    mixed = eval_verdicts({"n_sequences": 64, "delta_loss_pct_response": 7.0}, _conv(0.2), None)
    assert len(mixed) == 1 and mixed[0].supported is None
    few = eval_verdicts({"n_sequences": 8, "delta_loss_pct_response": 0.1}, _conv(0.1), None)
    assert few[0].outcome == "inconclusive" and _failed(few[0]) == {"sampling_units"}
    off = eval_verdicts({"n_sequences": 64}, _conv(0.1), {**REF, "mse": 110.0})
    assert off[1].outcome == "not reproduced"


# ------------------------------------------------------------------------------------------------
# steering
WORDS = "the capital of france is paris and the river is long".split()


def _reply(i: int, a: float) -> str:
    return " ".join(WORDS[(i + j) % len(WORDS)] for j in range(6)) + f" {i} {a}"


def steer_table(
    arm: str, n=32, alphas=(0.0, 0.5, 1.0), hits=20, collapse_at=None, nll_shift=0.0
) -> pd.DataFrame:
    rows = []
    for a in alphas:
        for i in range(n):
            text = _reply(i, a)
            if arm == "top" and a > 0 and i < hits:
                text += " assistant"
            if collapse_at is not None and a >= collapse_at:
                text = "<|im_start|>assistant " * 6
            rows.append(
                {
                    "alpha_rel": a,
                    "prompt_idx": i,
                    "text": text,
                    "answer_kept": (1.0 if (i % 2 == 0 and a == 0) else 0.0) if i < 24 else np.nan,
                    "reply_nll": 1.0 + 0.01 * i + (nll_shift if a > 0 else 0.0),
                }
            )
    return pd.DataFrame(rows)


def _steer(top, null, ranked=range(32, 64), n_null=NULL_FEATURE_MINIMUM):
    return steering_verdicts(
        top,
        null,
        ranked_on=list(ranked),
        prompts=list(range(32)),
        n_null_features=n_null,
        feature=7,
        null_feature=3,
    )


def test_template_text_counts_the_markers():
    assert template_text(pd.Series(["<|im_start|>x", "the assistant", "plain", None])).tolist() == [
        1,
        1,
        0,
        0,
    ]


def test_steering_good_run_reproduces_the_feature_effect_quietly():
    s1, s2 = _steer(steer_table("top"), steer_table("null"))
    assert s1.outcome == "reproduced" and not s1.failed, s1.reason
    assert "|" not in s1.claim + s1.measured + s1.checks_text()  # safe in a markdown table
    # answers fall at every strength: no sweet spot, with 24 fact prompts and clean generation
    assert s2.outcome == "not reproduced" and not s2.failed, s2.reason


def test_steering_feature_ranked_on_the_prompts_fails_held_out():
    s1, s2 = _steer(steer_table("top"), steer_table("null"), ranked=range(64))
    assert "held_out" in _failed(s1) and "held_out" in _failed(s2)


def test_steering_one_null_feature_is_too_few():
    s1, _ = _steer(steer_table("top"), steer_table("null"), n_null=1)
    assert _failed(s1) == {"sampling_units"} and s1.outcome == "inconclusive"


def test_steering_collapsed_generation_tests_nothing():
    """Both arms collapse at every strength > 0: no strength is testable, the verdict decides
    nothing."""
    top, null = steer_table("top", collapse_at=0.5), steer_table("null", collapse_at=0.5)
    s1, s2 = _steer(top, null)
    assert (
        s1.supported is None
        and s1.outcome == "inconclusive"
        and "no strength testable" in s1.measured
    )
    assert s2.supported is None


def test_steering_implausible_replies_fail_reply_nll():
    s1, _ = _steer(steer_table("top", nll_shift=5.0), steer_table("null"))
    assert "reply_nll" in _failed(s1)


def test_steering_collapsed_strength_is_skipped_not_counted():
    """Collapse at α = 1 only: α = 0.5 still decides, α = 1 is named as untested."""
    s1, _ = _steer(steer_table("top", collapse_at=1.0), steer_table("null"))
    assert s1.outcome == "reproduced" and "not tested (replies collapsed): α=1" in s1.measured


@pytest.mark.parametrize("kind", ["repeated_reply", "distinct_tokens"])
def test_the_collapse_checks_fire_on_collapsed_replies(kind):
    from interplab.experiments import sae_verdicts as sv

    bad = steer_table("top", collapse_at=0.5)
    checks = sv._generation_checks(bad[bad["alpha_rel"] == 0.5], bad[bad["alpha_rel"] == 0.0], "x")
    good = steer_table("top")
    ok = sv._generation_checks(good[good["alpha_rel"] == 0.5], good[good["alpha_rel"] == 0.0], "x")
    assert not next(c for c in checks if c.kind == kind).passed
    assert next(c for c in ok if c.kind == kind).passed


def test_without_a_null_only_the_sweet_spot_is_judged():
    vs = steering_verdicts(steer_table("top"), None, ranked_on=range(32, 64), prompts=range(32))
    assert [v.claim.startswith("A steering sweet spot") for v in vs] == [True]


def test_steering_ranks_the_feature_on_dialogues_that_are_not_prompts(llama, dialogues, tmp_path):
    """Issue 46: without precomputed statistics the top feature is ranked on the held-out dialogues
    after the prompts (recorded), the replies carry their NLL under the unedited model, and a
    held-out set no larger than the prompts is refused."""
    from interplab.core.errors import ConfigError
    from interplab.sae import train_sae
    from interplab.sae.compare import special_token_steering
    from interplab.sae.data import SAEData

    site = "resid_post.1"
    sae = train_sae(
        llama,
        dialogues,
        site=site,
        architecture="topk",
        k=4,
        steps=5,
        batch_tokens=32,
        out_dir=tmp_path / "s",
    )
    data = SAEData(
        dialogues, dialogues, [], None, eval_answers=[None, "w1"] + [None] * (len(dialogues) - 2)
    )
    res = special_token_steering(
        llama, sae, data, site=site, alphas_rel=(0.0, 1.0), n_prompts=3, max_new_tokens=3
    )
    assert res.prompts == [0, 1, 2] and res.ranked_on == list(range(3, len(dialogues)))
    assert res.table["reply_nll"].notna().any()
    with pytest.raises(ConfigError, match="held-out dialogues besides"):
        special_token_steering(
            llama,
            sae,
            SAEData(dialogues, dialogues[:3], [], None),
            site=site,
            alphas_rel=(0.0,),
            n_prompts=3,
            max_new_tokens=2,
        )


def test_sae_verdicts_experiment_reproduces_the_committed_report(tmp_path):
    """The committed verdicts are what `sae-verdicts` computes from the committed runs' tables today."""
    from interplab.experiments.registry import run_experiment
    from interplab.results.runs import load_run
    from tests.real_model_docs import ROOT, run_dir, validity_report

    committed = run_dir("sae-verdicts", "pareto-and-steering")
    src = load_run(committed).json("sources")
    path = run_experiment("sae-verdicts", {k: str(ROOT / v) for k, v in src.items()}, root=tmp_path)
    assert load_run(path).validity().markdown() == validity_report(committed).markdown()
