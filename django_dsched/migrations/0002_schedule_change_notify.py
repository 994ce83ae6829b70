from django.db import migrations

# Wakes a sleeping leader (LISTEN dsched_schedules) when a schedule is created or changed.
# The fire path sets dsched.firing for its own transaction so the leader does not wake itself.
CREATE = """
CREATE FUNCTION dsched_notify_schedules() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF coalesce(current_setting('dsched.firing', true), '') <> 'on' THEN
        PERFORM pg_notify('dsched_schedules', '');
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER dsched_schedule_changed
    AFTER INSERT OR UPDATE OF next_run_ts, active, state ON schedule_t
    FOR EACH STATEMENT EXECUTE FUNCTION dsched_notify_schedules();
"""
DROP = """
DROP TRIGGER IF EXISTS dsched_schedule_changed ON schedule_t;
DROP FUNCTION IF EXISTS dsched_notify_schedules();
"""


class Migration(migrations.Migration):
    dependencies = [("dsched", "0001_initial")]

    operations = [migrations.RunSQL(CREATE, DROP)]
