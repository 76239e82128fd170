"""End to end: `interplab app` serves the dashboard; headless system Chromium (Playwright) renders it."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("BROWSER_PATH") or "/usr/bin/chromium"
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.skipif(not Path(CHROMIUM).is_file(), reason=f"needs the system Chromium at {CHROMIUM} "
                                                            "(apt-get install chromium)"),
]
LAUNCH_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
               "--disable-sync", "--no-first-run"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(url: str, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the app server exited early with status {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/_stcore/health", timeout=2) as r:
                if r.read().strip() == b"ok":
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"the app server did not answer on {url} within {timeout} s")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)  # its own session: the server and anything it started
        proc.wait(timeout=10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)


def test_dashboard_renders_in_headless_chromium(tmp_path):
    pw = pytest.importorskip("playwright.sync_api")
    import numpy as np
    from PIL import Image

    missing = tmp_path / "no-checkpoint-here"  # fast: the page must explain instead of crashing
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "WANDB_MODE": "disabled",
           "STREAMLIT_BROWSER_GATHER_USAGE_STATS": "false"}
    log = open(tmp_path / "server.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "interplab.cli", "app", "--port", str(port), "--model", str(missing)],
                            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                            cwd=str(tmp_path))
    try:
        _wait_healthy(url, proc, timeout=90)
        with pw.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=LAUNCH_ARGS)
            try:
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                page.goto(url, wait_until="domcontentloaded", timeout=60_000)
                page.get_by_text("A mechanistic-interpretability workbench").wait_for(timeout=60_000)
                page.get_by_text("Feature Browser.").first.wait_for(timeout=30_000)
                # the whole script ran: the model given with --model is reported missing, with what to do
                page.get_by_text("is not available").wait_for(timeout=60_000)
                body = page.inner_text("body")
                shot = tmp_path / "home.png"
                page.screenshot(path=str(shot), full_page=True)
            finally:
                browser.close()
    finally:
        _stop(proc)
        log.close()
    assert "interplab" in body and "Truth Scores" in body and "no-checkpoint-here" in body
    assert "Local checkpoint" in body  # the sidebar model picker
    assert proc.poll() is not None  # the server is gone
    img = np.asarray(Image.open(shot).convert("RGB"))
    assert img.shape[0] >= 900 and img.shape[1] == 1280
    colours = np.unique(img.reshape(-1, 3), axis=0)
    assert len(colours) > 50, "screenshot is (nearly) one colour"
    dark = (img.mean(-1) < 128).mean()
    assert 0.001 < dark < 0.9, f"screenshot has implausible ink coverage {dark:.4f}"
