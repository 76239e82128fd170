"""Issue 26 §2: a training-seed replica is a recipe option (NAME-s<seed>), not a script under results/."""
import pytest

from interplab.zoo.registry import get_recipe, list_organisms


def test_a_seed_variant_is_the_recipe_with_only_its_seed_changed():
    base, v = get_recipe("pcfg-sib-L4"), get_recipe("zoo:pcfg-sib-L4-s2")
    assert (v.name, v.seed) == ("pcfg-sib-L4-s2", 2) and v.description.endswith("(training seed 2)")
    for f in ("arch", "data", "steps", "train", "family", "parent"):
        assert getattr(v, f) == getattr(base, f), f
    assert "pcfg-sib-L4-s2" not in {r.name for r in list_organisms()}   # resolvable, not listed


def test_no_code_under_results():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "results"
    assert not list(root.rglob("*.py")), "results/ holds committed outputs only"


def test_an_unknown_base_is_still_an_unknown_organism():
    from interplab.core.errors import ModelNotFoundError

    with pytest.raises(ModelNotFoundError, match="unknown zoo organism 'no-such-s1'"):
        get_recipe("no-such-s1")


def test_validation_organisms_come_from_the_method_declarations(tmp_path):
    from interplab.core.errors import ConfigError
    from interplab.zoo.validation import validation_kinds, validation_organism

    assert validation_kinds() == ["truth", "decodeshare", "crh"]
    with pytest.raises(ConfigError, match="declares no validation organism"):
        validation_organism("pcfg", tmp_path / "x")
    p = validation_organism("crh", tmp_path / "crh")
    stamp = (p / "planted_truth.json").stat().st_mtime_ns
    assert validation_organism("crh", tmp_path / "crh") == p                     # a finished build is reused
    assert (p / "planted_truth.json").stat().st_mtime_ns == stamp
