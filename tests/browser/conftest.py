"""A real headless Chromium (Debian's chromium + chromium-driver) driven by Selenium.

Without the browser these tests skip, loudly; under CI=true they fail instead. Screenshots
go to a temporary directory, or to ``$ADMIN_SCREENSHOTS`` when set (the README's are made
with ``ADMIN_SCREENSHOTS=docs/screenshots``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
WAIT_SECONDS = 15


def _missing() -> str:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "the selenium package (pip install -e . --group test)"
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.access(path, os.X_OK):
            return f"{path} (apt-get install chromium chromium-driver)"
    return ""


@pytest.fixture(scope="session")
def browser_available() -> None:
    missing = _missing()
    if not missing:
        return
    message = f"browser tests need {missing}"
    if os.environ.get("CI") == "true":
        pytest.fail(message + " (CI=true: not skipping)")
    pytest.skip("!! SKIPPED: " + message)


@pytest.fixture
def browser(browser_available: None) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="dsched-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--lang=en-US",
        "--window-size=1280,900",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(argument)
    # The page's console, for tests that check it has no errors (driver.get_log("browser")).
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.implicitly_wait(0)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture
def wait(browser: Any) -> Callable[..., Any]:
    """``wait(condition, what)``: poll the page until ``condition(driver)`` is truthy (bounded)."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    def until(condition: Callable[[Any], Any], what: str = "the page") -> Any:
        # Elements of the page being left go stale while the next one loads: poll on.
        return WebDriverWait(
            browser,
            WAIT_SECONDS,
            poll_frequency=0.05,
            ignored_exceptions=(NoSuchElementException, StaleElementReferenceException),
        ).until(condition, message=f"timed out after {WAIT_SECONDS}s waiting for {what}")

    return until


@pytest.fixture
def screenshots() -> Path:
    target = os.environ.get("ADMIN_SCREENSHOTS")
    path = Path(target) if target else Path(tempfile.mkdtemp(prefix="dsched-screenshots-"))
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture
def logged_in(browser: Any, wait: Callable[..., Any], live_server: Any) -> Any:
    """A superuser logged in through the real login form; returns the driver."""
    from selenium.webdriver.common.by import By

    User.objects.create_superuser("admin", "admin@example.com", "admin-pw")
    browser.get(f"{live_server.url}/admin/login/?next=/admin/")
    browser.find_element(By.NAME, "username").send_keys("admin")
    browser.find_element(By.NAME, "password").send_keys("admin-pw")
    browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    wait(lambda d: d.find_elements(By.ID, "user-tools"), "the admin index after login")
    return browser
