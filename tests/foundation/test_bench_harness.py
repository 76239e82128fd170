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
