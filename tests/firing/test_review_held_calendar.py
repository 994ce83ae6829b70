"""Review probe (holds): a calendar edit that drops the slot BUFFER_ONE holds: once the run
ends, the held slot does not fire (recorded as excluded), the hold ends, and the slot after
the window fires."""

from __future__ import annotations

import pytest

from django_dsched import api
from django_dsched.changes import calendars
from django_dsched.enums import OverlapPolicy
from django_dsched.models import Schedule
from tests.fire_path import fire
from tests.firing.test_overlap import MINUTE, complete, fired_slots, newest, overlapping

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_held_slot_a_calendar_edit_drops_does_not_fire_and_the_hold_ends(fence, db_now):
    ops = api.create_calendar("Ops", weekend=[])
    schedule = overlapping(db_now, OverlapPolicy.BUFFER_ONE)
    Schedule.objects.filter(pk=schedule.pk).update(calendar_ids=[ops.pk])
    schedule.refresh_from_db()
    start = schedule.start_ts
    assert fire(fence).fired == 1
    first = newest(schedule)
    assert fire(fence).buffered == 1
    schedule.refresh_from_db()
    held = schedule.next_slot_ts
    window = calendars.windows_of(
        [{"kind": "ONE_OFF", "start_ts": held, "end_ts": held + 3 * MINUTE}]
    )
    calendars.save_calendar(ops, window)
    complete(first)
    assert fire(fence).calendar_fates == {"excluded": 3}
    schedule.refresh_from_db()
    assert fired_slots(schedule) == [start, held + 3 * MINUTE]
    for _ in range(3):
        fire(fence)
    schedule.refresh_from_db()
    assert schedule.held_by is None
    assert not [s for s in fired_slots(schedule) if held <= s < held + 3 * MINUTE]
