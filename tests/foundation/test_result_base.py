"""The Result base: every field kind round-trips, folders are replaced atomically, kinds are checked."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pytest
import torch

from interplab.core.errors import ResultsError
from interplab.core.result import Result


@dataclass
class _Cfg:
    a: int = 1
    names: tuple[str, ...] = ("x", "y")


@dataclass
class _Leaf(Result):
    x: np.ndarray
    label: str = "leaf"


@dataclass
class _Everything(Result):
    scores: np.ndarray
    mask: torch.Tensor
    table: pd.DataFrame
    empty: pd.DataFrame
    by_task: dict
    per_seed: list
    leaf: _Leaf
    leaves: dict
    leaf_list: list
    config: _Cfg | None = None
    tasks: tuple[str, ...] = ()
    info: dict = field(default_factory=dict)
    n: int = 0


def _make():
    return _Everything(
        scores=np.arange(6.0).reshape(2, 3), mask=torch.tensor([True, False]), table=pd.DataFrame({"a": [1, 2]}),
        empty=pd.DataFrame(), by_task={"t1": np.zeros(3), "t2": np.ones(2)}, per_seed=[np.ones(2), np.zeros(4)],
        leaf=_Leaf(np.array([1, 2])), leaves={"L0": _Leaf(np.zeros(1)), "L/1": _Leaf(np.ones(2), "b")},
        leaf_list=[_Leaf(np.ones(3))], config=_Cfg(2, ("p",)), tasks=("a", "b"), info={"k": np.float64(0.5)},
        n=np.int64(3))


def test_round_trip_every_field_kind(tmp_path):
    r = _make()
    r.save(tmp_path / "r")
    back = _Everything.load(tmp_path / "r")
    assert np.array_equal(back.scores, r.scores) and torch.equal(back.mask, r.mask)
    pd.testing.assert_frame_equal(back.table, r.table)
    assert back.empty.empty
    assert set(back.by_task) == {"t1", "t2"} and np.array_equal(back.by_task["t2"], np.ones(2))
    assert [a.shape for a in back.per_seed] == [(2,), (4,)]
    assert back.leaves["L/1"].label == "b" and np.array_equal(back.leaf_list[0].x, np.ones(3))
    assert back.config == _Cfg(2, ("p",)) and back.tasks == ("a", "b")
    assert back.info == {"k": 0.5} and back.n == 3
    assert isinstance(Result.load_any(tmp_path / "r"), _Everything)


def test_never_overwrites_silently_and_replaces_atomically(tmp_path):
    _make().save(tmp_path / "r")
    with pytest.raises(ResultsError, match="overwrite=True"):
        _make().save(tmp_path / "r")
    _Leaf(np.zeros(2)).save(tmp_path / "r", overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]  # no temp or old folder left behind
    with pytest.raises(ResultsError, match="not a _Everything"):
        _Everything.load(tmp_path / "r")


def test_a_failed_save_leaves_the_earlier_result(tmp_path, monkeypatch):
    _Leaf(np.array([7])).save(tmp_path / "r")

    class Unsaveable:
        pass

    bad = _Leaf(np.array([1]), label=Unsaveable())
    with pytest.raises(Exception):
        bad.save(tmp_path / "r", overwrite=True)
    assert _Leaf.load(tmp_path / "r").x.tolist() == [7]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]


def test_missing_or_damaged_folder_is_typed(tmp_path):
    with pytest.raises(ResultsError, match="holds no saved result"):
        _Leaf.load(tmp_path)
    (tmp_path / "result.json").write_text("{broken")
    with pytest.raises(Exception, match="damaged"):
        _Leaf.load(tmp_path)


def test_a_saved_result_loads_without_its_class_imported(tmp_path):
    """`Result.load_any` imports the interplab module a result file names (an atlas run on the Runs page read
    "not a known result class" before); a module outside interplab is never imported from a file."""
    import json
    import subprocess
    import sys

    import pandas as pd

    from interplab.probes.next_token import NextTokenResult

    r = NextTokenResult(prompt="a b", tokens=["a", "b"], input_ids=[1, 2], layer=0,
                        top=pd.DataFrame({"rank": [1], "token": ["c"]}), pattern=np.zeros((1, 2, 2)))
    d = r.save(tmp_path / "nt")
    code = ("import sys; from interplab.core.result import Result\n"
            "assert 'interplab.probes.next_token' not in sys.modules\n"
            f"print(type(Result.load_any({str(d)!r})).__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "NextTokenResult", out.stderr[-2000:]
    meta = json.loads((d / "result.json").read_text())
    meta.update(kind="Elsewhere", module="os")
    (d / "result.json").write_text(json.dumps(meta))
    with pytest.raises(ResultsError, match="not a known result class"):
        Result.load_any(d)


def test_a_second_result_class_of_a_taken_name_is_refused():
    """Saved results are found by class name: a second class of the same name (another module) would load the
    first's files, so defining it raises; the same class redefined (a reloaded module) replaces itself."""
    import dataclasses
    import types

    from interplab.core.errors import ResultsError
    from interplab.core.result import Result, result_kinds

    def define(module: str):
        ns = types.new_class("RepeatedKindForTest", (Result,), exec_body=lambda d: d.update(
            {"__module__": module, "__annotations__": {"x": int}}))
        return dataclasses.dataclass(ns)

    first = define("tests.first_module")
    assert result_kinds()["RepeatedKindForTest"] is first
    with pytest.raises(ResultsError, match="is taken by tests.first_module"):
        define("tests.second_module")
    again = define("tests.first_module")
    assert result_kinds()["RepeatedKindForTest"] is again


def test_shipped_results_load_without_importing_their_classes():
    """Every result interplab ships under results/ records its module, so `load_any` finds the class itself (pages
    no longer import result classes just to register them)."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    files = sorted((root / "results").rglob("result.json"))
    assert files and all("module" in json.loads(f.read_text()) for f in files)
    code = ("import sys; from interplab.core.result import Result\n"
            "for d in sys.argv[1:]: print(type(Result.load_any(d)).__name__)")
    out = subprocess.run([sys.executable, "-c", code, *[str(f.parent) for f in files]], capture_output=True,
                         text=True, check=True).stdout.split()
    assert out == [json.loads(f.read_text())["kind"] for f in files]
