"""Schedule health in the admin: the list's column and filter, the schedule page's panel
(timeline, lag chart, last and next slots), the cluster page's last hour; the charts are
inline SVG that escape what they show."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.urls import reverse

from django_dsched.admin import charts
from django_dsched.health.slots import Outcome, Slot
from tests.health.make import db_now, late_and_new
from tests.health.test_slots import minutely_with_a_past

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(client):
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    return client


def test_the_list_shows_and_filters_health(admin_client):
    late_and_new(prefix="one-")
    url = reverse("admin:dsched_schedule_changelist")
    page = admin_client.get(url).content.decode()
    assert 'class="dsched-badge dsched-bad dsched-health-late"' in page
    assert "has not fired (grace 60 s)" in page
    assert 'dsched-health-new"' in page
    for value, shown, hidden in (
        ("LATE", "one-late", "one-new"),
        ("UNHEALTHY", "one-late", "one-new"),
        ("NEW", "one-new", "one-late"),
    ):
        filtered = admin_client.get(url, {"health": value}).content.decode()
        row = "Select this object for an action - {}"
        assert row.format(shown) in filtered and row.format(hidden) not in filtered, value
    assert "needs attention" in page  # the filter's choices


def test_the_schedule_page_draws_its_slots_and_their_lag(admin_client):
    schedule, _t0, _now = minutely_with_a_past()
    page = admin_client.get(reverse("admin:dsched_schedule_change", args=[schedule.pk]))
    html = page.content.decode()
    assert 'id="dsched-health"' in html
    timeline = re.search(r'<svg class="dsched-chart dsched-timeline".*?</svg>', html, re.S)
    assert timeline
    marks = re.findall(r'<rect class="dsched-slot dsched-slot-([a-z-]+)"', timeline.group(0))
    assert marks[:21] == (
        ["on-time", "on-time", "failed", "on-time", "on-time"]
        + ["late"] * 5
        + ["missed"] * 6
        + ["skipped"] * 5
    )
    assert "<title>" in timeline.group(0) and "fired 1.0 s after its run time" in html
    lag = re.search(r'<svg class="dsched-chart dsched-lag".*?</svg>', html, re.S)
    assert lag and lag.group(0).count("<rect") == 10  # the fired slots
    assert 'class="dsched-grace"' in lag.group(0)
    # The legend names every outcome; the tables the last and next ten slots.
    for _value, label in Outcome.choices:
        assert f"</svg>{label}</li>" in html
    recent = re.search(r'<table id="dsched-recent-slots">.*?</table>', html, re.S)
    assert recent and recent.group(0).count("<tr class=") == 10
    assert html.count("<li>", html.index('id="dsched-next-slots"')) >= 10
    assert 'class="dsched-summary-health"' in html


def test_the_cluster_page_draws_the_last_hour(admin_client):
    minutely_with_a_past()
    html = admin_client.get(reverse("admin:dsched_schedulerinstance_changelist")).content.decode()
    for chart in ("dsched-chart-fires", "dsched-chart-deliveries", "dsched-chart-backlog"):
        figure = re.search(rf'<figure class="dsched-figure" id="{chart}">.*?</figure>', html, re.S)
        assert figure, chart
    fires = re.search(r'id="dsched-chart-fires">.*?</figure>', html, re.S).group(0)
    assert fires.count('<rect class="dsched-fires"') == 60
    assert "10 in the hour" in fires
    backlog = re.search(r'id="dsched-chart-backlog">.*?</figure>', html, re.S).group(0)
    assert "<polygon" in backlog and "<polyline" in backlog


def test_what_a_chart_shows_is_escaped():
    now = db_now()
    slot = Slot(now, now, now, Outcome.LATE, run="<script>")
    chart = charts.timeline([slot], lambda s: "<b>x</b>")
    assert "<script>" not in chart.svg and "<b>" not in chart.svg
    assert "&lt;b&gt;x&lt;/b&gt;" in chart.svg
    bars = charts.bars([1, 0], "dsched-fires", '"><script>', ["<i>", "ok"])
    assert "<script>" not in bars.svg and "<i>" not in bars.svg


def test_the_form_has_the_thresholds(admin_client):
    from django_dsched.admin.schedule_form import HEALTH_FIELDS

    page = admin_client.get(reverse("admin:dsched_schedule_add")).content.decode()
    for name in HEALTH_FIELDS:
        assert f'name="{name}"' in page, name
