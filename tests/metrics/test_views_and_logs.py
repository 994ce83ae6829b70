"""The metrics view (permission or token), the JSON log formatter, the health endpoints'
answers, and the commands' options."""

from __future__ import annotations

import json
import logging
import sys
import time
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import CommandError, call_command

from django_dsched.outbox.relay import Relay
from django_dsched.runtime.health import HealthServer
from django_dsched.runtime.logs import JsonFormatter, get_logger
from django_dsched.scheduler import Scheduler
from tests.endpoints import get
from tests.factories import ScheduleFactory

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def gauges_now(settings):
    settings.DSCHED_METRICS_CACHE_SECONDS = 0


def test_the_view_refuses_anonymous_and_unpermitted_users(client, gauges_now):
    """The gauges count every host: they need the cluster's permission, as the admin's
    cluster page and the REST API's cluster/ do (seeing one tenant's schedules is not
    enough)."""
    assert client.get("/dsched/metrics").status_code == 401
    user = User.objects.create_user("viewer", password="pw")
    client.force_login(user)
    assert client.get("/dsched/metrics").status_code == 403
    user.user_permissions.add(Permission.objects.get(codename="view_schedule"))
    user = User.objects.get(pk=user.pk)
    client.force_login(user)
    answer = client.get("/dsched/metrics")
    assert answer.status_code == 403
    assert b"dsched.view_schedulerinstance" in answer.content
    user.user_permissions.add(Permission.objects.get(codename="view_schedulerinstance"))
    user = User.objects.get(pk=user.pk)
    client.force_login(user)
    answer = client.get("/dsched/metrics")
    assert answer.status_code == 200
    assert "dsched_due_schedules 0.0" in answer.content.decode()


def test_the_view_serves_the_database_gauges_to_a_bearer_token(client, settings, db_now):
    settings.DSCHED_METRICS_CACHE_SECONDS = 0
    settings.DSCHED_METRICS_TOKEN = "s3cret"
    ScheduleFactory.create_batch(2, start_ts=db_now() - timedelta(minutes=1))
    assert client.get("/dsched/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    answer = client.get("/dsched/metrics", HTTP_AUTHORIZATION="Bearer s3cret")
    assert answer.status_code == 200
    assert answer["Content-Type"].startswith("text/plain; version=")
    text = answer.content.decode()
    assert "# TYPE dsched_due_schedules gauge" in text
    assert "dsched_due_schedules 2.0" in text
    assert "dsched_dead_letters 0.0" in text
    assert "dsched_outbox_oldest_ready_age_seconds" in text


def test_the_json_formatter_writes_the_context_fields_a_record_carries():
    formatter = JsonFormatter()
    line = logging.LogRecord("django_dsched.x", logging.WARNING, __file__, 1, "a %s", ("b",), None)
    line.__dict__.update(instance="i1", epoch=7, message_id="m-1", slot="2026-01-01T00:00:00Z")
    entry = json.loads(formatter.format(line))
    assert entry["message"] == "a b"
    assert entry["level"] == "WARNING"
    assert entry["logger"] == "django_dsched.x"
    assert (entry["instance"], entry["epoch"], entry["message_id"]) == ("i1", 7, "m-1")
    assert entry["slot"] == "2026-01-01T00:00:00Z"
    assert "schedule" not in entry
    assert entry["time"].endswith("+00:00")


def test_fire_and_delivery_log_lines_carry_instance_epoch_schedule_slot_and_message_id(
    db_now, settings
):
    settings.DSCHED_TRANSPORTS = {"*": {"BACKEND": "handlers"}}
    from django_dsched.handlers import registry

    def accept(message: dict) -> None:
        pass

    registry.register(accept, topic="json.logs")
    lines: list[dict] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(json.loads(JsonFormatter().format(record)))

    handler = Collect(logging.DEBUG)
    package = logging.getLogger("django_dsched")
    package.addHandler(handler)
    level = package.level
    package.setLevel(logging.DEBUG)
    try:
        schedule = ScheduleFactory(
            start_ts=db_now() - timedelta(seconds=5), event_topic="json.logs"
        )
        Scheduler(instance_id="json-s").run_until_idle()
        Relay(instance_id="json-r").run_until_idle()
    finally:
        package.removeHandler(handler)
        package.setLevel(level)
        registry.unregister(accept, topic="json.logs")
    fired = next(e for e in lines if e["message"].startswith("fired 1 schedule"))
    assert fired["instance"] == "json-s" and fired["epoch"] >= 1
    assert fired["schedules"] == schedule.schedule_name
    delivered = next(e for e in lines if e["message"].startswith("delivered id="))
    assert delivered["instance"] == "json-r"
    assert delivered["schedule"] == str(schedule.schedule_id)
    assert delivered["topic"] == "json.logs"
    assert delivered["slot"] and delivered["message_id"] in delivered["message"]


def test_a_json_line_cannot_be_forged_by_a_name():
    logger = get_logger("django_dsched.test_forgery")
    line = logging.LogRecord(
        logger.name, logging.INFO, __file__, 1, "fired %s", ('x\n{"level": "ERROR"}',), None
    )
    text = JsonFormatter().format(line)
    assert "\n" not in text and json.loads(text)["level"] == "INFO"


def test_a_json_line_cannot_be_forged_by_a_unicode_line_separator():
    logger = get_logger("django_dsched.test_forgery")
    for separator in ("\u2028", "\u2029"):
        forged = f'x{separator}{{"level": "ERROR"}}'
        line = logging.LogRecord(
            logger.name, logging.INFO, __file__, 1, "fired %s", (forged,), None
        )
        text = JsonFormatter().format(line)
        assert text.splitlines() == [text]
        assert json.loads(text)["message"] == f"fired {forged}"


def test_livez_goes_503_when_the_loop_stops_going_round_and_readyz_follows_the_session(settings):
    settings.DSCHED_HEALTH_STALL_SECONDS = 30
    scheduler = Scheduler(instance_id="probe")
    server = HealthServer([scheduler], 0, "127.0.0.1", 30.0).start()
    try:
        status, body = get(server.port, "/readyz")
        assert status == 503 and "not connected" in body  # before the first round
        scheduler._guarded(scheduler.step)
        status, body = get(server.port, "/readyz")
        assert status == 200 and "leader" in body
        assert get(server.port, "/livez")[0] == 200
        scheduler.last_tick = time.monotonic() - 31  # as if stuck for 31 s
        status, body = get(server.port, "/livez")
        assert status == 503 and "stalled" in body
    finally:
        server.stop()
        scheduler.shutdown()


def test_metrics_port_without_prometheus_client_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # as if not installed
    with pytest.raises(CommandError, match=r"django-dsched\[metrics\]"):
        call_command("run_scheduler", "--metrics-port=9999", "--once")
    with pytest.raises(CommandError, match=r"django-dsched\[metrics\]"):
        call_command("run_relay", "--metrics-port=9999", "--once")
    with pytest.raises(CommandError, match="needs --metrics-port"):
        call_command("run_relay", "--database-metrics", "--once")


def test_a_port_in_use_is_a_clear_error():
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(CommandError, match=f"--health-port: cannot listen on 127.0.0.1:{port}"):
            call_command("run_relay", f"--health-port={port}", "--once", verbosity=0)
        with pytest.raises(
            CommandError, match=f"--metrics-port: cannot listen on 127.0.0.1:{port}"
        ):
            call_command("run_relay", f"--metrics-port={port}", "--once", verbosity=0)
