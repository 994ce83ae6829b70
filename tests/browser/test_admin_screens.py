"""The main admin pages in a real browser: light and dark themes, wide and narrow screens,
times in the viewer's time zone. Saves the screenshots shown in the README."""

from __future__ import annotations

import pytest

from tests.browser.seed import seed_cluster

pytestmark = pytest.mark.django_db(transaction=True)

NARROW = (390, 844)


def shoot(driver, directory, name):
    path = directory / f"{name}.png"
    driver.save_screenshot(str(path))
    assert path.stat().st_size > 10_000, f"{name}: the screenshot looks empty"
    return path


def localized(driver):
    """Times left for the browser to show in its own zone (none once the script ran)."""
    from selenium.webdriver.common.by import By

    return not driver.find_elements(By.CSS_SELECTOR, "time[data-dsched-local]")


def no_sideways_scroll(driver):
    return driver.execute_script(
        "return document.documentElement.scrollWidth <= window.innerWidth + 1"
    )


def test_main_pages(logged_in, wait, live_server, screenshots, settings):
    from selenium.webdriver.common.by import By

    # The seeded leader's heartbeat stays live however long a loaded machine takes to reach
    # the cluster page (the tests' lease is 3 s).
    settings.DSCHED_LEASE_SECONDS = 600.0
    browser = logged_in
    schedules = seed_cluster()
    browser.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": "Europe/Brussels"})
    # More room for the pages themselves: the admin's navigation sidebar folded.
    browser.execute_script("localStorage.setItem('django.admin.navSidebarIsOpen', 'false')")
    base = f"{live_server.url}/admin/dsched"

    # The change list: frequency in words, times in the viewer's zone, badges, failures.
    browser.get(f"{base}/schedule/")
    wait(localized, "local times")
    table = browser.find_element(By.ID, "result_list").text
    assert "At 09:00, Monday through Friday (Europe/Brussels)" in table
    assert "every 15 minutes" in table
    for state in ("active", "paused", "cancelled", "completed"):
        assert state in table
    failed = browser.find_element(By.CSS_SELECTOR, "#result_list a.dsched-badge.dsched-bad")
    assert failed.text == "1 dead"
    # Each schedule's times on its own zone's clock (UTC beside a zoned one's), never the
    # viewer's: the Brussels cron's in CET or CEST, the UTC schedules' in UTC.
    shown = [t.text for t in browser.find_elements(By.CSS_SELECTOR, "#result_list time")]
    assert any("CET" in t or "CEST" in t for t in shown), shown
    assert any(t.endswith(" UTC") for t in shown), shown
    shoot(browser, screenshots, "changelist")

    # The schedule's page: buttons, preview, recent events and deliveries.
    browser.get(f"{base}/schedule/{schedules['heartbeat'].pk}/change/")
    wait(localized, "local times")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#dsched-preview li")) == 10
    browser.execute_script(
        "document.getElementById('dsched-preview').scrollIntoView({block: 'start'})"
    )
    shoot(browser, screenshots, "change-form-preview")
    browser.execute_script("window.scrollTo(0, 0)")
    shoot(browser, screenshots, "change-form")

    # A confirmation page.
    browser.find_element(By.CSS_SELECTOR, "a.dsched-tool-pause").click()
    wait(lambda d: d.find_elements(By.NAME, "reason"), "the pause confirmation")
    shoot(browser, screenshots, "pause-confirmation")

    # The cluster page, reached from the index.
    browser.get(f"{live_server.url}/admin/")
    browser.find_element(By.CSS_SELECTOR, "a[href$='/admin/dsched/schedulerinstance/']").click()
    wait(lambda d: d.find_elements(By.ID, "dsched-leader"), "the cluster page")
    leader = browser.find_element(By.ID, "dsched-leader").text
    assert "scheduler-1" in leader
    assert "leading" in leader
    assert "scheduler-3" in browser.find_element(By.ID, "dsched-instances").text
    shoot(browser, screenshots, "cluster")

    # Dark mode (the admin's theme switch keeps its choice in localStorage).
    browser.execute_script("localStorage.setItem('theme', 'dark')")
    browser.get(f"{base}/schedule/")
    wait(localized, "local times")
    background = browser.execute_script("return getComputedStyle(document.body).backgroundColor")
    red, green, blue = (int(v) for v in background[background.index("(") + 1 : -1].split(",")[:3])
    assert red + green + blue < 3 * 80, background
    shoot(browser, screenshots, "changelist-dark")
    browser.get(f"{base}/schedulerinstance/")
    wait(lambda d: d.find_elements(By.ID, "dsched-leader"), "the cluster page")
    shoot(browser, screenshots, "cluster-dark")
    browser.execute_script("localStorage.setItem('theme', 'light')")

    # A narrow screen: nothing needs sideways scrolling of the whole page.
    browser.set_window_size(*NARROW)
    for name, url in (
        ("changelist-narrow", f"{base}/schedule/"),
        ("change-form-narrow", f"{base}/schedule/{schedules['nightly-report'].pk}/change/"),
        ("cluster-narrow", f"{base}/schedulerinstance/"),
    ):
        browser.get(url)
        wait(localized, "local times")
        assert no_sideways_scroll(browser), name
        shoot(browser, screenshots, name)
