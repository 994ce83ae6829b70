"""The CloudEvents 1.0 envelope a fire is delivered in, composed from its event when read.

A fire's event stores what only it knows: its data (``payload``: the schedule's
``event_data`` as it was when it fired) and, in ``metadata``, its topic, priority, trigger
and where it was fired. Every other member of the envelope is a column the event has anyway,
so it is not written again with each fire (the stored envelope was two thirds of an event's
bytes, and a fifth of the WAL a fire writes):

=================== ====================================================
member              from
=================== ====================================================
``specversion``     ``"1.0"``
``id``              ``id`` (the fire's id: a function of schedule and slot)
``source``          ``"/django-dsched/" || host_id``
``subject``         ``aggregate_id`` (the schedule)
``type``            ``event_type``
``time``            ``event_ts`` (when it fired, database clock; UTC, microseconds)
``datacontenttype`` ``"application/json"``
``topic``           ``metadata->>'topic'``
``scheduledtime``   ``scheduled_ts`` (the slot; UTC, microseconds)
``data``            ``payload``
=================== ====================================================

:func:`sql` is the envelope as one SQL expression over an ``event_store_t`` row: the relay's
claim sends what it returns, and :func:`of_event` reads it for the admin and REST, so what
they show is byte for byte what was delivered. Change events (``dsched.schedule.*``) are not
delivered and have no envelope: their payload is the change.
"""

from __future__ import annotations

import json
from typing import Any

from django.db import connections

from django_dsched.conf import app_settings


def utc(column: str) -> str:
    """SQL: a ``timestamptz`` as RFC 3339 text in UTC, whatever the session's TimeZone (so
    every read of a message, every retry, sends the same bytes)."""
    return f"""to_char({column} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"')"""


def string(value: str) -> str:
    """SQL: the text ``value`` as a JSON string (escaped as jsonb escapes it), or ``null``."""
    return f"COALESCE(to_json(({value})::text)::text, 'null')"


def plain(value: str) -> str:
    """SQL: the text ``value``, which holds nothing JSON escapes (a uuid, a time as
    :func:`utc` writes it), as a JSON string, or ``null``."""
    return f"""COALESCE('"' || {value} || '"', 'null')"""


def values(alias: str) -> dict[str, str]:
    """Each member's value as JSON text (SQL over the ``event_store_t`` row ``alias``), in
    the order jsonb keeps an object's members: by the length of their names, then bytewise."""
    return {
        "id": plain(f"{alias}.id"),
        "data": f"{alias}.payload::text",
        "time": plain(utc(f"{alias}.event_ts")),
        "type": string(f"{alias}.event_type"),
        "topic": string(f"{alias}.metadata->>'topic'"),
        "source": plain(f"'/django-dsched/' || {alias}.host_id"),
        "subject": plain(f"{alias}.aggregate_id"),
        "specversion": """'"1.0"'""",
        "scheduledtime": plain(utc(f"{alias}.scheduled_ts")),
        "datacontenttype": """'"application/json"'""",
    }


def sql(alias: str) -> str:
    """The envelope (``text``: a JSON object) of the fire in row ``alias`` of
    ``event_store_t``.

    Written out member by member: the very text ``jsonb_build_object(...)::text`` renders
    (members in jsonb's order, ``", "`` and ``": "`` between them, strings escaped as jsonb
    escapes them), at about half its cost, which the relay's claim pays for every message:
    a jsonb object built and then written out as text took about 6.4 us a row, this 3.5 us
    (``tests/outbox/test_envelope.py`` holds both to the same bytes)."""
    parts = [f"'\"{name}\": ' || {value}" for name, value in values(alias).items()]
    return "('{' || " + " || ', ' || ".join(parts) + " || '}')"


def of_event(event_id: Any, using: str | None = None) -> dict[str, Any] | None:
    """The envelope of the fire ``event_id``, as the relay delivers it; None if there is no
    such event."""
    with connections[using or app_settings.DATABASE].cursor() as cursor:
        cursor.execute(f"SELECT {sql('e')}::text FROM event_store_t e WHERE e.id = %s", [event_id])
        row = cursor.fetchone()
    if row is None:
        return None
    envelope: dict[str, Any] = json.loads(row[0])
    return envelope
