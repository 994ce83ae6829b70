# The record of Celery task ids that ran under ExactlyOnceTask.

import django.db.models.functions.datetime
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = []

    operations = [
        migrations.CreateModel(
            name="TaskRun",
            fields=[
                (
                    "task_id",
                    models.CharField(
                        max_length=255, primary_key=True, serialize=False, verbose_name="task id"
                    ),
                ),
                ("task_name", models.CharField(max_length=255, verbose_name="task name")),
                (
                    "started_ts",
                    models.DateTimeField(
                        db_default=django.db.models.functions.datetime.Now(), verbose_name="started"
                    ),
                ),
            ],
            options={
                "verbose_name": "task run",
                "verbose_name_plural": "task runs",
                "db_table": "dsched_celery_task_run_t",
                "indexes": [
                    models.Index(fields=["started_ts"], name="dsched_celery_run_started_idx")
                ],
            },
        ),
    ]
