"""Issue 48, "Pages on one skeleton": every page script is at most 200 lines, takes its model's
device, dtype and backend from the sidebar (no page-local literal), and caches through
`interplab.app.compute.cached_compute`.

Checked by parsing each file (ast), one test per file so that a failure names the page; the
checkers are tested on sources that break each rule, so these tests can fail."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

import interplab.app

APP_DIR = Path(interplab.app.__file__).resolve().parent
PAGES = sorted((APP_DIR / "pages").glob("*.py"))
# where page code lives: the page scripts, Home, and the views they delegate to
PAGE_CODE = PAGES + [APP_DIR / "Home.py"] + sorted(p for p in (APP_DIR / "views").glob("*.py"))
MAX_LINES = 200
MODEL_SETTINGS = ("device", "dtype", "backend")
LOADERS = ("get_model", "try_get_model", "require_model", "load_model")
LOADER_ARGS = ("backend", "device", "dtype")      # a loader's positions after the name
CACHES = ("cache_data", "cache_resource")


def _ids(paths) -> list[str]:
    return [p.relative_to(APP_DIR).as_posix() for p in paths]


def _literal(node) -> bool:
    """A value fixed in the source: a constant, or a torch attribute (`torch.float32`)."""
    if isinstance(node, ast.Constant):
        return node.value is not None
    return (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            and node.value.id == "torch")


def _callee(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def hard_coded_model_settings(source: str) -> list[str]:
    """Where `source` fixes a model's device, dtype or backend itself: `device="cpu"` (a keyword
    with a literal), `{"dtype": "float32"}` (a dict entry), a literal in a loader's backend /
    device / dtype position, or a loader called without device and dtype (its defaults, not the
    sidebar's, would decide them)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg in MODEL_SETTINGS and _literal(kw.value):
                    found.append(f"line {node.lineno}: {kw.arg}={ast.unparse(kw.value)}")
            if _callee(node) in LOADERS:
                for pos, arg in enumerate(node.args[1:4], start=1):
                    if _literal(arg):
                        found.append(f"line {node.lineno}: {_callee(node)}(..., "
                                     f"{ast.unparse(arg)}) fixes {LOADER_ARGS[pos - 1]}")
                named = {kw.arg for kw in node.keywords}
                if len(node.args) >= 4:
                    named |= {"device", "dtype"}
                spread = any(kw.arg is None for kw in node.keywords)     # **kwargs: cannot tell
                if not {"device", "dtype"} <= named and not spread:
                    found.append(f"line {node.lineno}: {_callee(node)}() without device and dtype")
        elif isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values):
                if isinstance(k, ast.Constant) and k.value in MODEL_SETTINGS and _literal(v):
                    found.append(f"line {node.lineno}: {{{k.value!r}: {ast.unparse(v)}}}")
    return found


def own_caches(source: str) -> list[str]:
    """Where `source` uses Streamlit's caches itself (`st.cache_data`, `st.cache_resource`)
    instead of the one cached-compute helper."""
    return [f"line {n.lineno}: st.{n.attr}" for n in ast.walk(ast.parse(source))
            if isinstance(n, ast.Attribute) and n.attr in CACHES]


@pytest.mark.parametrize("page", PAGES, ids=_ids(PAGES))
def test_page_is_at_most_200_lines(page):
    n = len(page.read_text(encoding="utf-8").splitlines())
    assert n <= MAX_LINES, (f"{page.name} has {n} lines (at most {MAX_LINES}): move its sections "
                            "to interplab/app/views/")


@pytest.mark.parametrize("path", PAGE_CODE, ids=_ids(PAGE_CODE))
def test_page_takes_device_dtype_backend_from_the_sidebar(path):
    found = hard_coded_model_settings(path.read_text(encoding="utf-8"))
    assert not found, f"{path.name} fixes a model setting the sidebar's PageModel owns: {found}"


@pytest.mark.parametrize("path", PAGE_CODE, ids=_ids(PAGE_CODE))
def test_page_caches_through_cached_compute(path):
    found = own_caches(path.read_text(encoding="utf-8"))
    assert not found, (f"{path.name} caches by itself (use interplab.app.compute.cached_compute): "
                       f"{found}")


def test_the_checkers_find_what_they_look_for():
    bad = ('m = get_model("zoo:toy-chat", backend="bridge")\n'
           'n = require_model(name, "nnsight", "cpu", "float32")\n'
           'o = load_model(name, dtype=torch.float32, device=dev)\n'
           'cfg = {"device": "cpu", "model": name}\n'
           'p = try_get_model(name, backend=b)\n')
    found = hard_coded_model_settings(bad)
    assert any("line 1: backend='bridge'" in f for f in found)
    assert any(f.startswith("line 1:") and "without device and dtype" in f for f in found)
    assert sum(f.startswith("line 2:") for f in found) == 3
    assert any("line 3: dtype=torch.float32" in f for f in found)
    assert any("line 4: {'device': 'cpu'}" in f for f in found)
    assert any(f.startswith("line 5:") and "without device and dtype" in f for f in found)
    good = ('m = picked.load()\nn = state.get_model(name, backend=b, device=d, dtype=t)\n'
            'cfg = {"device": picked.device}\nr = run(backend=picked.backend)\n')
    assert hard_coded_model_settings(good) == []
    own = own_caches("@st.cache_data(max_entries=2)\ndef f():\n    pass\n")
    assert own == ["line 1: st.cache_data"]
    assert own_caches("@cached_compute('...')\ndef f():\n    pass\n") == []
