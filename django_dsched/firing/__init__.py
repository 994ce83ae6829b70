"""The fire path: claim due schedules, plan them, and fire them in one fenced transaction.

:func:`~.write.fire_batch` is the leader's hot loop; the schedule's own doors (run now,
backfill) fire given slots through :func:`~.write.fire_slots`. :mod:`.throttle` holds each
host's fire rate.
"""
