# The relays' claim index, keyed on when a pending message becomes claimable, replaces
# dsched_outbox_claim_idx (priority DESC, event_ts), which made every claim walk past the
# messages waiting on a backoff.
#
# Safe on a big table: the index is built with CREATE INDEX CONCURRENTLY and the old one
# dropped with DROP INDEX CONCURRENTLY, so fires and relays keep writing the table throughout
# (neither can run in a transaction, hence atomic = False). A concurrent build that fails
# (cancelled, deadlock) leaves an INVALID index behind: running the migration again drops it
# first. No column is added, so the table is not rewritten and the fire path is unchanged.
# Relays of the previous release keep working until restarted (without their index: slower).
from django.db import migrations, models
from django.db.models.functions import Greatest

READY_INDEX = (
    'CREATE INDEX CONCURRENTLY "dsched_outbox_ready_idx" ON "outbox_message_t" '
    '("priority" DESC, (GREATEST("event_ts", "next_attempt_ts", "claimed_until"))) '
    "WHERE \"status\" = 'PENDING'"
)
CLAIM_INDEX = (
    'CREATE INDEX CONCURRENTLY "dsched_outbox_claim_idx" ON "outbox_message_t" '
    "(\"priority\" DESC, \"event_ts\") WHERE \"status\" = 'PENDING'"
)


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("dsched", "0011_schedule_set_aside"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    sql=[
                        'DROP INDEX CONCURRENTLY IF EXISTS "dsched_outbox_ready_idx"',
                        READY_INDEX,
                        'DROP INDEX CONCURRENTLY IF EXISTS "dsched_outbox_claim_idx"',
                    ],
                    reverse_sql=[
                        'DROP INDEX CONCURRENTLY IF EXISTS "dsched_outbox_claim_idx"',
                        CLAIM_INDEX,
                        'DROP INDEX CONCURRENTLY IF EXISTS "dsched_outbox_ready_idx"',
                    ],
                ),
            ],
            state_operations=[
                migrations.RemoveIndex(
                    model_name="outboxmessage",
                    name="dsched_outbox_claim_idx",
                ),
                migrations.AddIndex(
                    model_name="outboxmessage",
                    index=models.Index(
                        models.OrderBy(models.F("priority"), descending=True),
                        Greatest("event_ts", "next_attempt_ts", "claimed_until"),
                        condition=models.Q(("status", "PENDING")),
                        name="dsched_outbox_ready_idx",
                    ),
                ),
            ],
        ),
    ]
