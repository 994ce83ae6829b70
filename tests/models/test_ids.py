"""New schedules get time-ordered ids (UUIDv7), so the schedules created together sit
together in every index keyed by the schedule (django_dsched/ids.py)."""

from __future__ import annotations

import itertools
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from django_dsched import api
from django_dsched.models import Schedule, ids
from tests.factories import ScheduleFactory
from tests.helpers import sql


def millis(value: uuid.UUID) -> int:
    return value.int >> 80


def test_a_uuid7_carries_the_time_the_version_and_the_variant():
    before = time.time_ns() // 1_000_000
    value = ids.uuid7()
    after = time.time_ns() // 1_000_000
    assert value.version == 7
    assert value.variant == uuid.RFC_4122
    assert before <= millis(value) <= after


def test_ids_made_one_after_another_are_strictly_increasing():
    made = [ids.uuid7() for _ in range(20_000)]  # many within each millisecond
    assert all(a < b for a, b in itertools.pairwise(made))
    assert len({millis(value) for value in made}) < len(made)


def test_ids_made_on_several_threads_are_unique():
    with ThreadPoolExecutor(4) as pool:
        made = [
            v
            for batch in pool.map(lambda _: [ids.uuid7() for _ in range(5000)], range(4))
            for v in batch
        ]
    assert len(set(made)) == len(made)


@pytest.mark.django_db
def test_new_schedules_get_time_ordered_ids(db_now):
    first = api.create_interval("first", every=1, unit="HOURS", topic="t", event_type="e").pk
    second = ScheduleFactory().schedule_id
    assert Schedule._meta.pk.default is ids.uuid7
    assert first.version == second.version == 7
    assert first < second
    assert abs(millis(first) / 1000 - db_now().timestamp()) < 60


@pytest.mark.django_db
def test_the_sql_form_makes_the_same_layout_in_order():
    rows = sql(f"SELECT {ids.sql('i')}, {ids.MILLIS_NOW} FROM generate_series(0, 9999) AS i")
    made = [row[0] for row in rows]
    assert all(value.version == 7 and value.variant == uuid.RFC_4122 for value in made)
    assert {millis(value) for value in made} == {rows[0][1]}
    assert made == sorted(made)
    assert len(set(made)) == len(made)
