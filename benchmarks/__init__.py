"""interplab benchmarks: `python -m benchmarks.harness NAME|all [--md] [--markdown FILE]`.

Each `bench_*.py` module exposes `BENCHMARKS = {name: callable}` (a callable takes no arguments, measures in this
process, and returns dict(ours=seconds, anchor=seconds, ratio=float, goal=str, ok=bool, extra=dict|str)) or is a
script printing its own BENCH lines, run in its own process (see harness.py)."""
