"""Event ids: a fire's id is a function of its schedule and its slot.

A slot fired again (after a database failover that lost the first commit, or by a relay
re-sending it) carries the same id, so consumers can dedupe on it. The id has the UUIDv7
layout with the slot's time in its top 48 bits, so ids of fires written together sort
together and the primary-key indexes of ``event_store_t`` and ``outbox_message_t`` grow
at their right edge:

* bits 0-47: the slot, in milliseconds since 1970-01-01 UTC (rounded down; modulo 2**48);
* bits 48-51: the version, ``0111``;
* bits 52-63: the low 4 bits of digest byte 0, then digest byte 1;
* bits 64-65: the variant, ``10``;
* bits 66-127: the low 6 bits of digest byte 2, then digest bytes 3 to 9;

where the digest is SHA-256 of the UTF-8 text ``"<schedule id>/<slot>"``: the schedule id
as lower-case hyphenated UUID text, the slot as whole microseconds since 1970-01-01 UTC in
decimal (``"3f0c...-.../1767225600000000"``).

The fire path computes it in SQL (:func:`sql`); :func:`event_id` is the same rule in Python
(a test checks they agree).

Audit events (a change, not a fire) have ids of the same layout with the time of the change
on the database's clock in the top 48 bits and random bits after (:func:`change_sql`,
:func:`change_id`): ``event_store_t`` is partitioned by day on those bits
(:mod:`django_dsched.history`), so an event is stored in the day of its slot or its change.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from datetime import datetime

from django_dsched.timetables.grid import to_microseconds

MS_MASK = (1 << 48) - 1


def event_id(schedule_id: uuid.UUID | str, slot: datetime | int) -> uuid.UUID:
    """The id of the fire of ``schedule_id`` for ``slot`` (a datetime, or microseconds)."""
    slot_us = slot if isinstance(slot, int) else to_microseconds(slot)
    digest = hashlib.sha256(f"{uuid.UUID(str(schedule_id))}/{slot_us}".encode()).digest()
    raw = bytearray(((slot_us // 1000) & MS_MASK).to_bytes(6, "big") + digest[:10])
    raw[6] = 0x70 | (raw[6] & 0x0F)
    raw[8] = 0x80 | (raw[8] & 0x3F)
    return uuid.UUID(bytes=bytes(raw))


def sql(schedule_id: str, slot_us: str) -> str:
    """The SQL expression of :func:`event_id` for a uuid column and a bigint (microseconds)
    expression."""
    digest = f"sha256(convert_to({schedule_id}::text || '/' || ({slot_us})::text, 'UTF8'))"
    # Milliseconds rounded down (integer division in SQL rounds towards zero).
    # (No "%" operator: the text goes through parameter substitution.)
    millis = f"((({slot_us}) - mod(mod({slot_us}, 1000) + 1000, 1000)) / 1000)"
    return (
        f"encode(substring(int8send({millis} & {MS_MASK}) FROM 3 FOR 6)"
        f" || set_byte(set_byte(substring({digest} FROM 1 FOR 10),"
        f" 0, (get_byte({digest}, 0) & 15) | 112),"
        f" 2, (get_byte({digest}, 2) & 63) | 128), 'hex')::uuid"
    )


def change_id(at: datetime) -> uuid.UUID:
    """An audit event's id: ``at`` (the change's time, from the database) in milliseconds in
    the top 48 bits, then the version ``0111``, the variant and 74 random bits."""
    ms = to_microseconds(at) // 1000
    raw = bytearray((ms & MS_MASK).to_bytes(6, "big") + os.urandom(10))
    raw[6] = 0x70 | (raw[6] & 0x0F)
    raw[8] = 0x80 | (raw[8] & 0x3F)
    return uuid.UUID(bytes=bytes(raw))


def id_floor(at: datetime) -> uuid.UUID:
    """The smallest id of ``at``'s millisecond: the events of a slot or change at or after
    ``at`` have ids from it on (a range of the primary key)."""
    ms = to_microseconds(at) // 1000
    return uuid.UUID(int=(ms & MS_MASK) << 80)


def millis_sql(at: str) -> str:
    """A ``timestamptz`` expression's time in whole milliseconds since 1970 (SQL)."""
    return f"floor(extract(epoch FROM {at}) * 1000)::bigint"


def floor_sql(at: str) -> str:
    """:func:`id_floor` in SQL for a ``timestamptz`` expression ``at``."""
    return (
        f"encode(substring(int8send(({millis_sql(at)}) & {MS_MASK}) FROM 3 FOR 6)"
        f" || '\\x00000000000000000000'::bytea, 'hex')::uuid"
    )


def change_sql(at: str) -> str:
    """:func:`change_id` in SQL for a ``timestamptz`` expression ``at`` (a new id per row)."""
    millis = millis_sql(at)
    # Bytes 0-7: the milliseconds, the version and 12 random bits; bytes 8-15: the variant
    # and 62 random bits of a version 4 UUID.
    return (
        f"encode(int8send((({millis}) & {MS_MASK}) << 16 | 28672"
        f" | floor(random() * 4096)::bigint)"
        f" || substring(uuid_send(gen_random_uuid()) FROM 9 FOR 8), 'hex')::uuid"
    )
