"""Run interplab benchmarks and print one `BENCH ...` line per result.

    python -m benchmarks.harness --list            # what exists
    python -m benchmarks.harness all               # every benchmark; one failing or exiting does not stop the rest
    python -m benchmarks.harness hook_layer        # every benchmark of benchmarks/bench_hook_layer.py
    python -m benchmarks.harness all --markdown out.md   # + the machine and a Markdown table (for BENCHMARKS.md)

A benchmark module is `benchmarks/bench_<topic>.py` of one of two kinds:

* a table: `BENCHMARKS = {name: callable}`. The callable takes no arguments, does its own set-up, measures ours and
  the anchor in this same process (use `timeit` below), and returns
  `dict(ours=s, anchor=s, ratio=x, goal="...", ok=bool, extra={...})`; the harness prints
  `BENCH name=<name> ours=<s> anchor=<s> ratio=<x> goal=<goal> ok=<True/False> extra=<json>`.
* a script (no BENCHMARKS): run as `python -m benchmarks.bench_<topic>` in its own process with no arguments; the
  `BENCH ...` lines it prints are passed through and tabulated. Its name is the topic.

A benchmark that raises, exits, returns a malformed result or (scripts) exits non-zero or prints no BENCH line is
recorded as a failure (a `BENCH name=.. error=..` line and an error row in the table), and the rest still run; the
exit status is then 1 (ok=False is a measurement, not a failure)."""
from __future__ import annotations

import argparse
import ast
import importlib
import json
import os
import pkgutil
import platform
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

REQUIRED = ("ours", "anchor", "ratio", "goal", "ok")

__all__ = ["timeit", "timeit_interleaved", "discover", "run_one", "run_selected", "bench_line",
           "md_row", "md_header", "md_table", "machine", "main"]


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


def timeit_interleaved(ours: Callable[[], Any], anchor: Callable[[], Any], *, repeat: int = 5,
                       warmup: int = 1, sync: Callable[[], None] | None = None) -> dict[str, float]:
    """ours and anchor timed in turn (ours, anchor, ours, ...), so that drifting load on a shared
    machine hits both alike. The medians of wall time ("ours", "anchor") and of this process's CPU
    time ("ours_cpu", "anchor_cpu": with one torch thread, the CPU-seconds each side used, which
    other processes disturb less)."""
    for _ in range(warmup):
        ours()
        anchor()
    times: dict[str, list[float]] = {"ours": [], "anchor": [], "ours_cpu": [], "anchor_cpu": []}
    for _ in range(repeat):
        for key, fn in (("ours", ours), ("anchor", anchor)):
            if sync:
                sync()
            t, c = time.perf_counter(), time.process_time()
            fn()
            if sync:
                sync()
            times[key].append(time.perf_counter() - t)
            times[key + "_cpu"].append(time.process_time() - c)
    return {k: statistics.median(v) for k, v in times.items()}


def discover(package: str = "benchmarks") -> tuple[dict[str, tuple[str, Callable]], dict[str, str]]:
    """{benchmark name: (module topic, callable)} from every `<package>/bench_*.py`, and {module: import error}.

    Script modules (no top-level BENCHMARKS) are not imported here: they run in their own process."""
    pkg = importlib.import_module(package)
    found: dict[str, tuple[str, Callable]] = {}
    errors: dict[str, str] = {}
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
        if not info.name.startswith("bench_"):
            continue
        modname, topic = f"{pkg.__name__}.{info.name}", info.name[len("bench_"):]
        src = Path(pkg.__path__[0]) / f"{info.name}.py"
        if src.is_file() and not _defines_table(src):
            table: dict = {topic: _ScriptBenchmark(modname, Path(pkg.__path__[0]).parent)}
        else:
            try:
                mod = importlib.import_module(modname)
            except BaseException as exc:  # noqa: BLE001 - SystemExit included: report and keep going
                if isinstance(exc, KeyboardInterrupt):
                    raise
                errors[modname] = f"{type(exc).__name__}: {exc}"
                continue
            table = getattr(mod, "BENCHMARKS", None)
            if not isinstance(table, dict):
                errors[modname] = "BENCHMARKS must be a dict {name: callable}"
                continue
        for name, fn in table.items():
            if name in found:
                errors[modname] = f"benchmark {name!r} is also defined in bench_{found[name][0]}.py"
                continue
            found[name] = (topic, fn)
    return found, errors


def _defines_table(src: Path) -> bool:
    """Whether a module assigns BENCHMARKS at top level (read from its source, without importing it)."""
    try:
        tree = ast.parse(src.read_text(encoding="utf-8"))
    except SyntaxError:
        return True  # let the import report it
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) \
            else []
        if any(isinstance(t, ast.Name) and t.id == "BENCHMARKS" for t in targets):
            return True
    return False


class _ScriptBenchmark:
    """A bench module without BENCHMARKS, run as `python -m <module>` with no arguments in its own process (so its
    argparse never sees the harness's arguments, and its exit or crash cannot stop the harness). Its `BENCH` lines
    are passed through and parsed back for the table."""

    def __init__(self, module: str, cwd: Path):
        self.module, self.cwd = module, cwd

    def __call__(self) -> tuple[list[tuple[str, dict]], str | None]:
        """-> (parsed BENCH lines, None or what went wrong)."""
        proc = subprocess.Popen([sys.executable, "-m", self.module], cwd=self.cwd, stdout=subprocess.PIPE,
                                text=True, bufsize=1)
        lines = []
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            if line.startswith("BENCH "):
                lines.append(parse_bench_line(line.rstrip("\n")))
        rc = proc.wait()
        if rc != 0:
            return lines, f"python -m {self.module} exited with status {rc} after {len(lines)} BENCH line(s)"
        return lines, None if lines else f"python -m {self.module} printed no BENCH line"


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
    if "error" in r:
        msg = str(r["error"]).replace("|", "\\|").replace("\n", " ")
        return f"| {name} | - | - | - | - | **failed** | `{msg}` |"
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


def _failure(name: str, exc: BaseException | str) -> tuple[str, dict]:
    msg = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
    print(f"BENCH name={name} error={msg.replace(' ', '_')[:200]}", flush=True)
    return name, {"error": msg}


def run_selected(found: dict[str, tuple[str, Callable]], names: list[str]) -> list[tuple[str, dict]]:
    """Run each named benchmark in turn and return [(name, result)]: a result dict, or {"error": message} for a
    benchmark that raised, exited (SystemExit) or returned a malformed result; the others still run."""
    results: list[tuple[str, dict]] = []
    for name in names:
        fn = found[name][1]
        try:
            if isinstance(fn, _ScriptBenchmark):
                lines, err = fn()
                results += lines
                if err:
                    results.append(_failure(name, err))
                continue
            r = run_one(name, fn)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 - one broken or exiting benchmark must not stop the others
            traceback.print_exc(file=sys.stderr)
            results.append(_failure(name, exc))
            continue
        print(bench_line(name, r), flush=True)
        results.append((name, r))
    return results


def md_table(results: list[tuple[str, dict]]) -> str:
    """The machine line and the Markdown table of `results` (what BENCHMARKS.md holds)."""
    return "\n".join([f"Machine: {machine()}", "", md_header(), *(md_row(n, r) for n, r in results)]) + "\n"


def main(argv: list[str] | None = None, *, package: str = "benchmarks") -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.harness", description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help="benchmark names, topics (bench_<topic>.py) or 'all'")
    ap.add_argument("--md", action="store_true", help="also print the machine and a Markdown table")
    ap.add_argument("--markdown", metavar="FILE", help="write the machine and a Markdown table to FILE")
    ap.add_argument("--list", action="store_true", help="list benchmarks and exit")
    args = ap.parse_args(argv)

    found, errors = discover(package)
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

    results = run_selected(found, selected)
    if "all" in args.names:
        results += [(mod, {"error": f"import failed: {err}"}) for mod, err in errors.items()]
    table = md_table(results)
    if args.md:
        print()
        print(table, end="")
    if args.markdown:
        Path(args.markdown).write_text(table, encoding="utf-8")
    return 1 if any("error" in r for _, r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
