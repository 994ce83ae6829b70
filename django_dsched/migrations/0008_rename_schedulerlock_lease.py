# One name for the lease: the model SchedulerLock is now Lease and its key lease_id.
# The table and its column keep the design's names (scheduler_lock_t.lock_id): state only.
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("dsched", "0007_outbox_schedule_index"),
    ]

    operations = [
        migrations.RenameModel("SchedulerLock", "Lease"),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RenameField("Lease", "lock_id", "lease_id"),
                migrations.AlterField(
                    model_name="lease",
                    name="lease_id",
                    field=models.IntegerField(
                        db_column="lock_id",
                        primary_key=True,
                        serialize=False,
                        verbose_name="lease id",
                    ),
                ),
            ],
        ),
    ]
