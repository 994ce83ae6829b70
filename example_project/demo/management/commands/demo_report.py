from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand
from django.db import connection

from django_dsched.models import Event, Lease, OutboxMessage, Schedule


class Command(BaseCommand):
    help = "Print who leads, what fired, and the exactly-once check."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--leader", action="store_true", help="print only the leader's id")

    def handle(self, *, leader: bool, **options: Any) -> None:
        lock = Lease.objects.first()
        if leader:
            self.stdout.write(lock.instance_id if lock else "")
            return
        if lock:
            self.stdout.write(f"last leader: {lock.instance_id} (epoch {lock.epoch})")
        for schedule in Schedule.objects.order_by("schedule_name"):
            self.stdout.write(
                f"  {schedule.schedule_name:<24} fired {schedule.fire_count:>4}x"
                f"  next {schedule.next_run_ts:%Y-%m-%d %H:%M:%S} UTC"
            )
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM (SELECT 1 FROM event_store_t"
                " WHERE scheduled_ts IS NOT NULL"
                " GROUP BY aggregate_id, scheduled_ts HAVING count(*) > 1) d"
            )
            duplicates = cursor.fetchone()[0]
            cursor.execute(
                "SELECT leader_epoch, count(*) FROM event_store_t"
                " WHERE leader_epoch IS NOT NULL GROUP BY 1 ORDER BY 1"
            )
            by_epoch = cursor.fetchall()
        fires = Event.objects.filter(scheduled_ts__isnull=False).count()
        delivered = OutboxMessage.objects.filter(status="DELIVERED").count()
        self.stdout.write(
            f"fires {fires}, outbox messages {OutboxMessage.objects.count()} ({delivered} "
            f"delivered), audit events {Event.objects.filter(scheduled_ts__isnull=True).count()}"
            f"; duplicate (schedule, slot) pairs: {duplicates}"
        )
        self.stdout.write("fires per leader epoch: " + ", ".join(f"{e}: {n}" for e, n in by_epoch))
