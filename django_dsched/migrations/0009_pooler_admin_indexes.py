# Indexes for the admin's history pages with a big outbox (docs/performance.md, "Admin"):
# the schedules list's count of each schedule's dead letters, the dead letters newest first
# (both partial: only dead letters, which fires and deliveries never write), and the list
# of all messages newest first.
# Built CONCURRENTLY: fires and deliveries keep writing while they build.
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("dsched", "0008_rename_schedulerlock_lease"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="outboxmessage",
            index=models.Index(
                condition=models.Q(("status", "DELIVERY_FAILED")),
                fields=["aggregate_id"],
                name="dsched_outbox_dead_sched_idx",
            ),
        ),
        AddIndexConcurrently(
            model_name="outboxmessage",
            index=models.Index(
                condition=models.Q(("status", "DELIVERY_FAILED")),
                fields=["event_ts"],
                name="dsched_outbox_dead_ts_idx",
            ),
        ),
        AddIndexConcurrently(
            model_name="outboxmessage",
            index=models.Index(fields=["event_ts"], name="dsched_outbox_event_ts_idx"),
        ),
    ]
