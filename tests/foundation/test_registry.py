"""Experiment registry: discovery, typed --set parsing, run_experiment's run lifecycle."""
from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Optional

import pytest

from interplab.core.errors import ConfigError
from interplab.experiments import registry as reg
from interplab.results import list_runs, load_run


@dataclass
class DemoCfg:
    n: int = 3
    rate: float = 0.5
    flag: bool = False
    name: str = "x"
    layers: list[int] = field(default_factory=lambda: [0, 1])
    mode: Literal["a", "b"] = "a"
    limit: Optional[int] = None
    out: Path = Path(".")
    crash: bool = False


seen_threads: list[int] = []


@pytest.fixture
def demo():
    calls = []
    seen_threads.clear()

    @reg.register_experiment("test-demo", config=DemoCfg, help="a demo   experiment\n for tests")
    def demo_fn(cfg, run):
        import torch

        calls.append(cfg)
        seen_threads.append(torch.get_num_threads())
        run.save_json("cfg", {"n": cfg.n, "layers": cfg.layers})
        if cfg.crash:
            raise RuntimeError("planned crash")

    yield calls
    reg._REGISTRY.pop("test-demo", None)


def test_discovery_finds_builtin_and_skips_registry():
    names = [e.name for e in reg.list_experiments()]
    assert "next-token" in names
    assert reg.get_experiment("next-token").module == "interplab.experiments.models"


def test_build_config_parses_by_field_type():
    cfg = reg.build_config(DemoCfg, {"n": "7", "rate": "1e-3", "flag": "yes", "name": "42", "layers": "1,2,3",
                                     "mode": "b", "limit": "none", "out": "~/r"})
    assert cfg.n == 7 and cfg.rate == 1e-3 and cfg.flag is True and cfg.name == "42"
    assert cfg.layers == [1, 2, 3] and cfg.mode == "b" and cfg.limit is None and cfg.out == Path.home() / "r"
    assert reg.build_config(DemoCfg, {"layers": "[4, 5]", "limit": "9"}).layers == [4, 5]
    assert reg.build_config(DemoCfg, {"limit": "9"}).limit == 9
    assert reg.build_config(DemoCfg, {"n": 4}).n == 4  # already-typed values pass through
    for bad, msg in [({"n": "1.5"}, "not an integer"), ({"flag": "maybe"}, "boolean"),
                     ({"mode": "c"}, "not one of"), ({"layers": "1,x"}, "not an integer"),
                     ({"nope": "1"}, "valid keys: n (int, default 3)")]:
        with pytest.raises(ConfigError, match=re.escape(msg)):
            reg.build_config(DemoCfg, bad)  # noqa: PT012


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclass
class ListCfg:
    alphas: list[float] = field(default_factory=lambda: [0.0, 0.25])
    layers: list[int] = field(default_factory=lambda: [1])
    tasks: list[str] = field(default_factory=lambda: ["a"])
    pair: tuple[int, float] = (1, 0.5)
    ks: tuple[int, ...] = (1, 2)
    maybe: Optional[list[int]] = None
    limit: int | None = None
    mode: Literal["x", "y"] = "x"
    modes: list[Literal["x", "y"]] = field(default_factory=lambda: ["x"])
    color: Color = Color.RED
    colors: list[Color] = field(default_factory=lambda: [Color.RED])


@pytest.mark.parametrize("key, text, want", [
    ("alphas", "0,0.25,1e-3", [0.0, 0.25, 1e-3]), ("alphas", "[0, 0.5]", [0.0, 0.5]), ("alphas", "", []),
    ("alphas", "2", [2.0]), ("layers", "1, 2 ,3", [1, 2, 3]), ("layers", "[4,5]", [4, 5]),
    ("tasks", "copy,reverse", ["copy", "reverse"]), ("tasks", "[copy, reverse]", ["copy", "reverse"]),
    ("tasks", '["a,b", "c"]', ["a,b", "c"]), ("pair", "3,0.25", (3, 0.25)), ("ks", "4,5,6", (4, 5, 6)),
    ("maybe", "none", None), ("maybe", "7,8", [7, 8]), ("limit", "null", None), ("limit", "9", 9),
    ("mode", "y", "y"), ("modes", "y,x", ["y", "x"]), ("color", "blue", Color.BLUE), ("color", "BLUE", Color.BLUE),
    ("color", "Blue", Color.BLUE), ("colors", "red,BLUE", [Color.RED, Color.BLUE]),
])
def test_set_parses_lists_tuples_optionals_literals_enums(key, text, want):
    got = getattr(reg.build_config(ListCfg, reg.parse_overrides([f"{key}={text}"])), key)
    assert got == want and type(got) is type(want)


@pytest.mark.parametrize("key, text, expected", [
    ("alphas", "0,x", "alphas: expected list[float]"), ("layers", "1,2.5", "layers: expected list[int]"),
    ("layers", "[1,2", "expected list[int]"), ("pair", "1,2,3", "tuple[int, float]"),
    ("maybe", "1,q", "maybe: cannot parse '1,q' as Optional[list[int]]"), ("limit", "abc", "int | None"),
    ("mode", "z", "mode: 'z' is not one of ['x', 'y']"), ("modes", "x,z", "modes: expected list[Literal['x', 'y']]"),
    ("color", "green", "color: 'green' is not one of ['RED', 'BLUE']"), ("colors", "red,green", "list[Color]"),
])
def test_bad_set_values_name_the_field_and_type(key, text, expected):
    with pytest.raises(ConfigError) as e:
        reg.build_config(ListCfg, {key: text})
    assert expected in str(e.value), str(e.value)


def test_parse_overrides():
    assert reg.parse_overrides(["a=1", "b-c=x=y", "e="]) == {"a": "1", "b_c": "x=y", "e": ""}
    with pytest.raises(ConfigError, match="key=value"):
        reg.parse_overrides(["novalue"])


def test_run_experiment_lifecycle(demo, tmp_path):
    path = reg.run_experiment("test-demo", {"n": "5", "layers": "2,3"}, root=tmp_path)
    assert demo[-1].n == 5
    run = load_run(path)
    assert run.config["n"] == 5 and run.config["layers"] == [2, 3] and run.json("cfg") == {"n": 5, "layers": [2, 3]}
    with pytest.raises(RuntimeError, match="planned crash"):
        reg.run_experiment("test-demo", {"crash": "true"}, root=tmp_path)
    df = list_runs("test-demo", root=tmp_path)
    assert list(df["path"]) == [str(path)]  # the crashed run is not listed; the earlier one still loads
    assert load_run(path).json("cfg")["n"] == 5


def test_every_experiment_takes_a_threads_setting(demo, tmp_path):
    """A config without its own `threads` field still runs with a fixed thread count (default 1, or --set
    threads=N), restores the caller's count afterwards and records it in the manifest."""
    import torch

    before = torch.get_num_threads()
    path = reg.run_experiment("test-demo", {"n": "4"}, root=tmp_path)
    assert seen_threads[-1] == 1 and torch.get_num_threads() == before
    assert load_run(path).manifest["runner"] == {"threads": 1}
    path = reg.run_experiment("test-demo", {"threads": "2"}, root=tmp_path)
    assert seen_threads[-1] == 2 and load_run(path).manifest["runner"] == {"threads": 2}
    assert torch.get_num_threads() == before
    for bad in ("0", "-1", "two"):
        with pytest.raises(ConfigError, match="threads"):
            reg.run_experiment("test-demo", {"threads": bad}, root=tmp_path)
    assert len(list_runs("test-demo", root=tmp_path)) == 2  # a refused setting starts no run


def test_registration_errors(demo):
    @dataclass
    class NoDefault:
        x: int

    with pytest.raises(ConfigError, match="missing defaults"):
        reg.register_experiment("bad", config=NoDefault, help="")
    with pytest.raises(ConfigError, match="dataclass"):
        reg.register_experiment("bad", config=dict, help="")
    with pytest.raises(ConfigError, match="registered twice"):
        @reg.register_experiment("test-demo", config=DemoCfg, help="")
        def other(cfg, run):
            pass
    with pytest.raises(ConfigError, match="Did you mean: test-demo"):
        reg.get_experiment("test-dem")
    assert reg.get_experiment("test-demo").help == "a demo experiment for tests"
