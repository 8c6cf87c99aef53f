"""The per-instance MLflow traces in a real browser: headless Chromium + chromedriver via Selenium.

An offline job logs its traces into a fresh store; ``mlflow ui`` serves it on
loopback; the browser opens the experiment's Traces view, opens one instance's
trace, and checks that the instance's question and a nugget label are on the
page. The screenshots are saved under the test's tmp dir and named in the log.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from cts import tracking

REPO = Path(__file__).resolve().parents[1]
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--window-size=1600,1100")
log = logging.getLogger(__name__)


def _browser_paths() -> tuple[str, str] | None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (chromium, driver) if chromium and driver else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture()
def mlflow_ui(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """An offline job's store served by ``mlflow ui`` on 127.0.0.1; yields (base url, store uri)."""
    uri = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    tracking.prepare_store(uri)
    env = {**os.environ, "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"}
    subprocess.run([sys.executable, str(REPO / "run.py"), "experiment=offline", "limit=4", "k=2",
                    "tracking.instance_traces=true", f"tracking.uri={uri}", f"hydra.run.dir={tmp_path / 'job'}"],
                   check=True, capture_output=True, cwd=tmp_path, env=env, timeout=600)
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri, "--host",
                               "127.0.0.1", "--port", str(port)], stdout=(tmp_path / "ui.log").open("w"),
                              stderr=subprocess.STDOUT, start_new_session=True, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(base, server, timeout_s=240)
        yield base, uri
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # the server's own session: it and its workers, nothing else
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(10)


def _wait_healthy(base: str, server: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"mlflow ui exited with {server.returncode}")
        try:
            with urllib.request.urlopen(f"{base}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"mlflow ui at {base} not healthy after {timeout_s} s")


def _driver(profile: Path, paths: tuple[str, str]):  # noqa: ANN202 - selenium's WebDriver
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = paths[0]
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(paths[1]), options=options)  # no driver download: Debian's


@pytest.mark.slow
def test_trace_of_an_instance_in_the_mlflow_ui(mlflow_ui: tuple[str, str], tmp_path: Path) -> None:
    paths = _browser_paths()
    if paths is None:
        pytest.skip("chromium and chromedriver are not installed (.ci/run installs them)")
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    base, uri = mlflow_ui
    record = json.loads((tmp_path / "job" / "records.jsonl").read_text().splitlines()[0])
    question, (nugget, label) = record["questions"][0], next(iter(record["clarified"]["labels"].items()))
    experiment = tracking.experiment_id(uri, "cts")
    driver = _driver(tmp_path / "chromium-profile", paths)
    try:
        driver.get(f"{base}/#/experiments/{experiment}/traces")
        wait = WebDriverWait(driver, 120, poll_frequency=0.5)
        cell = wait.until(lambda d: d.find_element(By.XPATH, f"//*[contains(text(), '{record['id']}')]"))
        _shot(driver, tmp_path / "traces_list.png")
        driver.execute_script("arguments[0].click();", cell)  # a hover card may cover the cell
        wait.until(lambda d: "clarify" in d.find_element(By.TAG_NAME, "body").text)  # the trace's span tree
        page = driver.find_element(By.TAG_NAME, "body").text
        _shot(driver, tmp_path / "trace.png")
    finally:
        driver.quit()
    assert question in page
    assert f'"{nugget}": "{label}"' in page or f"{nugget}: {label}" in page  # JSON or YAML view


def _shot(driver, path: Path) -> None:  # noqa: ANN001 - selenium's WebDriver
    driver.save_screenshot(str(path))
    print(f"screenshot: {path}")  # shown in the CI log (pytest -rA / on failure)
    log.info("screenshot: %s", path)
