# A schedule the scheduler cannot plan is set aside (state SET_ASIDE) with the error and
# the time, instead of stopping every scheduler. Additive: old schedulers ignore the columns.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('dsched', '0010_history_indexes_and_input'),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name='schedule',
            name='dsched_schedule_state_valid',
        ),
        migrations.AddField(
            model_name='schedule',
            name='set_aside_reason',
            field=models.TextField(blank=True, db_default='', default='', editable=False, help_text='Why the scheduler could not plan this schedule (state: set aside).', verbose_name='set aside because'),
        ),
        migrations.AddField(
            model_name='schedule',
            name='set_aside_ts',
            field=models.DateTimeField(blank=True, editable=False, null=True, verbose_name='set aside at'),
        ),
        migrations.AlterField(
            model_name='schedule',
            name='state',
            field=models.CharField(choices=[('ACTIVE', 'active'), ('PAUSED', 'paused'), ('CANCELLED', 'cancelled'), ('COMPLETED', 'completed'), ('SET_ASIDE', 'set aside')], db_default='ACTIVE', default='ACTIVE', editable=False, max_length=9, verbose_name='state'),
        ),
        migrations.AddConstraint(
            model_name='schedule',
            constraint=models.CheckConstraint(condition=models.Q(('state__in', ['ACTIVE', 'PAUSED', 'CANCELLED', 'COMPLETED', 'SET_ASIDE'])), name='dsched_schedule_state_valid'),
        ),
    ]
