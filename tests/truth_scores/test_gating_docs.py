"""docs/truth_scores.md "On a real model", TruthProbe gating, quotes the committed SmolLM2 gating runs
(results/truth-gating-sweep-smollm2/<label>/): the claim table is the runs' saved validity reports
(`assert_claim_table`), and every other table row and quoted number is rebuilt here from the runs' own files, so the
docs cannot drift from the runs. Run as a script to print the rows for the docs."""
from __future__ import annotations

from pathlib import Path

from interplab.results import load_run
from tests.real_model_docs import ROOT, assert_claim_table, doc_section, run_dir

KIND = "truth-gating-sweep"
# label -> (map source, gated model) as the docs name them
RUNS = {"self": ("SmolLM2", "SmolLM2"), "base-map-on-descendant": ("SmolLM2", "descendant"),
        "descendant-map-on-base": ("descendant", "SmolLM2")}
GATING = "**TruthProbe gating**"


def committed() -> dict[str, Path]:
    """The committed gating runs by label (a transfer direction not run yet is left out)."""
    return {k: run_dir(KIND, k) for k in RUNS if (ROOT / "results" / f"{KIND}-smollm2" / k / "config.json").is_file()}


def _res(label: str):
    return load_run(committed()[label]).result("facts_gating")


def _who(label: str) -> str:
    src, tgt = RUNS[label]
    return f"{src} → {tgt}"


def _iv(rate, lo, hi, signed: bool = False) -> str:
    f = "{:+.3f}" if signed else "{:.3f}"
    return f"{f.format(rate)} [{f.format(lo)}, {f.format(hi)}]"


def eval_rows() -> list[str]:
    rows = []
    for label in committed():
        res = _res(label)
        if not res.gated:
            continue
        ev = res.eval.set_index(["readout", "condition"])
        diff = res.diff.set_index("readout")
        for readout in ("generated_context", "generated_memory", "generated_distractor", "forced_choice"):
            u, g, d = ev.loc[(readout, "ungated")], ev.loc[(readout, "gated")], diff.loc[readout]
            rows.append(f"| {_who(label)} | {readout} | {_iv(u['rate'], u['lo'], u['hi'])} | "
                        f"{_iv(g['rate'], g['lo'], g['hi'])} | "
                        f"{_iv(d['gated_minus_ungated'], d['lo'], d['hi'], signed=True)} |")
    return rows


def fluency_rows() -> list[str]:
    """Eval replies per condition: the share naming the context's value (from the replies: the first committed
    run's fluency table predates that column), NLL/token under the ungated model, distinct-token rate, top share."""
    rows = []
    for label in committed():
        res = _res(label)
        ev = res.replies[res.replies["split"] == "eval"]
        ctx = ev.groupby("condition")["context"].apply(lambda x: x.astype(float).mean())
        flu = res.fluency
        for _, r in flu[flu["split"] == "eval"].iterrows():
            rows.append(f"| {_who(label)} | {r['condition']} | {ctx[r['condition']]:.3f} | "
                        f"{r['nll_per_token']:.2f} | {r['distinct_token_rate']:.2f} | {r['top_reply_share']:.3f} |")
    return rows


def tune_rows() -> list[str]:
    rows = []
    for label in committed():
        for _, r in _res(label).tune.iterrows():
            setting = "ungated" if r["mode"] == "ungated" else f"{r['mode']} {r['alpha']:g}"
            rows.append(f"| {_who(label)} | {setting} | {r['generated_context']:.3f} | {r['nll_per_token']:.2f} | "
                        f"{r['distinct_token_rate']:.2f} | {r['top_reply_share']:.3f} | "
                        f"{'yes' if r['eligible'] else 'no'} |")
    return rows


def choice_line(label: str) -> str:
    res = _res(label)
    c = res.choice
    if not res.gated:
        return f"{_who(label)}: no setting eligible"
    s = res.summary()
    return (f"{_who(label)}: {res.mode} α {res.alpha:g}, tune {c['diff']:+.3f} [{c['lo']:+.3f}, {c['hi']:+.3f}] "
            f"against no gate ({c['n']} facts{', within noise' if c['within_noise'] else ''}); "
            f"{s['n_maps']} shuffled maps: mean {s['null_mean']:.3f}, 95th percentile {s['null_q95']:.3f}, "
            f"p = {s['p_gated_vs_null']:.3f}")


def _section() -> str:
    sec = doc_section("truth_scores.md")
    assert GATING in sec, "the gating subsection moved"
    return sec.split(GATING, 1)[1].split("\n**Lineage**", 1)[0]


def test_the_gating_runs_are_committed_with_their_reports():
    runs = committed()
    assert "self" in runs, runs
    for d in runs.values():
        rep = load_run(d).validity()
        assert rep is not None and len(rep.verdicts) == 2


def test_the_reports_are_the_verdicts_of_the_committed_results():
    """A committed report is `gating_verdicts` of the committed result (a pure function: a report re-derived after
    a wording change of the verdicts is checked here against the numbers it came from)."""
    from interplab.probes.truth.gating_verdicts import gating_verdicts
    from interplab.probes.validity import ValidityReport

    for d in committed().values():
        run = load_run(d)
        assert ValidityReport.of(gating_verdicts(run.result("facts_gating"))).markdown() == run.validity().markdown()


def test_docs_claim_table_is_the_runs_reports():
    assert_claim_table(_section(), *committed().values())


def test_docs_quote_the_gating_runs():
    sec = _section()
    flat = " ".join(sec.split())
    for line in eval_rows() + fluency_rows() + tune_rows():
        assert line in sec, f"docs/truth_scores.md gating lacks the row {line!r}"
    for label in committed():
        q = choice_line(label)
        assert " ".join(q.split()) in flat, f"docs/truth_scores.md gating does not quote {q!r}"


def readme_quote(label: str) -> str:
    """The README's verdicts of one run: the gain claim and the shuffled-map claim, in the report's words."""
    from interplab.probes.truth.gating_verdicts import claims

    run = load_run(committed()[label])
    outcomes = run.validity().outcomes
    gain, null = (outcomes[c] for c in claims(run.result("facts_gating")))
    return f"{_who(label)}: {gain}; against shuffled maps: {null}"


def test_readme_quotes_only_the_gating_verdicts():
    flat = " ".join((ROOT / "README.md").read_text().split())
    for label in committed():
        q = readme_quote(label)
        assert q in flat, f"README.md does not give the verdicts {q!r}"
    assert "does not raise context-following" not in flat, "README.md still quotes the withdrawn α 6 verdict"


if __name__ == "__main__":
    for label in committed():
        print(choice_line(label))
    print("\n".join(tune_rows()), "\n")
    print("\n".join(eval_rows()), "\n")
    print("\n".join(fluency_rows()), "\n")
    for label, d in committed().items():
        print(load_run(d).validity().markdown())
        print(readme_quote(label))
