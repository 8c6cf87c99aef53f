"""Finding the failures in a real browser: headless Chromium + chromedriver via Selenium against ``mlflow ui``.

Two offline jobs (two systems, one multirun) log their traces into a fresh store; ``mlflow ui``
serves it on loopback. The browser opens the first job's traces in compare mode against the
second's, checks the per-instance score columns, sorts by ``delta_vs_orig`` (worst first),
opens the worst instance and checks that its question, answer, rewritten query and a nugget
label are on the page: the README's "find the failures" recipe, click by click. The
screenshots are kept under the test's tmp dir and named in the log.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cts import tracking

REPO = Path(__file__).resolve().parents[2]
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1900,1200",
)
SYSTEMS = ("rules_scope", "rules_region")
SCORE_COLUMNS = ("delta_vs_orig", "restore_score_100", "orig_restore_score_100", "nugget_labels")
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
    """Two offline jobs' store served by ``mlflow ui`` on 127.0.0.1; yields (base url, store uri).

    The server starts first (one worker, no job runner, no network): its start-up overlaps the jobs.
    """
    if _browser_paths() is None:
        pytest.skip("chromium and chromedriver are not installed (.ci/run installs them)")
    uri = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    tracking.prepare_store(uri)
    env = {**os.environ, "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    port = _free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlflow",
            "ui",
            "--backend-store-uri",
            uri,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        stdout=(tmp_path / "ui.log").open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**env, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
    )
    base = f"http://127.0.0.1:{port}"
    try:
        subprocess.run(
            [
                sys.executable,
                str(REPO / "run.py"),
                "-m",
                "experiment=offline",
                f"clarifier={','.join(SYSTEMS)}",
                "k=2",
                "limit=8",
                "sweep_report=false",
                "tracking.instance_traces=true",
                f"tracking.uri={uri}",
                f"hydra.sweep.dir={tmp_path / 'sweep'}",
            ],
            check=True,
            capture_output=True,
            cwd=tmp_path,
            env=env,
            timeout=600,
        )
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


def _job(sweep: Path, system: str) -> tuple[str, dict[str, dict[str, Any]]]:
    """A job's run id and its records by instance id."""
    job = next(p for p in sweep.iterdir() if p.name.endswith(f"clarifier={system}"))
    records = [json.loads(line) for line in (job / "records.jsonl").read_text().splitlines()]
    return json.loads((job / "summary.json").read_text())["run_id"], {r["id"]: r for r in records}


def _delta(record: dict[str, Any]) -> float:
    return record["clarified"]["score"] - record["orig"]["score"]


@pytest.mark.slow
def test_find_the_worst_instance_of_two_systems_in_the_mlflow_ui(mlflow_ui: tuple[str, str], tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    base, uri = mlflow_ui
    (run_a, records), (run_b, _) = (_job(tmp_path / "sweep", s) for s in SYSTEMS)
    experiment = tracking.experiment_id(uri, "cts")
    driver = _driver(tmp_path / "chromium-profile", _browser_paths())  # type: ignore[arg-type]
    wait = WebDriverWait(driver, 90, poll_frequency=0.5)

    def body() -> str:
        return driver.find_element(By.TAG_NAME, "body").text

    def click(xpath: str) -> None:  # a real click: the menus open on pointer events, which a script's click lacks
        wait.until(lambda d: d.find_element(By.XPATH, xpath)).click()

    try:  # the run's traces, compared with the other system's, instance by instance
        driver.get(f"{base}/#/experiments/{experiment}/runs/{run_a}/evaluations?compareToRunUuid={run_b}")
        wait.until(lambda d: len(re.findall(r'"instance_id": "demo-', body())) == len(records))
        header = body()
        before = _order(header)
        _shot(driver, tmp_path / "compare.png")
        click("//button[@data-testid='sort-select-dropdown']")
        click("//*[@role='menuitemcheckbox'][normalize-space(.)='delta_vs_orig']")
        if not driver.find_elements(By.XPATH, "//*[@role='menu']"):
            click("//button[@data-testid='sort-select-dropdown']")
        click("//*[@role='menu']//button[@aria-label='Sort ascending']")
        wait.until(lambda d: _order(body())[0] in _worst(records))
        order = _order(body())
        _shot(driver, tmp_path / "sorted_by_delta.png")
        link = driver.find_element(By.XPATH, f'//a[contains(., \'"instance_id": "{order[0]}"\')]')
        driver.execute_script("arguments[0].click();", link)  # the worst instance: both runs' traces of it
        wait.until(lambda d: "Compared IDs" in body())
        for more in driver.find_elements(
            By.XPATH, "//*[starts-with(normalize-space(text()), 'Show ') and contains(text(), 'more')]"
        ):
            driver.execute_script("arguments[0].click();", more)  # the outputs folded away (questions, answers)
        worst = records[order[0]]
        wait.until(lambda d: worst["questions"][0] in body())
        page = body()
        for title in driver.find_elements(By.XPATH, "//*[normalize-space(text())='rewritten_query']")[:1]:
            driver.execute_script("arguments[0].scrollIntoView({block: 'start'});", title)  # then the labels
        _shot(driver, tmp_path / "worst_instance.png")
    finally:
        driver.quit()
    assert "compare to" in header and f"clarifier={SYSTEMS[1]}" in header  # the other system's traces beside
    assert all(column in header for column in SCORE_COLUMNS)  # per-instance score columns
    by_delta = sorted(_delta(r) for r in records.values())
    assert [_delta(records[i]) for i in order] == by_delta  # sorted by delta, worst first
    assert [_delta(records[i]) for i in before] != by_delta  # ...which the table was not before
    rewritten, (nugget, label) = worst["rewritten_query"], next(iter(worst["clarified"]["labels"].items()))
    assert worst["questions"][0] in page and worst["answers"][0] in page and rewritten in page
    assert f"{nugget}={label}" in page  # the judge's labels of the clarified arm, one line


def _order(page: str) -> list[str]:
    """The instance ids of the traces table, top to bottom (each compared pair is one row)."""
    return list(dict.fromkeys(re.findall(r'"instance_id": "(demo-\d+)"', page)))


def _worst(records: dict[str, dict[str, Any]]) -> set[str]:
    low = min(_delta(r) for r in records.values())
    return {i for i, r in records.items() if _delta(r) == low}


def _shot(driver: Any, path: Path) -> None:
    driver.save_screenshot(str(path))
    print(f"screenshot: {path}")  # shown in the CI log (pytest -rA / on failure)
    log.info("screenshot: %s", path)
