"""The admin at a laptop's width (1400 px), in a real browser: the change lists fit without
sideways scrolling, every page writes a time the same way, the add form shows no internal
values, and the schedule list says which messages are retrying or dead, one click from
their errors."""

from __future__ import annotations

import re

import pytest

from django_dsched.enums import DeliveryStatus
from django_dsched.models import OutboxMessage
from tests.browser.seed import seed_cluster
from tests.browser.test_admin_screens import localized, shoot

pytestmark = pytest.mark.django_db(transaction=True)

LAPTOP = (1400, 900)
# The one way a time is written (localtime.js, in the viewer's zone): 2026-11-27 03:14:00 CET.
TIME = re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} \S+$")
# Django's default, which the history pages used to show: "Nov. 27, 2026, 3:14 a.m.".
DJANGO_TIME = re.compile(r"\b[A-Z][a-z]{2}\.? \d{1,2}, \d{4}, \d{1,2}(:\d{2})? [ap]\.m\.")


def results_fit(driver):
    """The change list's table needs no sideways scrolling, nor does the page."""
    return driver.execute_script(
        "const r = document.querySelector('#changelist .results');"
        "return document.documentElement.scrollWidth <= window.innerWidth + 1"
        " && (!r || r.scrollWidth <= r.clientWidth + 1);"
    )


def shoot_whole(driver, directory, name):
    """A screenshot of the whole page at the laptop's width (the window made as tall)."""
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(LAPTOP[0], height + 140)  # the window's frame
    try:
        return shoot(driver, directory, name)
    finally:
        driver.set_window_size(*LAPTOP)


def times_shown(driver):
    from selenium.webdriver.common.by import By

    return [t.text for t in driver.find_elements(By.CSS_SELECTOR, "time") if t.text]


def test_the_admin_at_1400_px(logged_in, wait, live_server, screenshots):
    from selenium.webdriver.common.by import By

    browser = logged_in
    schedules = seed_cluster()
    # A message being retried beside the dead letter of the seed.
    OutboxMessage.objects.filter(aggregate_id=schedules["cleanup"].pk).update(
        attempts=2, last_error="Timeout after 10 s from https://hooks.example.com/ops"
    )
    browser.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": "Europe/Brussels"})
    browser.set_window_size(*LAPTOP)
    base = f"{live_server.url}/admin/dsched"

    # The schedule list fits (the navigation sidebar open, as it is by default).
    browser.get(f"{base}/schedule/")
    wait(localized, "local times")
    shoot(browser, screenshots, "fit-changelist")
    assert results_fit(browser), "the schedule list scrolls sideways at 1400 px"

    # Deliveries: what is retrying and what is dead, the dead letters one click from
    # their errors.
    row = browser.find_element(By.XPATH, "//tr[.//a[text()='heartbeat']]")
    dead = row.find_element(By.CSS_SELECTOR, "a.dsched-deliveries-dead")
    assert dead.text == "1 dead"
    retrying = browser.find_element(By.XPATH, "//tr[.//a[text()='cleanup']]").find_element(
        By.CSS_SELECTOR, "a.dsched-deliveries-retrying"
    )
    assert retrying.text == "2 retrying"  # its fire and its run now
    dead.click()
    wait(lambda d: "/outboxmessage/" in d.current_url, "the outbox list")
    wait(localized, "local times")
    shoot(browser, screenshots, "fit-outbox-dead")
    assert results_fit(browser), "the outbox list scrolls sideways at 1400 px"
    table = browser.find_element(By.ID, "result_list").text
    assert "HTTP 503 from https://hooks.example.com/ops" in table  # the error, in the list
    assert "ops.ping" in table and "ops.cleanup" not in table

    # The outbox list unfiltered fits too.
    browser.get(f"{base}/outboxmessage/")
    wait(localized, "local times")
    shoot(browser, screenshots, "fit-outbox")
    assert results_fit(browser), "the outbox list scrolls sideways at 1400 px"
    assert "Timeout after 10 s" in browser.find_element(By.ID, "result_list").text

    # Every page writes a time the same way, the events list included.
    for name, url in (
        ("fit-events", f"{base}/event/"),
        ("fit-event", f"{base}/event/{schedules['heartbeat'].pk}/change/"),
        ("fit-message", None),
        ("fit-schedule", f"{base}/schedule/{schedules['heartbeat'].pk}/change/"),
        ("fit-leases", f"{base}/lease/"),
    ):
        if name == "fit-event":
            event = (
                OutboxMessage.objects.filter(aggregate_id=schedules["heartbeat"].pk)
                .values_list("id", flat=True)
                .first()
            )
            url = f"{base}/event/{event}/change/"
        if name == "fit-message":
            message = OutboxMessage.objects.filter(status=DeliveryStatus.DELIVERY_FAILED).first()
            assert message is not None
            url = f"{base}/outboxmessage/{message.pk}/change/"
        browser.get(url)
        wait(localized, "local times")
        shoot_whole(browser, screenshots, name)
        text = browser.find_element(By.ID, "content").text
        assert not DJANGO_TIME.search(text), (name, DJANGO_TIME.search(text))
        shown = times_shown(browser)
        assert shown, name
        assert all(TIME.match(t) for t in shown), (name, shown)

    # The add form: no internal value where a time will be.
    browser.get(f"{base}/schedule/add/")
    wait(lambda d: d.find_elements(By.NAME, "schedule_name"), "the add form")
    shoot_whole(browser, screenshots, "fit-add")
    page = browser.find_element(By.ID, "content").text
    assert "DatabaseDefault" not in page and "object at 0x" not in page
