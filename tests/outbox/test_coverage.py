"""Topics and event types that nobody would deliver are said before they fire
(dsched.W003, run_relay's start), and @periodic functions are found by the relay."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from django_dsched.checks.delivery import check_unserved_topics
from django_dsched.outbox.coverage import unserved
from django_dsched.outbox.handlers import HandlerRegistry
from django_dsched.outbox.transports.registry import Transports
from tests.factories import ScheduleFactory

pytestmark = pytest.mark.django_db


def test_a_topic_no_transport_routes_is_reported():
    ScheduleFactory(event_topic="billing", event_type="invoice.issue")
    transports = Transports({"reports": {"BACKEND": "handlers"}}, {})
    [found] = unserved(transports, HandlerRegistry())
    assert (found.topic, found.event_type) == ("billing", "invoice.issue")
    assert "no transport is configured for topic 'billing'" in found.why


def test_a_topic_for_handlers_with_none_registered_is_reported_until_one_is():
    ScheduleFactory(event_topic="cleanup", event_type="cleanup.run")
    handlers = HandlerRegistry()
    transports = Transports({"*": {"BACKEND": "handlers"}}, {})
    [found] = unserved(transports, handlers)
    assert "none is registered for it" in found.why
    handlers.register(lambda event: None, event_type="cleanup.run")
    assert unserved(transports, handlers) == []


def test_other_transports_and_finished_schedules_are_not_reported():
    ScheduleFactory(event_topic="billing", event_type="x")
    ScheduleFactory(event_topic="gone", event_type="y", state="CANCELLED", active=False)
    transports = Transports(
        {"billing": {"BACKEND": "webhook", "OPTIONS": {"URL": "https://e.x/"}}}, {}
    )
    assert unserved(transports, HandlerRegistry()) == []


def test_check_database_warns(settings):
    ScheduleFactory(event_topic="nowhere-topic", event_type="nobody.handles")
    settings.DSCHED_TRANSPORTS = {"*": {"BACKEND": "handlers"}}
    [warning] = check_unserved_topics(databases=["default"])
    assert warning.id == "dsched.W003"
    assert "'nowhere-topic'" in warning.msg and "'nobody.handles'" in warning.msg
    assert check_unserved_topics() == []  # only with --database


def test_run_relay_says_so_at_start(settings, caplog):
    ScheduleFactory(event_topic="nowhere-topic", event_type="nobody.handles")
    settings.DSCHED_TRANSPORTS = {"*": {"BACKEND": "handlers"}}
    call_command("run_relay", "--once", verbosity=1)
    assert "'nowhere-topic', event type 'nobody.handles'" in caplog.text
