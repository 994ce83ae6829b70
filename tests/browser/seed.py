"""A small, varied cluster for the screenshots: every kind and state, fires, a leader."""

from __future__ import annotations

from datetime import timedelta

from django.db import connection, transaction

from django_dsched import api
from django_dsched.changes import on_demand
from django_dsched.cluster.lease import LeaseHolder
from django_dsched.enums import DeliveryStatus
from django_dsched.firing.batch import fire_batch
from django_dsched.firing.fence import Fence
from django_dsched.models import OutboxMessage, Schedule, SchedulerInstance
from django_dsched.runtime.clock import database_now


def seed_cluster() -> dict[str, Schedule]:
    now = database_now()
    made = {
        "nightly-report": api.create_cron(
            "nightly-report",
            cron="0 9 * * 1-5",
            time_zone="Europe/Brussels",
            topic="reports",
            event_type="report.build",
            data={"format": "pdf"},
        ),
        "cleanup": api.create_interval(
            "cleanup", every=15, unit="MINUTES", topic="ops", event_type="ops.cleanup"
        ),
        "heartbeat": api.create_interval(
            "heartbeat",
            every=30,
            unit="SECONDS",
            start=now - timedelta(seconds=45),
            topic="ops",
            event_type="ops.ping",
            data={"target": "api"},
        ),
        "invoices-monthly": api.create_interval(
            "invoices-monthly",
            every=1,
            unit="MONTHS",
            start=now - timedelta(days=40),
            topic="billing",
            event_type="invoice.issue",
        ),
        "reminder-42": api.create_once(
            "reminder-42",
            delay=timedelta(hours=2),
            topic="mail",
            event_type="reminder.send",
            data={"user": 42},
        ),
        "welcome-mail": api.create_once(
            "welcome-mail",
            at=now - timedelta(seconds=5),
            topic="mail",
            event_type="mail.welcome",
        ),
        "quarterly-export": api.create_cron(
            "quarterly-export",
            cron="0 6 1 */3 *",
            topic="exports",
            event_type="export.run",
        ),
        "legacy-sync": api.create_interval(
            "legacy-sync", every=1, unit="HOURS", topic="ops", event_type="legacy.sync"
        ),
    }
    api.pause("quarterly-export", reason="quarter close", actor="alice")
    api.cancel("legacy-sync", actor="alice")

    # A leader fires what is due (heartbeat, invoices-monthly, welcome-mail).
    lease = LeaseHolder(
        connection, lease_id=1, instance_id="scheduler-1", lease_seconds=30, fast_failover=True
    )
    assert lease.try_acquire()
    with transaction.atomic(), connection.cursor() as cursor:
        fire_batch(cursor, Fence(1, "scheduler-1", lease.epoch, 30), 100)
    on_demand.trigger(made["cleanup"], actor="alice")
    OutboxMessage.objects.filter(aggregate_id=made["heartbeat"].pk).update(
        status=DeliveryStatus.DELIVERY_FAILED,
        attempts=10,
        last_error="HTTP 503 from https://hooks.example.com/ops",
    )
    OutboxMessage.objects.filter(aggregate_id=made["welcome-mail"].pk).update(
        status=DeliveryStatus.DELIVERED, attempts=1, delivered_ts=now
    )
    for number, role in ((1, "leader"), (2, "standby"), (3, "standby")):
        SchedulerInstance.objects.create(
            instance_id=f"scheduler-{number}",
            role=role,
            hostname=f"worker-{number}.internal",
            pid=4100 + number,
            epoch=lease.epoch if role == "leader" else None,
            started_ts=now - timedelta(minutes=42 - number),
            last_seen_ts=now - timedelta(seconds=number * 0.7),
        )
    return {name: Schedule.objects.get(pk=s.pk) for name, s in made.items()}
