from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib.auth.models import User
from django.core.management.base import BaseCommand
from rest_framework.authtoken.models import Token

from django_dsched.changes import edits
from django_dsched.enums import FrequencyUnit
from django_dsched.models import Schedule
from django_dsched.runtime.clock import database_now

DEMO_SCHEDULES = [
    ("heartbeat-every-2s", FrequencyUnit.SECONDS, 2, "ops", "ops.ping", {"target": "api"}),
    ("metrics-every-5s", FrequencyUnit.SECONDS, 5, "metrics", "metrics.flush", {"sink": "demo"}),
    ("cleanup-every-minute", FrequencyUnit.MINUTES, 1, "ops", "ops.cleanup", {}),
    ("invoices-monthly", FrequencyUnit.MONTHS, 1, "billing", "invoice.issue", {"day": "end"}),
]


class Command(BaseCommand):
    help = "Create the demo schedules and an admin login (idempotent)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--password", default="admin")

    def handle(self, *, password: str, **options: Any) -> None:
        now = database_now()
        for name, unit, every, topic, event_type, data in DEMO_SCHEDULES:
            if Schedule.objects.filter(schedule_name=name).exists():
                continue
            start = now - timedelta(days=40) if unit == FrequencyUnit.MONTHS else now
            edits.save_schedule(
                Schedule(
                    schedule_name=name,
                    frequency_unit=unit,
                    frequency_time=every,
                    start_ts=start,
                    event_topic=topic,
                    event_type=event_type,
                    event_data=data,
                )
            )
        user, _ = User.objects.get_or_create(
            username="admin", defaults={"is_staff": True, "is_superuser": True}
        )
        user.set_password(password)
        user.save()
        token, _ = Token.objects.get_or_create(user=user)
        self.stdout.write(f"{Schedule.objects.count()} schedules; admin login admin / {password}")
        self.stdout.write(f"REST API token of admin: {token.key}")
