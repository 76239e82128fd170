"""The benchmark harness's line format, Markdown rows and result checking (no benchmark is run)."""
from __future__ import annotations

import pytest

from benchmarks import harness


def test_bench_line_round_trip_and_md():
    r = dict(ours=0.0123456, anchor=0.05, ratio=4.05, goal=">= 2x", ok=True, extra={"batch": 32, "tokens": 128})
    line = harness.bench_line("capture", r)
    assert line == ('BENCH name=capture ours=0.01235 anchor=0.05 ratio=4.05 goal=>=2x ok=True '
                    'extra={"batch":32,"tokens":128}')
    name, d = harness.parse_bench_line(line)
    assert name == "capture" and d["ours"] == "0.01235" and d["ok"] is True and d["extra"].startswith("{")
    row = harness.md_row("capture", r)
    assert row.startswith("| capture | 0.01235 | 0.05 | 4.05 | >= 2x | yes |")
    assert harness.md_header().splitlines()[0].count("|") == row.count("|")


def test_run_one_checks_the_result():
    with pytest.raises(ValueError, match="lacks"):
        harness.run_one("x", lambda: {"ours": 1.0})
    with pytest.raises(TypeError, match="expected a dict"):
        harness.run_one("x", lambda: 3)
    ok = harness.run_one("x", lambda: dict(ours=1, anchor=2, ratio=2, goal="g", ok=False))
    assert ok["ok"] is False  # a missed goal is a measurement, not an error


def test_timeit_median_and_discovery():
    calls = []
    t = harness.timeit(lambda: calls.append(1), repeat=3, warmup=2, number=4)
    assert t >= 0 and len(calls) == 2 + 3 * 4
    found, errors = harness.discover()
    assert isinstance(found, dict) and isinstance(errors, dict)
    assert "harness" not in found


def test_timeit_interleaved_alternates_the_two_sides():
    calls = []
    t = harness.timeit_interleaved(lambda: calls.append("o"), lambda: calls.append("a"), repeat=3,
                                   warmup=1)
    assert calls == ["o", "a"] * 4
    assert set(t) == {"ours", "anchor", "ours_cpu", "anchor_cpu"} and min(t.values()) >= 0


def _fake_package(root, name):
    pkg = root / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    ok = "dict(ours=1.0, anchor=2.0, ratio=2.0, goal='>=2x', ok=True)"
    (pkg / "bench_a_table.py").write_text(
        "import sys\n"
        f"def good():\n    return {ok}\n"
        "def exits():\n    sys.exit(3)\n"
        "def raises():\n    raise RuntimeError('boom')\n"
        "BENCHMARKS = {'a_good': good, 'a_exits': exits, 'a_raises': raises}\n")
    # a script whose argparse would choke on the harness's arguments ("all") if it ran in the harness's process
    (pkg / "bench_b_argparse.py").write_text(
        "import argparse\n"
        "if __name__ == '__main__':\n"
        "    argparse.ArgumentParser().parse_args()\n"
        "    print('BENCH name=b_script ours=0.5 anchor=1.0 ratio=2.0 goal=>=2x ok=True extra={}')\n")
    (pkg / "bench_c_crash.py").write_text(
        "if __name__ == '__main__':\n"
        "    print('BENCH name=c_partial ours=1 anchor=1 ratio=1 goal=g ok=False extra={}', flush=True)\n"
        "    raise SystemExit(5)\n")
    (pkg / "bench_d_silent.py").write_text("print('no bench lines here')\n")
    (pkg / "bench_e_last.py").write_text(f"BENCHMARKS = {{'e_last': lambda: {ok}}}\n")
    return name


def test_all_runs_every_benchmark_even_when_some_exit_or_fail(tmp_path, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(tmp_path))
    pkg = _fake_package(tmp_path, "fakebench_all")
    found, errors = harness.discover(pkg)
    assert not errors
    assert set(found) == {"a_good", "a_exits", "a_raises", "b_argparse", "c_crash", "d_silent", "e_last"}
    md = tmp_path / "bench.md"
    rc = harness.main(["all", "--markdown", str(md)], package=pkg)
    out = capsys.readouterr().out
    assert rc == 1  # failures are recorded and reported in the exit status ...
    # ... but every benchmark ran, in order, the ones after the failures included
    assert "BENCH name=a_good " in out and "BENCH name=e_last " in out and "BENCH name=b_script " in out
    for failed in ("a_exits", "a_raises", "c_crash", "d_silent"):
        assert f"BENCH name={failed} error=" in out
    assert "BENCH name=c_partial " in out  # lines printed before a crash are kept
    table = md.read_text()
    assert table.startswith("Machine: ") and harness.md_header() in table
    rows = [ln for ln in table.splitlines() if ln.startswith("| ") and not ln.startswith("| benchmark")]
    names = [r.split("|")[1].strip() for r in rows]
    assert names == ["a_exits", "a_good", "a_raises", "b_script", "c_partial", "c_crash", "d_silent", "e_last"]
    assert "**failed**" in rows[names.index("a_exits")] and "SystemExit" in rows[names.index("a_exits")]
    assert "status 5" in rows[names.index("c_crash")] and "no BENCH line" in rows[names.index("d_silent")]
    assert "| yes |" in rows[names.index("b_script")]


def test_every_real_benchmark_module_is_discovered():
    import pkgutil

    import benchmarks

    found, errors = harness.discover()
    modules = {i.name[len("bench_"):] for i in pkgutil.iter_modules(benchmarks.__path__) if i.name.startswith("bench_")}
    assert not errors
    assert modules == {topic for topic, _ in found.values()}
    assert "pcfg" in modules
