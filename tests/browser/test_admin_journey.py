"""A staff member's whole journey in a real browser: log in, create a schedule, see its
preview, pause, resume, run now (the event appears), cancel."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry

from django_dsched.enums import ScheduleState
from django_dsched.models import Event, OutboxMessage, Schedule

pytestmark = pytest.mark.django_db(transaction=True)


def messages_text(driver):
    from selenium.webdriver.common.by import By

    return " ".join(e.text for e in driver.find_elements(By.CSS_SELECTOR, ".messagelist li"))


def confirm(driver, wait):
    """Press "Yes" on the confirmation page (waiting for that page, not the one before)."""
    from selenium.webdriver.common.by import By

    selector = "body.dsched-confirmation input[type=submit].default"
    wait(lambda d: d.find_elements(By.CSS_SELECTOR, selector), "the confirmation page")
    driver.find_element(By.CSS_SELECTOR, selector).click()


def test_create_preview_pause_resume_run_now_cancel(logged_in, wait, live_server):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    browser = logged_in
    # The index links to the schedules; add one.
    browser.find_element(By.CSS_SELECTOR, "a[href$='/admin/dsched/schedule/add/']").click()
    wait(lambda d: d.find_elements(By.NAME, "schedule_name"), "the add form")
    browser.find_element(By.NAME, "schedule_name").send_keys("nightly-report")
    browser.find_element(By.NAME, "frequency_time").send_keys("15")
    Select(browser.find_element(By.NAME, "frequency_unit")).select_by_value("MINUTES")
    browser.find_element(By.NAME, "event_topic").send_keys("reports")
    browser.find_element(By.NAME, "event_type").send_keys("report.build")
    data = browser.find_element(By.NAME, "event_data")
    data.clear()
    data.send_keys('{"format": "pdf"}')
    browser.find_element(By.NAME, "_continue").click()

    # Its page: the summary and the preview, computed by the scheduler's code.
    wait(lambda d: "was added successfully" in messages_text(d), "the saved schedule")
    assert "every 15 minutes" in browser.find_element(By.CLASS_NAME, "dsched-summary").text
    preview = browser.find_elements(By.CSS_SELECTOR, "#dsched-preview .dsched-preview li")
    schedule = Schedule.objects.get(schedule_name="nightly-report")
    assert len(preview) == 10
    assert [li.find_element(By.TAG_NAME, "time").get_attribute("datetime") for li in preview] == [
        t.isoformat() for t in schedule.upcoming(10)
    ]

    # Pause, with a reason, through the confirmation page.
    browser.find_element(By.CSS_SELECTOR, "a.dsched-tool-pause").click()
    wait(lambda d: d.find_elements(By.NAME, "reason"), "the pause confirmation")
    browser.find_element(By.NAME, "reason").send_keys("quarter close")
    confirm(browser, wait)
    wait(lambda d: "1 schedule paused." in messages_text(d), "the pause report")
    assert "Paused: quarter close" in browser.find_element(By.CLASS_NAME, "dsched-summary").text
    assert Schedule.objects.get(pk=schedule.pk).state == ScheduleState.PAUSED

    # Resume: no confirmation needed.
    browser.find_element(By.CSS_SELECTOR, "button.dsched-tool-resume").click()
    wait(lambda d: "1 schedule resumed." in messages_text(d), "the resume report")
    assert Schedule.objects.get(pk=schedule.pk).state == ScheduleState.ACTIVE

    # Run now: confirm; the fire appears in the schedule's recent events.
    browser.find_element(By.CSS_SELECTOR, "a.dsched-tool-run_now").click()
    confirm(browser, wait)
    wait(lambda d: "1 schedule fired once now." in messages_text(d), "the run-now report")
    events = browser.find_element(By.ID, "dsched-events").text
    assert "report.build" in events
    assert "run now" in events
    assert OutboxMessage.objects.filter(aggregate_id=schedule.pk).count() == 1

    # Cancel: confirm; then the page is read-only and offers no state changes.
    browser.find_element(By.CSS_SELECTOR, "a.dsched-tool-cancel").click()
    confirm(browser, wait)
    wait(lambda d: "1 schedule cancelled." in messages_text(d), "the cancel report")
    assert browser.find_element(By.CLASS_NAME, "dsched-summary").text.startswith("cancelled")
    tools = {e.text.lower() for e in browser.find_elements(By.CSS_SELECTOR, ".object-tools li")}
    assert not tools & {"pause", "resume", "run now", "cancel"}
    assert not browser.find_elements(By.NAME, "_save")

    history = list(
        Event.objects.filter(aggregate_id=schedule.pk)
        .order_by("aggregate_version")
        .values_list("event_type", flat=True)
    )
    assert history == [
        "dsched.schedule.created",
        "dsched.schedule.paused",
        "dsched.schedule.resumed",
        "report.build",
        "dsched.schedule.cancelled",
    ]
    assert list(
        LogEntry.objects.filter(object_id=str(schedule.pk))
        .order_by("action_time", "pk")
        .values_list("change_message", flat=True)
    ) == [
        '[{"added": {}}]',
        "Paused: quarter close",
        "Resumed.",
        "Ran now: fired once.",
        "Cancelled.",
    ]
