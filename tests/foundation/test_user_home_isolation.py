"""Issue 24 §4: no test reads the user's own interplab state. conftest.py points INTERPLAB_HOME at one empty
temporary folder for the whole session, whatever the user had; a child pytest started with a populated home (as
`$INTERPLAB_HOME` and as `~/.interplab`) still sees only the session's folder."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from interplab.models.zoo_dirs import interplab_home

ROOT = Path(__file__).resolve().parents[2]


def test_home_is_the_session_home():
    home = interplab_home()
    assert str(home) == os.environ["INTERPLAB_SESSION_HOME"]
    assert home.resolve().is_relative_to(Path(tempfile.gettempdir()).resolve())
    assert home != Path.home() / ".interplab"
    populated = os.environ.get("INTERPLAB_TEST_POPULATED_HOME")
    if populated:   # the child run below: nothing of the populated home is visible
        from interplab.results.runs import list_runs

        assert home != Path(populated)
        assert list_runs().empty, list_runs()   # neither populated home's validate-crh run is listed


def test_a_populated_user_home_changes_nothing(tmp_path):
    from interplab.results.runs import new_run

    fake_home = tmp_path / "user"
    for root in (fake_home / ".interplab", tmp_path / "explicit_home"):
        with new_run("validate-crh", {"x": 1}, root=root) as run:
            run.save_json("validation", {"rows": list(range(12))})
    env = {**os.environ, "HOME": str(fake_home), "INTERPLAB_HOME": str(tmp_path / "explicit_home"),
           "INTERPLAB_TEST_POPULATED_HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          f"{Path(__file__).relative_to(ROOT)}::test_home_is_the_session_home",
                          "tests/crh/test_app_page.py::test_crh_page_synthetic"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "2 passed" in out.stdout, out.stdout[-2000:]
