"""The history tables by day: ``event_store_t`` and ``outbox_message_t`` are partitioned by
id, one partition per UTC day, plus a default partition for any id outside them.

A fire's id carries its slot's time in its top 48 bits (:mod:`~django_dsched.history.event_ids`),
and its message has the same id, so a fire's event and message land in the same day, the day
of the slot. Audit events get ids with the database's time of the change in the same bits.

* :mod:`.partitions`: the days (names, bounds), making them ahead, which are held, dropping
  the expired ones;
* :mod:`.horizon`: since when the history is complete (every purge moves it first; no
  backfill reaches before it);
* :mod:`.operations`: the migration operation creating a table partitioned by id.
"""
