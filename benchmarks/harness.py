"""Run interplab benchmarks and print one `BENCH ...` line per result.

    python -m benchmarks.harness --list            # what exists
    python -m benchmarks.harness all               # every benchmark, one process
    python -m benchmarks.harness hook_layer        # every benchmark of benchmarks/bench_hook_layer.py
    python -m benchmarks.harness capture_vs_run_with_cache --md   # + a Markdown table row (for BENCHMARKS.md)

A benchmark module is `benchmarks/bench_<topic>.py` with `BENCHMARKS = {name: callable}`. The callable takes no
arguments, does its own set-up, measures ours and the anchor in this same process (use `timeit` below), and returns
`dict(ours=s, anchor=s, ratio=x, goal="...", ok=bool, extra={...})`. The harness prints

    BENCH name=<name> ours=<s> anchor=<s> ratio=<x> goal=<goal> ok=<True/False> extra=<json>

and exits 1 if a benchmark raised or returned a malformed result (ok=False is a measurement, not a failure)."""
from __future__ import annotations

import argparse
import importlib
import json
import os
import pkgutil
import platform
import statistics
import sys
import time
import traceback
from typing import Any, Callable

REQUIRED = ("ours", "anchor", "ratio", "goal", "ok")

__all__ = ["timeit", "discover", "run_one", "bench_line", "md_row", "md_header", "machine", "main"]


def timeit(fn: Callable[[], Any], *, repeat: int = 5, warmup: int = 1, number: int = 1,
           sync: Callable[[], None] | None = None) -> float:
    """Median wall time (s) of `number` calls of fn over `repeat` repeats, after `warmup` untimed calls.
    `sync` (e.g. torch.cuda.synchronize) runs before each clock read."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        if sync:
            sync()
        t = time.perf_counter()
        for _ in range(number):
            fn()
        if sync:
            sync()
        times.append((time.perf_counter() - t) / number)
    return statistics.median(times)


def discover() -> tuple[dict[str, tuple[str, Callable]], dict[str, str]]:
    """{benchmark name: (module topic, callable)} from every benchmarks/bench_*.py, and {module: import error}."""
    import benchmarks as pkg

    found: dict[str, tuple[str, Callable]] = {}
    errors: dict[str, str] = {}
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
        if not info.name.startswith("bench_"):
            continue
        modname = f"{pkg.__name__}.{info.name}"
        try:
            mod = importlib.import_module(modname)
        except Exception as exc:  # noqa: BLE001 - report and keep going
            errors[modname] = f"{type(exc).__name__}: {exc}"
            continue
        table = getattr(mod, "BENCHMARKS", None)
        topic = info.name[len("bench_"):]
        if not isinstance(table, dict):
            if callable(getattr(mod, "main", None)):  # a script that prints its own BENCH lines
                table = {topic: _ScriptBenchmark(mod.main)}
            else:
                errors[modname] = "has no BENCHMARKS = {name: callable} dict (nor a main() printing BENCH lines)"
                continue
        for name, fn in table.items():
            if name in found:
                errors[modname] = f"benchmark {name!r} is also defined in bench_{found[name][0]}.py"
                continue
            found[name] = (topic, fn)
    return found, errors


class _ScriptBenchmark:
    """A bench module without BENCHMARKS whose main() prints `BENCH ...` lines itself; the lines are passed through
    and parsed back so `--md` can tabulate them."""

    def __init__(self, fn: Callable[[], Any]):
        self.fn = fn

    def __call__(self) -> list[tuple[str, dict]]:
        import contextlib
        import io

        buf = io.StringIO()

        class _Tee(io.TextIOBase):
            def write(self, s):
                sys.__stdout__.write(s)
                sys.__stdout__.flush()
                buf.write(s)
                return len(s)

        with contextlib.redirect_stdout(_Tee()):
            self.fn()
        return [parse_bench_line(ln) for ln in buf.getvalue().splitlines() if ln.startswith("BENCH ")]


def parse_bench_line(line: str) -> tuple[str, dict]:
    """`BENCH name=.. ours=.. ...` -> (name, dict); values stay strings except ok (bool)."""
    body = line[len("BENCH "):]
    extra = None
    if " extra=" in body:
        body, extra = body.split(" extra=", 1)
    d: dict[str, Any] = {}
    for tok in body.split():
        if "=" in tok:
            k, v = tok.split("=", 1)
            d[k] = v
    d["ok"] = str(d.get("ok")) == "True"
    d["extra"] = extra if extra is not None else ""
    for k in REQUIRED:
        d.setdefault(k, "?")
    return d.pop("name", "?"), d


def _num(x) -> str:
    if x is None:
        return "nan"
    if isinstance(x, bool):
        return str(x)
    if isinstance(x, (int, float)):
        return f"{x:.4g}"
    return str(x).replace(" ", "_")


def _extra(x) -> str:
    if x is None or x == {}:
        return "{}"
    if isinstance(x, str):
        return x.replace("\n", " ")
    return json.dumps(x, separators=(",", ":"), sort_keys=True, default=str)


def bench_line(name: str, r: dict) -> str:
    goal = str(r["goal"]).replace(" ", "")
    return (f"BENCH name={name} ours={_num(r['ours'])} anchor={_num(r['anchor'])} ratio={_num(r['ratio'])} "
            f"goal={goal} ok={bool(r['ok'])} extra={_extra(r.get('extra'))}")


def md_header() -> str:
    return ("| benchmark | ours (s) | anchor (s) | ratio | goal | ok | extra |\n"
            "|---|---|---|---|---|---|---|")


def md_row(name: str, r: dict) -> str:
    extra = _extra(r.get("extra")).replace("|", "\\|")
    return (f"| {name} | {_num(r['ours'])} | {_num(r['anchor'])} | {_num(r['ratio'])} | {r['goal']} | "
            f"{'yes' if r['ok'] else 'no'} | `{extra}` |")


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    parts = [cpu, f"{os.cpu_count()} logical CPUs", f"Python {platform.python_version()}"]
    try:
        import torch

        parts.append(f"torch {torch.__version__} ({torch.get_num_threads()} threads)")
        if torch.cuda.is_available():
            parts.append(torch.cuda.get_device_name(0))
    except ImportError:
        pass
    try:
        load = os.getloadavg()
        parts.append(f"load avg {load[0]:.1f}")
    except OSError:
        pass
    return ", ".join(parts)


def run_one(name: str, fn: Callable) -> dict:
    r = fn()
    if not isinstance(r, dict):
        raise TypeError(f"benchmark {name!r} returned {type(r).__name__}, expected a dict")
    missing = [k for k in REQUIRED if k not in r]
    if missing:
        raise ValueError(f"benchmark {name!r} result lacks {missing}; needs {REQUIRED} (+ extra)")
    return r


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.harness", description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help="benchmark names, topics (bench_<topic>.py) or 'all'")
    ap.add_argument("--md", action="store_true", help="also print a Markdown table (header + one row per result)")
    ap.add_argument("--list", action="store_true", help="list benchmarks and exit")
    args = ap.parse_args(argv)

    found, errors = discover()
    for mod, err in errors.items():
        print(f"warning: {mod}: {err}", file=sys.stderr)
    if args.list or not args.names:
        for name, (topic, _) in sorted(found.items(), key=lambda kv: (kv[1][0], kv[0])):
            print(f"{name}  (bench_{topic}.py)")
        return 0 if args.list else 2

    selected: list[str] = []
    for n in args.names:
        if n == "all":
            picks = sorted(found, key=lambda k: (found[k][0], k))
        elif n in found:
            picks = [n]
        else:
            picks = sorted(k for k, (topic, _) in found.items() if topic == n or f"bench_{topic}" == n)
        if not picks:
            print(f"error: no benchmark or topic named {n!r}; available: {', '.join(sorted(found)) or 'none'}",
                  file=sys.stderr)
            return 2
        selected += [p for p in picks if p not in selected]

    results: list[tuple[str, dict]] = []
    failed = bool(errors) and "all" in args.names
    for name in selected:
        fn = found[name][1]
        if isinstance(fn, _ScriptBenchmark):
            try:
                results += fn()
            except Exception as exc:  # noqa: BLE001
                traceback.print_exc(file=sys.stderr)
                print(f"BENCH name={name} error={type(exc).__name__}:{str(exc).replace(' ', '_')[:200]}", flush=True)
                failed = True
            continue
        try:
            r = run_one(name, fn)
        except Exception as exc:  # noqa: BLE001 - one broken benchmark must not hide the others
            traceback.print_exc(file=sys.stderr)
            print(f"BENCH name={name} error={type(exc).__name__}:{str(exc).replace(' ', '_')[:200]}", flush=True)
            failed = True
            continue
        print(bench_line(name, r), flush=True)
        results.append((name, r))
    if args.md and results:
        print()
        print(f"Machine: {machine()}")
        print()
        print(md_header())
        for name, r in results:
            print(md_row(name, r))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
