# Indexes for the admin's history pages with a big outbox (docs/performance.md, "Admin"):
# the schedules list's count of each schedule's dead letters, the dead letters newest first
# (both partial: only dead letters, which fires and deliveries never write), and the list
# of all messages newest first.
# Built CONCURRENTLY: fires and deliveries keep writing while they build.
# Then input checks (no SQL): schedule names refuse control characters, and event_data's
# field checks depth and size before parsing or serialising (docs/reference.md).
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models

import django_dsched.models.fields
import django_dsched.models.validators


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("dsched", "0009_celery_origin"),
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
        migrations.AlterField(
            model_name="schedule",
            name="event_data",
            field=django_dsched.models.fields.EventDataField(
                blank=True,
                default=dict,
                help_text="A JSON object carried as the data of every event this schedule fires.",
                validators=[django_dsched.models.validators.validate_event_data],
                verbose_name="event data",
            ),
        ),
        migrations.AlterField(
            model_name="schedule",
            name="schedule_name",
            field=models.CharField(
                max_length=126,
                validators=[django_dsched.models.validators.validate_plain_text],
                verbose_name="name",
            ),
        ),
    ]
