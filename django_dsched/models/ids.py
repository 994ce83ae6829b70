"""Time-ordered ids for new schedules (UUIDv7, RFC 9562).

A schedule's id is the key of ``schedule_t`` and the leading column of the per-schedule
indexes of ``event_store_t`` and ``outbox_message_t``. Random (version 4) ids put the
entries a batch of fires writes on random pages of all of them, so the pages a batch
touches grow with the tables; ids that grow with creation time put the schedules created
together (and so, mostly, fired together) side by side. See docs/performance.md.

Layout (the RFC's, with its "fixed bit-length dedicated counter", as Python 3.14's
``uuid.uuid7`` does): 48 bits of Unix time in milliseconds, the version ``0111``, a 42-bit
counter (12 bits, the variant ``10``, then 30 bits) and 32 random bits. The counter starts at
a random value below 2**41 in each new millisecond and goes up by one for each id within it,
so the ids one process makes are strictly increasing; should it overflow, the millisecond is
moved on by one. Ids from several processes interleave within a millisecond and stay unique
(by their random bits).
"""

from __future__ import annotations

import os
import threading
import time
import uuid

_COUNTER_BITS = 42
_COUNTER_MAX = (1 << _COUNTER_BITS) - 1
_MS_MASK = (1 << 48) - 1

# The statement's time in whole milliseconds (SQL).
MILLIS_NOW = "floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint"

_lock = threading.Lock()
_last_ms = -1
_counter = 0


def _fresh_counter() -> int:
    # A random start below 2**41 leaves at least 2**41 increments before an overflow.
    return int.from_bytes(os.urandom(6)) >> (48 - _COUNTER_BITS + 1)


def uuid7() -> uuid.UUID:
    """A new UUIDv7: time-ordered, strictly increasing within this process."""
    global _last_ms, _counter
    with _lock:
        ms = time.time_ns() // 1_000_000
        if ms > _last_ms:
            _last_ms, _counter = ms, _fresh_counter()
        else:
            # The same millisecond (or the clock stepped back): keep counting from the last id.
            _counter += 1
            if _counter > _COUNTER_MAX:
                _last_ms, _counter = _last_ms + 1, _fresh_counter()
        ms, counter = _last_ms, _counter
    tail = int.from_bytes(os.urandom(4))
    value = (
        (ms & _MS_MASK) << 80
        | 0x7 << 76
        | (counter >> 30) << 64
        | 0b10 << 62
        | (counter & 0x3FFF_FFFF) << 32
        | tail
    )
    return uuid.UUID(int=value)


def sql(ordinal: str, millis: str = MILLIS_NOW) -> str:
    """SQL for the ``ordinal``-th (a bigint expression, from 0) of a run of UUIDv7 ids made in
    the millisecond ``millis``, as :func:`uuid7` would make them one after another: for
    creating many schedules in one statement (the benchmarks do; an ``INSERT ... SELECT``
    of schedules should)."""
    counter = f"(({ordinal}) & {_COUNTER_MAX})"
    # Bytes 6-11 as a 48-bit number: version, counter's top 12 bits, variant, its low 30.
    middle = (
        f"((7::bigint << 44) | (({counter} >> 30) << 32) | (2::bigint << 30)"
        f" | ({counter} & {(1 << 30) - 1}))"
    )
    return (
        f"encode(substring(int8send(({millis}) & {_MS_MASK}) FROM 3 FOR 6)"
        f" || substring(int8send({middle}) FROM 3 FOR 6)"
        f" || substring(uuid_send(gen_random_uuid()) FROM 13 FOR 4), 'hex')::uuid"
    )
