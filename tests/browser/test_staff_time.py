"""A new user's first day in the admin, in a real browser at 1400 and 390 px (issue 41): a
Sydney month-end schedule reads on Sydney's clock with UTC beside it; names, zones and a
`@periodic` function's long default event type wrap between their parts, never mid-word,
and the lists fit a laptop; ended schedules sort after those that will fire; one cluster
entry on the index; no host box on a single-tenant project."""

from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from django_dsched import api
from django_dsched.changes import on_demand
from django_dsched.enums import ScheduleState
from django_dsched.models import Schedule
from django_dsched.runtime.clock import database_now
from tests.browser.test_admin_fit import LAPTOP, results_fit
from tests.browser.test_admin_screens import NARROW, shoot

pytestmark = pytest.mark.django_db(transaction=True)

SYDNEY = ZoneInfo("Australia/Sydney")
LONG_TYPE = "invoicing.tasks.send_monthly_invoices_for_customer_accounts_receivable"


def seed() -> Schedule:
    invoices = api.create_interval(
        "invoices-acme-corporation-australia-pacific-region",
        every=1,
        unit="MONTHS",
        start=datetime(2026, 12, 31, 9, tzinfo=SYDNEY),
        time_zone="Australia/Sydney",
        topic="billing",
        event_type=LONG_TYPE,
    )
    on_demand.trigger(invoices)  # a message with the long event type in the outbox
    done = api.create_once(
        "welcome-mail", at=database_now() - timedelta(days=3), topic="mail", event_type="welcome"
    )
    Schedule.objects.filter(pk=done.pk).update(state=ScheduleState.COMPLETED, active=False)
    return invoices


def unbroken(driver, word: str) -> bool:
    """Whether every occurrence of ``word`` in the result list sits on one line."""
    return driver.execute_script(
        """
        const word = arguments[0];
        const walker = document.createTreeWalker(
            document.getElementById('result_list'), NodeFilter.SHOW_TEXT);
        let found = 0;
        for (let node = walker.nextNode(); node; node = walker.nextNode()) {
            let at = node.data.indexOf(word);
            while (at >= 0) {
                found += 1;
                const range = document.createRange();
                range.setStart(node, at);
                range.setEnd(node, at + word.length);
                const tops = new Set(Array.from(range.getClientRects(), r => Math.round(r.top)));
                if (tops.size > 1) { return false; }
                at = node.data.indexOf(word, at + 1);
            }
        }
        return found > 0;
        """,
        word,
    )


@pytest.mark.parametrize("size", [LAPTOP, NARROW], ids=["1400px", "390px"])
def test_a_first_day_in_the_admin(logged_in, wait, live_server, screenshots, size):
    from selenium.webdriver.common.by import By

    browser = logged_in
    invoices = seed()
    browser.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": "Europe/Berlin"})
    browser.set_window_size(*size)
    base = f"{live_server.url}/admin/dsched"
    label = f"{size[0]}px"

    # The index: one entry for the cluster.
    browser.get(f"{live_server.url}/admin/")
    index = browser.find_element(By.ID, "content-main").text
    assert "Scheduler instances" in index and "Scheduler leases" not in index

    browser.get(f"{base}/schedule/")
    wait(lambda d: d.find_elements(By.ID, "result_list"), "the schedule list")
    shoot(browser, screenshots, f"staff-time-list-{label}")
    rows = browser.find_elements(By.CSS_SELECTOR, "#result_list tbody tr")
    assert "invoices-acme" in rows[0].text  # it will fire: first
    assert "welcome-mail" in rows[-1].text  # completed: last
    # On Sydney's clock, UTC beside it, whatever the browser's zone.
    assert "2026-12-31 09:00:00 AEDT" in rows[0].text and "2026-12-30 22:00:00 UTC" in rows[0].text
    for word in ("Sydney", "Australia", "invoices", "corporation"):
        assert unbroken(browser, word), (label, word)
    if size == LAPTOP:
        assert results_fit(browser), "the schedule list scrolls sideways at 1400 px"

    browser.get(f"{base}/outboxmessage/")
    wait(lambda d: d.find_elements(By.ID, "result_list"), "the outbox list")
    shoot(browser, screenshots, f"staff-time-outbox-{label}")
    for word in ("invoicing", "monthly", "receivable"):
        assert unbroken(browser, word), (label, word)
    if size == LAPTOP:
        assert results_fit(browser), "the outbox list scrolls sideways at 1400 px"

    browser.get(f"{base}/schedule/{invoices.pk}/change/")
    wait(lambda d: d.find_elements(By.ID, "dsched-preview"), "the schedule's page")
    shoot(browser, screenshots, f"staff-time-schedule-{label}")
    preview = browser.find_element(By.ID, "dsched-preview").text
    for day in ("2026-12-31", "2027-01-31", "2027-02-28", "2027-03-31"):
        assert f"{day} 09:00:00 AE" in preview, (label, day)
    assert browser.find_element(By.NAME, "start_ts_0").get_attribute("value") == "2026-12-31"
    assert browser.find_element(By.NAME, "start_ts_1").get_attribute("value") == "09:00:00"
    assert "Australia/Sydney" in browser.find_element(By.CSS_SELECTOR, ".field-start_ts").text
    # One tenant: no host box in sight (it is in a folded section at the foot).
    assert not browser.find_element(By.NAME, "host_id").is_displayed()
    assert "REST API" not in browser.find_element(By.ID, "content").text  # made in Python
