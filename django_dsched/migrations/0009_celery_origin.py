# A fourth origin: schedules imported from django-celery-beat (`dsched import-celery-beat`),
# keyed by name like the code-declared ones and updated the same way.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('dsched', '0008_rename_schedulerlock_lease'),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name='schedule',
            name='dsched_schedule_origin_valid',
        ),
        migrations.AlterField(
            model_name='schedule',
            name='origin',
            field=models.CharField(choices=[('ADMIN', 'admin'), ('API', 'Python API'), ('CODE', 'declared in code'), ('CELERY_BEAT', 'imported from django-celery-beat')], db_default='ADMIN', default='ADMIN', editable=False, max_length=11, verbose_name='origin'),
        ),
        migrations.AddConstraint(
            model_name='schedule',
            constraint=models.CheckConstraint(condition=models.Q(('origin__in', ['ADMIN', 'API', 'CODE', 'CELERY_BEAT'])), name='dsched_schedule_origin_valid'),
        ),
    ]
