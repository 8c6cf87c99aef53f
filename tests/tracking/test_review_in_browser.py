"""A person labels a nugget in MLflow's trace view, and ``python -m cts.agreement`` reads it back.

Headless Chromium + chromedriver (Debian's) via Selenium against ``mlflow ui`` over two offline
jobs' store (the fixture of :mod:`tests.tracking.test_browser`). ``python -m cts.agreement queue``
tags the sample; the browser filters the traces by the tag, opens the first, and adds a human
feedback ``nugget.n1`` = ``partial`` through the assessments pane, click by click, as
docs/judges.md shows. ``python -m cts.agreement <sweep> --export`` then finds that label.
With ``CTS_DOCS_IMG=<dir>`` the steps' screenshots are written there as small PNGs (docs/img/).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cts import tracking
from tests.prewarmed import run_script
from tests.tracking.test_browser import _browser_paths, _driver, mlflow_ui  # noqa: F401 - the fixture

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def agreement(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"}
    return run_script(["-m", "cts.agreement", *args], cwd=REPO, env=env, timeout=300)


def shot(driver: Any, element: Any, name: str, tmp_path: Path) -> None:
    """The element's screenshot under the test's tmp dir, and a small palette PNG under $CTS_DOCS_IMG."""
    path = tmp_path / f"{name}.png"
    element.screenshot(str(path))
    print(f"screenshot: {path}")
    if docs := os.environ.get("CTS_DOCS_IMG"):
        from PIL import Image

        with Image.open(path) as img:
            img.convert("RGB").quantize(colors=64).save(Path(docs) / f"{name}.png", optimize=True)


def test_a_nugget_label_added_in_the_ui_is_read_back(mlflow_ui: tuple[str, str], tmp_path: Path) -> None:  # noqa: F811
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    base, uri = mlflow_ui
    sweep = tmp_path / "sweep"
    queued = agreement("queue", str(sweep), "--n", "2", "--seed", "0")
    assert queued.returncode == 0 and "tags.cts.review = 'todo'" in queued.stdout, queued.stderr
    experiment = tracking.experiment_id(uri, "cts")
    driver = _driver(tmp_path / "chromium-profile", _browser_paths())  # type: ignore[arg-type]
    driver.set_window_size(1400, 900)
    wait = WebDriverWait(driver, 120, poll_frequency=0.5)

    def click(xpath: str) -> Any:
        element = wait.until(lambda d: d.find_element(By.XPATH, xpath))
        element.click()
        return element

    def body() -> str:
        return driver.find_element(By.TAG_NAME, "body").text

    def dismiss() -> None:  # MLflow's assistant panel and its first-visit hint, when they open
        for xpath in ("//button[@aria-label='Close guidance']", "//button[@aria-label='Close']"):
            for button in driver.find_elements(By.XPATH, xpath):
                driver.execute_script("arguments[0].click();", button)

    try:  # the queue: Filters -> Tag cts.review = todo
        driver.get(f"{base}/#/experiments/{experiment}/traces")
        wait.until(lambda d: '"instance_id": "demo-' in body())
        dismiss()
        click("//button[@aria-label='Filters']")
        click("//button[@aria-label='Filter field']")
        click("//*[@role='option'][normalize-space(.)='Tag']")
        click("//input[@aria-label='Filter key']").send_keys(tracking.REVIEW_TAG)
        click("//input[@aria-label='Filter value']").send_keys("todo")
        dialog = driver.find_element(By.XPATH, "//*[@role='dialog']")
        shot(driver, dialog, "review_filter", tmp_path)
        click("//button[normalize-space(.)='Apply filters']")
        wait.until(lambda d: body().count('"instance_id": "demo-') == 2)
        shot(driver, driver.find_element(By.TAG_NAME, "main"), "review_queue", tmp_path)
        first = driver.find_element(By.XPATH, '//a[contains(., \'"instance_id": "demo-\')]')
        instance = json.loads(first.text)["instance_id"]
        driver.execute_script("arguments[0].click();", first)  # the trace view
        dismiss()
        click("//button[starts-with(@aria-label, 'Assess trace')]")
        click("//button[normalize-space(.)='Add feedback']")
        click("//*[normalize-space(text())='Human feedback']")
        name = click("//input[@placeholder='Enter a feedback name']")
        name.send_keys("nugget.n1", Keys.TAB)
        click("//button[@aria-label='Data Type']")
        click("//*[@role='option'][normalize-space(.)='String']")
        value = click("//*[normalize-space(text())='Value']/following::input[1]")
        value.send_keys(Keys.CONTROL, "a")
        value.send_keys("partial")
        click("//*[normalize-space(text())='Rationale']/following::textarea[1]").send_keys("the year is missing")
        pane = driver.find_element(By.XPATH, "//*[normalize-space(text())='Assessments']/ancestor::div[3]")
        create = driver.find_element(By.XPATH, "//button[normalize-space(.)='Create']")
        driver.execute_script("arguments[0].scrollIntoView({block: 'end'});", create)
        shot(driver, pane, "review_add_feedback", tmp_path)
        create.click()
        wait.until(lambda d: "Feedback (6)" in pane.text)  # the judge's five, and this one
        added = [
            e for e in driver.find_elements(By.XPATH, "//*[normalize-space(text())='nugget.n1']") if e.is_displayed()
        ]
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", added[-1])
        shot(driver, pane, "review_feedback_added", tmp_path)
    finally:
        driver.quit()
    out = tmp_path / "labels.jsonl"
    read = agreement(str(sweep), "--n-resamples", "200", "--no-log", "--export", str(out))
    assert read.returncode == 0, read.stderr[-3000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 1 and rows[0]["instance"] == instance and rows[0]["nugget"] == "n1"
    assert rows[0]["label"] == "partial" and rows[0]["arm"].endswith("-k2") and rows[0]["annotator"]
