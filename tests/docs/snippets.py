"""Extract the ```python blocks of a Markdown file and run them in order in one namespace.

A block is skipped only when the nearest non-blank line above its fence is `<!-- needs: gpu REASON -->` or
`<!-- needs: hub REASON -->`; the reason is required (a skip must say why). Run as a script
(`python tests/docs/snippets.py FILE.md`) it executes the file's blocks and exits non-zero at the first failure,
naming the block's line. `python tests/docs/snippets.py --serve` keeps one interpreter for many files (the test
suite's runner: each file still gets a fresh namespace, its own working directory and INTERPLAB_HOME, but the
imports of torch, transformers and interplab are paid once per pytest worker instead of once per file)."""
from __future__ import annotations

import re
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

NEEDS = re.compile(r"^<!--\s*needs:\s*(gpu|hub)\b\s*(.*?)\s*-->$")
KINDS = ("gpu", "hub")


@dataclass
class Block:
    path: str
    line: int          # 1-based line of the opening fence
    code: str
    needs: str | None  # "gpu" / "hub" when marked
    reason: str


def extract(path: Path) -> list[Block]:
    lines = path.read_text().splitlines()
    blocks, i = [], 0
    while i < len(lines):
        if lines[i].strip() == "```python":
            start = i
            j = i + 1
            while j < len(lines) and lines[j].strip() != "```":
                j += 1
            if j == len(lines):
                raise ValueError(f"{path}:{start + 1}: ```python block is never closed")
            k = start - 1
            while k >= 0 and not lines[k].strip():
                k -= 1
            needs, reason = None, ""
            m = NEEDS.match(lines[k].strip()) if k >= 0 else None
            if m:
                needs, reason = m.group(1), m.group(2)
            blocks.append(Block(str(path), start + 1, "\n".join(lines[start + 1:j]) + "\n", needs, reason))
            i = j + 1
        else:
            i += 1
    return blocks


def run_file(path: Path) -> int:
    import types

    mod = types.ModuleType("__snippet__")       # a real module, so dataclasses defined in a snippet work
    sys.modules[mod.__name__] = mod
    ns = mod.__dict__
    ran = skipped = 0
    for b in extract(path):
        if b.needs:
            print(f"skip {path.name}:{b.line} (needs {b.needs}: {b.reason})")
            skipped += 1
            continue
        try:
            exec(compile(b.code, f"{path.name}:{b.line}", "exec"), ns)
        except BaseException:
            print(f"FAILED {path}:{b.line}\n{b.code}", file=sys.stderr)
            traceback.print_exc()
            return 1
        ran += 1
    print(f"ok {path.name}: {ran} block(s) ran, {skipped} skipped")
    return 0


def serve() -> None:
    """Read one JSON request per line from stdin ({"path", "cwd", "env"}), run that file's blocks in `cwd` with
    `env` applied, and answer one JSON line {"rc", "out"} (the file's stdout and stderr) on the real stdout."""
    import contextlib
    import io
    import json
    import os

    # answers go to a private copy of stdout; fd 1 itself becomes stderr, so a subprocess or C code that a snippet
    # starts can never write into the answer channel
    answer = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    for line in sys.stdin:
        req = json.loads(line)
        os.environ.update(req["env"])
        os.chdir(req["cwd"])
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            try:
                rc = run_file(Path(req["path"]).resolve())
            except BaseException:          # a snippet that exits or breaks the runner still gets an answer
                traceback.print_exc()
                rc = 1
        answer.write(json.dumps({"rc": rc, "out": buf.getvalue()}) + "\n")
        answer.flush()


if __name__ == "__main__":
    import torch  # noqa: F401  (doc snippets assume an importable torch)

    if sys.argv[1:] == ["--serve"]:
        serve()
    else:
        sys.exit(run_file(Path(sys.argv[1]).resolve()))
