"""The delivered envelope, byte for byte, against a literal.

The envelope is composed in SQL when read (models/envelope.py): the relay's claim sends the
text PostgreSQL renders, and ``OutboxMessage.delivered_payload`` reads the same. Other tests
compare what was delivered with ``envelope.of_event`` (tests/outbox/test_event_payload.py);
this one pins what both are: every member, its name, its order and its format, the times in
UTC with microseconds whatever the session's TimeZone, the data as stored (unicode, nesting,
numbers as written). A change to any of them is a change to what consumers receive, and
fails here.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from django.db import connection, transaction

from django_dsched.models import OutboxMessage, envelope
from django_dsched.outbox.claims import CLAIM, claim_args, claim_batch, pending_ids
from django_dsched.outbox.messages import Claimer
from tests.helpers import sql

pytestmark = pytest.mark.django_db(transaction=True)

HOST = "c0ffee00-1234-4abc-8def-0123456789ab"
SCHEDULE = "5c4ed01e-aaaa-4bbb-8ccc-dddddddddddd"
# The slot 2026-03-29T01:30:00.1234Z: its millisecond, 0x019d3736523b, in the top 48 bits
# (the CHECK dsched_event_slot_in_id), the rest fixed.
EVENT_ID = "019d3736-523b-7c41-9e2f-5a1b2c3d4e5f"
SLOT = "2026-03-29 01:30:00.1234+00"
FIRED = "2026-03-29 01:30:00.98765+00"
DATA = (
    '{"text": "é ✓ 😀 \\"q\\" <b>\\n\\t/", "n": 10,'
    ' "nested": {"big": 12345678901234567890, "z": {}, "a": [1, 2.5, 1.10, null, true, false]},'
    ' "empty": []}'
)

# jsonb's text: members ordered by the length of their names, then bytewise; ", " and ": "
# between them; unicode as UTF-8, not escaped; numbers as stored (1.10 keeps its zero).
EXPECTED = (
    '{"id": "019d3736-523b-7c41-9e2f-5a1b2c3d4e5f",'
    ' "data": {"n": 10, "text": "é ✓ 😀 \\"q\\" <b>\\n\\t/", "empty": [],'
    ' "nested": {"a": [1, 2.5, 1.10, null, true, false], "z": {}, "big": 12345678901234567890}},'
    ' "time": "2026-03-29T01:30:00.987650+00:00",'
    ' "type": "report.build",'
    ' "topic": "reports.daily",'
    ' "source": "/django-dsched/c0ffee00-1234-4abc-8def-0123456789ab",'
    ' "subject": "5c4ed01e-aaaa-4bbb-8ccc-dddddddddddd",'
    ' "specversion": "1.0",'
    ' "scheduledtime": "2026-03-29T01:30:00.123400+00:00",'
    ' "datacontenttype": "application/json"}'
)


@pytest.fixture
def kathmandu() -> Iterator[None]:
    """The session's TimeZone is +05:45 (a quarter-hour offset, no DST) while the test reads;
    the connection is closed after it, so the next test gets a fresh one (in UTC)."""
    sql("SET TIME ZONE 'Asia/Kathmandu'")
    assert sql("SELECT to_char(%s::timestamptz, 'HH24:MI TZH:TZM')", [SLOT]) == [("07:15 +05:45",)]
    yield
    connection.close()


def write_the_fire() -> None:
    """One fire's event and message as the fire path writes them, with fixed values."""
    sql(
        """
        WITH e AS (
            INSERT INTO event_store_t (id, host_id, aggregate_id, aggregate_type,
                aggregate_version, event_type, event_ts, payload, metadata, scheduled_ts,
                leader_epoch)
            VALUES (%(id)s, %(host)s, %(schedule)s, 'Schedule', 3, 'report.build', %(fired)s,
                    %(data)s::jsonb,
                    jsonb_build_object('topic', 'reports.daily', 'instance_id', 'golden',
                                       'timeline', 1, 'schedule_name', 'nightly',
                                       'priority', 7, 'trigger', 'schedule'),
                    %(slot)s, 1)
            RETURNING *
        )
        INSERT INTO outbox_message_t (id, host_id, aggregate_id, aggregate_type,
            aggregate_version, event_type, event_ts, topic, status, priority)
        SELECT id, host_id, aggregate_id, 'Schedule', aggregate_version, event_type, event_ts,
               metadata->>'topic', 'PENDING', (metadata->>'priority')::smallint
        FROM e
        """,
        {
            "id": EVENT_ID,
            "host": HOST,
            "schedule": SCHEDULE,
            "fired": FIRED,
            "slot": SLOT,
            "data": DATA,
        },
    )


def test_the_delivered_envelope_is_exactly_this(kathmandu):
    write_the_fire()
    claimer = Claimer(relay_id="golden", visibility_timeout=30.0, max_attempts=3)

    # The text the relay's claim returns (its statement as the relay runs it; rolled back).
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(CLAIM, {**claim_args(claimer, 10), **(pending_ids(cursor) or {})})
        [row] = cursor.fetchall()
        transaction.set_rollback(True)
    body, size = row[3], row[8]
    assert body == EXPECTED
    assert size == len(EXPECTED.encode()) == 530

    # The message the relay hands its transport: that text, parsed in its order.
    with connection.cursor() as cursor:
        [message] = claim_batch(cursor, claimer, 10).live
    assert str(message.id) == EVENT_ID
    assert (message.topic, message.priority, message.event_type) == (
        "reports.daily",
        7,
        "report.build",
    )
    assert message.size == size
    assert message.payload == json.loads(EXPECTED)
    assert list(message.payload) == list(json.loads(EXPECTED))

    # What the admin and REST show as delivered: the same envelope.
    delivered = OutboxMessage.objects.get(pk=EVENT_ID).delivered_payload
    assert delivered == json.loads(EXPECTED)
    assert list(delivered) == list(json.loads(EXPECTED))
    assert list(delivered["data"]["nested"]) == ["a", "z", "big"]
    assert delivered["time"] == "2026-03-29T01:30:00.987650+00:00"
    assert delivered["scheduledtime"] == "2026-03-29T01:30:00.123400+00:00"


# What jsonb renders for the same members: the envelope's text is written out member by
# member (models/envelope.py), and must be exactly this for any stored values.
AS_JSONB = """jsonb_build_object(
    'specversion', '1.0', 'id', e.id, 'source', '/django-dsched/' || e.host_id,
    'subject', e.aggregate_id, 'type', e.event_type, 'time', {time},
    'datacontenttype', 'application/json', 'topic', e.metadata->>'topic',
    'scheduledtime', {scheduled}, 'data', e.payload)::text"""


@pytest.mark.parametrize(
    ("event_type", "metadata", "payload", "scheduled"),
    [
        ('a "quoted" \\ type\n\t\x01', {"topic": 'say "hi" \\ é ✓ 😀\x1f'}, DATA, SLOT),
        ("plain", {}, "null", None),  # no topic, data null, no slot
        ("plain", {"topic": 12.50}, '"a string"', SLOT),  # a topic stored as a number
        ("plain", {"topic": None}, "[]", SLOT),
        ("plain", {"topic": ["x"]}, '{"": {"": ""}}', SLOT),
    ],
)
def test_the_envelope_text_is_what_jsonb_renders(event_type, metadata, payload, scheduled):
    write_the_fire()
    sql(
        "UPDATE event_store_t SET event_type = %s, metadata = %s::jsonb, payload = %s::jsonb,"
        " scheduled_ts = %s WHERE id = %s",
        [event_type, json.dumps(metadata), payload, scheduled, EVENT_ID],
    )
    utc = envelope.utc
    as_jsonb = AS_JSONB.format(time=utc("e.event_ts"), scheduled=utc("e.scheduled_ts"))
    [(text, rendered)] = sql(
        f"SELECT {envelope.sql('e')}, {as_jsonb} FROM event_store_t e WHERE e.id = %s", [EVENT_ID]
    )
    assert text == rendered
    assert json.loads(text)["type"] == event_type
