"""First open of every dashboard page, headless Chromium, time from navigation until Streamlit's script run is over
(issue 15's goal: under 10 s on a 2-core CPU machine), measured two ways:

* `app_first_open_<Page>`: cold, a fresh `interplab app` server per page (nothing imported or cached yet);
* `app_session_open_<Page>`: a newcomer's session, one server, each page opened for the first time in page order
  (what the server already imported and cached for earlier pages is reused).

There is no anchor tool for this; `anchor` is the 10 s budget and `ratio` = budget / measured (>= 1 meets it).
Server start-up is not counted (a researcher starts the server once); the first model load is, when the page's
defaults load one. Prints one BENCH line per page. Needs the system Chromium and Playwright (the dev set-up).

    python -m benchmarks.bench_app_open                                  # the opening model (zoo:toy-chat)
    python -m benchmarks.bench_app_open --model real:smollm2-135m-instruct --session-only

`--model` opens the server on another model (rows are named `app_<kind>_open_<Page>_<model>`); `--session-only`
skips the fresh-server-per-page pass."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

BUDGET_S = 10.0
CHROMIUM = os.environ.get("BROWSER_PATH") or "/usr/bin/chromium"
PAGES_DIR = Path(__file__).resolve().parents[1] / "interplab" / "app" / "pages"


def page_paths() -> list[str]:
    """URL paths of the pages, as Streamlit names them: '' for Home, then file names without the order prefix."""
    names = sorted(PAGES_DIR.glob("*.py"), key=lambda p: int(p.name.split("_", 1)[0]))
    return [""] + [p.stem.split("_", 1)[1] for p in names]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(home: Path, model: str = "") -> tuple[subprocess.Popen, str]:
    port = _free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "WANDB_MODE": "disabled",
           "STREAMLIT_BROWSER_GATHER_USAGE_STATS": "false", "INTERPLAB_HOME": str(home)}
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    proc = subprocess.Popen([sys.executable, "-m", "interplab.cli", "app", "--port", str(port)]
                            + (["--model", model] if model else []),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True,
                            cwd=str(home))
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 180
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url + "/_stcore/health", timeout=2) as r:
                if r.read().strip() == b"ok":
                    return proc, url
        except OSError:
            time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)
    raise RuntimeError("the app server did not start within 180 s")


def _open_seconds(browser, url: str, timeout: float = 300.0) -> float:
    """Seconds from navigation until the script state reads 'notRunning' with no spinner (first time it does)."""
    page = browser.new_page(viewport={"width": 1280, "height": 1600})
    t0 = time.perf_counter()
    page.goto(url, wait_until="domcontentloaded", timeout=int(timeout * 1000))
    while time.perf_counter() - t0 < timeout:
        state = page.locator('[data-testid="stApp"]').first.get_attribute("data-test-script-state")
        if state == "notRunning" and page.locator('.stSpinner, [data-testid="stSkeleton"]').count() == 0:
            t = time.perf_counter() - t0
            page.close()
            return t
        time.sleep(0.1)
    page.close()
    raise RuntimeError(f"{url} was still running after {timeout} s")


def _stop(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=20)


def _report(kind: str, path: str, s: float, model: str = "") -> None:
    extra = "fresh_server_per_page" if kind == "first" else "one_server_pages_in_order"
    tag = ("_" + model.split(":")[-1].replace(".", "").replace("-", "_")) if model else ""
    if model:
        extra += f",model={model}"
    print(f"BENCH name=app_{kind}_open_{path or 'Home'}{tag} ours={s:.2f} anchor={BUDGET_S:.2f} "
          f"ratio={BUDGET_S / s:.2f} goal=<{BUDGET_S:g}s ok={s < BUDGET_S} extra={extra}", flush=True)


def main(argv: list[str] | None = None) -> None:
    import argparse

    from playwright.sync_api import sync_playwright

    ap = argparse.ArgumentParser(description="first open of every dashboard page")
    ap.add_argument("--model", default="", help="model the server opens on (default: the app's own default)")
    ap.add_argument("--session-only", action="store_true", help="skip the fresh-server-per-page pass")
    args = ap.parse_args(argv)

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                    args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        try:
            with tempfile.TemporaryDirectory() as home:
                proc, url = _start(Path(home), args.model)
                try:
                    for path in page_paths():
                        _report("session", path, _open_seconds(browser, f"{url}/{path}"), args.model)
                finally:
                    _stop(proc)
            for path in ([] if args.session_only else page_paths()):
                with tempfile.TemporaryDirectory() as home:
                    proc, url = _start(Path(home), args.model)
                    try:
                        s = _open_seconds(browser, f"{url}/{path}")
                    finally:
                        _stop(proc)
                _report("first", path, s, args.model)
        finally:
            browser.close()


if __name__ == "__main__":
    main()
