"""Schedule health's pictures in a real browser: the schedule page's timeline and lag chart
and the cluster page's last hour, with no console error, each outcome in a colour and a
label of its own, readable in dark mode and on a 390 px phone. Saves the screenshots of
docs/observability.md (``ADMIN_SCREENSHOTS=docs/screenshots``)."""

from __future__ import annotations

import pytest

from django_dsched.health.slots import Outcome
from tests.browser.seed import seed_cluster
from tests.browser.test_admin_screens import NARROW, localized, no_sideways_scroll, shoot
from tests.health.test_slots import minutely_with_a_past

pytestmark = pytest.mark.django_db(transaction=True)


def console_errors(driver) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def colours(driver) -> dict[str, str]:
    """Each outcome's legend swatch colour (a missed slot's outline), as the page paints it."""
    return driver.execute_script(
        """
        const found = {};
        for (const rect of document.querySelectorAll('#dsched-timeline .dsched-legend rect')) {
            const style = getComputedStyle(rect);
            const paint = style.fill === 'none' ? style.stroke : style.fill;
            found[rect.getAttribute('class')] = paint;
        }
        return found;
        """
    )


def luminance(colour: str) -> float:
    red, green, blue = (int(v) for v in colour[colour.index("(") + 1 : -1].split(",")[:3])
    return 0.2126 * red + 0.7152 * green + 0.0722 * blue


def background(driver) -> str:
    return driver.execute_script(
        "return getComputedStyle(document.querySelector('#dsched-health')).backgroundColor"
        " === 'rgba(0, 0, 0, 0)' ? getComputedStyle(document.body).backgroundColor"
        " : getComputedStyle(document.querySelector('#dsched-health')).backgroundColor"
    )


def test_the_pictures(logged_in, wait, live_server, screenshots):
    from selenium.webdriver.common.by import By

    browser = logged_in
    seed_cluster()
    schedule, _t0, _now = minutely_with_a_past()
    browser.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": "Europe/Brussels"})
    browser.execute_script("localStorage.setItem('django.admin.navSidebarIsOpen', 'false')")
    browser.get_log("browser")  # what the login left
    base = f"{live_server.url}/admin/dsched"
    page = f"{base}/schedule/{schedule.pk}/change/"

    browser.get(page)
    wait(localized, "local times")
    assert not console_errors(browser)
    panel = browser.find_element(By.ID, "dsched-health")
    legend = [li.text for li in panel.find_elements(By.CSS_SELECTOR, ".dsched-legend li")]
    for value, label in Outcome.choices:
        assert label in legend, value
    light = colours(browser)
    classes = {f"dsched-slot dsched-slot-{o.lower().replace('_', '-')}" for o in Outcome.values}
    assert set(light) == classes
    assert len(set(light.values())) == len(light), light  # a colour each
    marks = panel.find_elements(By.CSS_SELECTOR, "#dsched-timeline svg.dsched-timeline rect")
    shown = {m.get_attribute("class").rsplit("-", 1)[-1] for m in marks}
    assert {"time", "late", "failed", "missed", "skipped"} <= shown
    # The tooltip of a mark says what it was.
    titles = [m.find_element(By.TAG_NAME, "title").get_attribute("textContent") for m in marks]
    assert any("delivery failed" in t and "run: dead" in t for t in titles)
    browser.execute_script("document.getElementById('dsched-health').scrollIntoView()")
    shoot(browser, screenshots, "health-panel")

    # The cluster page's last hour.
    browser.get(f"{base}/schedulerinstance/")
    wait(lambda d: d.find_elements(By.ID, "dsched-activity"), "the cluster page")
    assert not console_errors(browser)
    bars = browser.find_elements(By.CSS_SELECTOR, "#dsched-chart-fires rect.dsched-fires")
    assert len(bars) == 60
    fill = browser.execute_script(
        "return getComputedStyle(document.querySelector('#dsched-chart-fires rect')).fill"
    )
    assert fill not in ("none", "rgba(0, 0, 0, 0)")
    browser.execute_script("document.getElementById('dsched-activity').scrollIntoView()")
    shoot(browser, screenshots, "cluster-activity")

    # Dark mode: other colours, each still apart from the page behind it.
    browser.execute_script("localStorage.setItem('theme', 'dark')")
    browser.get(page)
    wait(localized, "local times")
    dark = colours(browser)
    assert dark != light
    behind = luminance(background(browser))
    assert behind < 80
    for css, colour in dark.items():
        assert abs(luminance(colour) - behind) > 60, (css, colour)
    browser.execute_script("document.getElementById('dsched-health').scrollIntoView()")
    shoot(browser, screenshots, "health-panel-dark")
    browser.get(f"{base}/schedulerinstance/")
    wait(lambda d: d.find_elements(By.ID, "dsched-activity"), "the cluster page")
    browser.execute_script("document.getElementById('dsched-activity').scrollIntoView()")
    shoot(browser, screenshots, "cluster-activity-dark")
    browser.execute_script("localStorage.setItem('theme', 'light')")

    # A phone: nothing scrolls sideways, the charts fit, the legend's words stay readable.
    browser.set_window_size(*NARROW)
    for name, url, chart in (
        ("health-panel-narrow", page, "#dsched-timeline svg"),
        ("cluster-activity-narrow", f"{base}/schedulerinstance/", "#dsched-chart-fires svg"),
    ):
        browser.get(url)
        wait(localized, "local times")
        assert no_sideways_scroll(browser), name
        width = browser.execute_script(
            f"return document.querySelector('{chart}').getBoundingClientRect().width"
        )
        assert 100 < width <= NARROW[0], (name, width)
        if name == "health-panel-narrow":
            size = browser.execute_script(
                "return parseFloat(getComputedStyle("
                "document.querySelector('#dsched-timeline .dsched-legend li')).fontSize)"
            )
            assert size >= 12
            browser.execute_script("document.getElementById('dsched-health').scrollIntoView()")
        else:
            browser.execute_script("document.getElementById('dsched-activity').scrollIntoView()")
        assert not console_errors(browser)
        shoot(browser, screenshots, name)
