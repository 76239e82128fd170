"""AppTest: the "Your data" section of every method page — a file missing a column shows st.error naming it, a
valid file shows its preview; the run button records the file in the run's config."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

import interplab.app  # noqa: E402

PAGES = Path(interplab.app.__file__).resolve().parent / "pages"
TIMEOUT = 180
#: page, data-box key, a valid file's columns, the column left out of the invalid file
CASES = [
    ("2_Truth_Scores.py", "ts_data", {"text": ["w1 w2", "w3"], "label": [1, 0]}, "label"),
    ("3_DecodeShare.py", "ds_data", {"task": ["a"], "prompt": ["w1"], "answer": ["w2"]}, "answer"),
    ("4_CRH.py", "crh_data", {"concept": ["c"], "question": ["q"], "resp_no_concept": ["a"],
                              "resp_with_concept": ["b"]}, "resp_with_concept"),
    ("6_Hyperfitting.py", "geo_data", {"text": ["w1 w2 w3"]}, "text"),
    ("7_SAE_Training.py", "sae_data", {"user": ["w1"], "assistant": ["w2"]}, "assistant"),
]


@pytest.mark.parametrize("page,key,columns,drop", CASES, ids=[c[0] for c in CASES])
def test_data_box_validates_and_previews(page, key, columns, drop, monkeypatch, tmp_path):
    monkeypatch.setenv("INTERPLAB_DEFAULT_MODEL", str(tmp_path / "missing"))
    monkeypatch.setenv("INTERPLAB_HOME", str(tmp_path / "home"))
    if page == "6_Hyperfitting.py":  # hide the shipped organisms: the page then stops at "model not available"
        import importlib

        monkeypatch.setattr(importlib.import_module("interplab.models.zoo_dirs"), "SHIPPED_DIR", tmp_path / "none")
    good, bad = tmp_path / "good.csv", tmp_path / "bad.csv"
    pd.DataFrame(columns).to_csv(good, index=False)
    pd.DataFrame({k: v for k, v in columns.items() if k != drop} or {"other": [1]}).to_csv(bad, index=False)
    at = AppTest.from_file(str(PAGES / page), default_timeout=TIMEOUT).run()
    if page == "4_CRH.py":  # the data box sits in the model section (the page opens on the synthetic organism)
        at.radio(key="crh_source").set_value("Model concepts").run()
    at.text_input(key=f"{key}_path").set_value(str(bad)).run()
    errors = [e.value for e in at.error]
    assert any(f"'{drop}'" in e and "missing column" in e for e in errors), errors
    at.text_input(key=f"{key}_path").set_value(str(good)).run()
    assert not any("missing column" in e.value for e in at.error)
    assert any(len(df.value) == len(next(iter(columns.values()))) for df in at.dataframe)


@pytest.mark.slow
def test_truth_page_run_records_the_data_file(monkeypatch, tmp_path, llama_ckpt):
    monkeypatch.setenv("INTERPLAB_DEFAULT_MODEL", str(llama_ckpt))
    monkeypatch.setenv("INTERPLAB_HOME", str(tmp_path / "home"))
    data = tmp_path / "t.csv"
    pd.DataFrame({"text": [f"w{i} w{i + 1} w{5 + i % 2}" for i in range(20)],
                  "label": [i % 2 for i in range(20)]}).to_csv(data, index=False)
    at = AppTest.from_file(str(PAGES / "2_Truth_Scores.py"), default_timeout=TIMEOUT).run()
    at.text_input(key="ts_data_path").set_value(str(data)).run()
    at.button(key="ts_data_run").click().run()
    assert not at.exception, at.exception
    assert any("Run saved" in s.value for s in at.success), [e.value for e in at.error]
    cfgs = list((tmp_path / "home").rglob("config.json"))
    assert len(cfgs) == 1 and str(data) in cfgs[0].read_text()
    assert json.loads(cfgs[0].read_text())
