"""interplab.core.record.Record: typed statistic records that stay plain dicts to every existing use (issue 26 §3)."""
from __future__ import annotations

import copy
import json
import pickle

import pandas as pd
import pytest

from interplab.core.errors import ShapeError
from interplab.core.record import Record


class Span(Record):
    """lo, hi; n optionally."""

    KEYS = ("lo", "hi")
    OPTIONAL = ("n",)


def test_missing_key_raises_naming_the_class_and_keys():
    with pytest.raises(ShapeError, match=r"Span: missing keys \['hi'\].*'lo', 'hi'.*'n'"):
        Span(lo=1.0)


def test_unexpected_key_raises():
    with pytest.raises(ShapeError, match=r"unexpected keys \['width'\]"):
        Span(lo=1.0, hi=2.0, width=1.0)


def test_optional_keys_and_dict_constructor_forms():
    assert Span(lo=1, hi=2, n=3)["n"] == 3
    assert Span({"lo": 1, "hi": 2}) == Span([("lo", 1), ("hi", 2)]) == {"lo": 1, "hi": 2}


def test_attribute_access():
    r = Span(lo=0.25, hi=0.75)
    assert r.lo == 0.25 and r.hi == 0.75
    with pytest.raises(AttributeError, match="Span has no key or attribute 'mean'.*'lo', 'hi'"):
        r.mean


def test_repr():
    assert repr(Span(lo=0.5, hi=1)) == "Span(lo=0.5, hi=1)"


def test_json_dump_equals_the_plain_dict_dump():
    r = Span(hi=2.0, lo=1.0, n=3)
    assert json.dumps(r) == json.dumps({"hi": 2.0, "lo": 1.0, "n": 3})
    assert json.dumps(r, sort_keys=True, indent=2) == json.dumps(dict(r), sort_keys=True, indent=2)


def test_pickle_and_copy_keep_the_class():
    r = Span(lo=1.0, hi=2.0)
    for back in [pickle.loads(pickle.dumps(r, protocol=p)) for p in range(pickle.HIGHEST_PROTOCOL + 1)] + [
            copy.copy(r), copy.deepcopy(r)]:
        assert type(back) is Span and back == r and list(back) == ["lo", "hi"]
    r["label"] = "x"                         # a caller's extra key still round-trips
    assert pickle.loads(pickle.dumps(r)) == {"lo": 1.0, "hi": 2.0, "label": "x"}


def test_dataframe_row_equals_the_plain_dict_frame():
    r = Span(lo=1.0, hi=2.0, n=3)
    pd.testing.assert_frame_equal(pd.DataFrame([r]), pd.DataFrame([dict(r)]))
    pd.testing.assert_frame_equal(pd.DataFrame([{"name": "a", **r}]), pd.DataFrame([{"name": "a", **dict(r)}]))


def test_equality_with_a_plain_dict_and_dict_behaviour():
    r = Span(lo=1.0, hi=2.0)
    assert r == {"lo": 1.0, "hi": 2.0} and {"hi": 2.0, "lo": 1.0} == r
    assert isinstance(r, dict) and r.get("n", 0) == 0 and dict(**r) == {"lo": 1.0, "hi": 2.0}


def test_a_result_saves_a_record_as_a_plain_dict():
    from interplab.core.result import _jsonable

    out = _jsonable({"ci": Span(lo=1.0, hi=2.0)}, "f", "Owner")
    assert type(out["ci"]) is dict and out["ci"] == {"lo": 1.0, "hi": 2.0}
