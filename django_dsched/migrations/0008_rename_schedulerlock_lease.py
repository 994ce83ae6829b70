# One name for the lease: the model SchedulerLock is now Lease and its key lease_id.
# The table and its column keep the design's names (scheduler_lock_t.lock_id): state only.
from django.db import migrations, models


def rename_permissions(apps, schema_editor):
    """Keep groups' and users' lease permissions: view_schedulerlock -> view_lease, ..."""
    try:
        permission = apps.get_model("auth", "Permission")
    except LookupError:  # django.contrib.auth is not installed
        return
    rows = permission.objects.using(schema_editor.connection.alias).filter(
        content_type__app_label="dsched", codename__endswith="_schedulerlock"
    )
    for row in rows:
        action = row.codename.removesuffix("_schedulerlock")
        if not permission.objects.filter(
            content_type=row.content_type, codename=f"{action}_lease"
        ).exists():
            row.codename = f"{action}_lease"
            row.name = f"Can {action} scheduler lease"
            row.save(update_fields=["codename", "name"])


class Migration(migrations.Migration):
    dependencies = [
        ("dsched", "0007_outbox_schedule_index"),
    ]

    operations = [
        migrations.RenameModel("SchedulerLock", "Lease"),
        migrations.RunPython(rename_permissions, migrations.RunPython.noop, elidable=True),
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
