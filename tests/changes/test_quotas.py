"""The quota of live schedules per host: refused past it at every create (single, bulk,
declarations), with a message naming the host and the limit, nothing written; what counts
(active, paused, set aside) and what frees a place (cancel, completion); two sessions at the
limit never both get the last place."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from datetime import timedelta

import pytest
from django.db import connections, transaction

from django_dsched import api, declared
from django_dsched.changes import quotas
from django_dsched.enums import LIVE, ScheduleState
from django_dsched.exceptions import QuotaExceeded, ValidationError
from django_dsched.models import Event, Schedule, TenantQuota
from tests.helpers import lock_waiter, sql

pytestmark = pytest.mark.django_db

HOST = uuid.UUID(int=11)
OTHER = uuid.UUID(int=12)
COMMON = {"topic": "mail", "event_type": "reminder.send"}


@pytest.fixture(autouse=True)
def _no_new_tenant_rows(settings):
    """These tests give their hosts rows themselves: no row for a new tenant
    (DSCHED_TENANT_MAX_*, tested in tests/rest/test_quotas.py and tests/admin/test_quotas.py)."""
    settings.DSCHED_TENANT_MAX_ACTIVE_SCHEDULES = None
    settings.DSCHED_TENANT_MAX_FIRES_PER_SECOND = None


def create(name: str, host: uuid.UUID = HOST, **fields: object) -> Schedule:
    return api.create_interval(name=name, every=1, unit="MINUTES", host_id=host, **COMMON, **fields)


def spec(name: str, host: uuid.UUID = HOST, **fields: object) -> api.Interval:
    return api.Interval(name=name, every=1, unit="MINUTES", host_id=host, **COMMON, **fields)


def live(host: uuid.UUID = HOST) -> int:
    return Schedule.objects.filter(host_id=host, state__in=LIVE).count()


def test_a_create_past_the_quota_is_refused_naming_the_host_and_the_limit():
    TenantQuota.objects.create(host_id=HOST, max_active_schedules=2)
    create("a")
    create("b")
    events = Event.objects.count()
    with pytest.raises(QuotaExceeded) as refused:
        create("c")
    message = str(refused.value.messages[0])
    assert str(HOST) in message and "at most 2 live schedules" in message
    assert refused.value.code == "quota_exceeded"
    assert (refused.value.host_id, refused.value.limit) == (HOST, 2)
    assert isinstance(refused.value, ValidationError)
    assert live() == 2 and Event.objects.count() == events
    # Another host has no quota; the refused host's retry with a key that exists is the
    # existing schedule, not a refusal.
    create("c", host=OTHER)
    TenantQuota.objects.filter(host_id=HOST).update(max_active_schedules=3)
    keyed = api.create_once(key="k", delay=timedelta(hours=1), host_id=HOST, **COMMON)
    again = api.create_once(key="k", delay=timedelta(hours=1), host_id=HOST, **COMMON)
    assert again.schedule_id == keyed.schedule_id


def test_a_refusal_leaves_the_callers_transaction_usable():
    TenantQuota.objects.create(host_id=HOST, max_active_schedules=0)
    with transaction.atomic():
        with pytest.raises(QuotaExceeded):
            create("a")
        create("b", host=OTHER)  # the transaction goes on
    assert live(OTHER) == 1 and live() == 0


def test_paused_and_set_aside_hold_their_place_cancelled_and_completed_free_it():
    TenantQuota.objects.create(host_id=HOST, max_active_schedules=2)
    first = create("a")
    create("b")
    api.pause(first)
    with pytest.raises(QuotaExceeded):
        create("c")
    api.resume(first)  # takes no new place: never refused
    Schedule.objects.filter(pk=first.pk).update(state=ScheduleState.SET_ASIDE, active=False)
    with pytest.raises(QuotaExceeded):
        create("c")
    Schedule.objects.filter(pk=first.pk).update(state=ScheduleState.COMPLETED)
    create("c")
    api.cancel("c", host_id=HOST)
    create("d")
    assert live() == 2


def test_the_settings_default_applies_to_hosts_without_a_row_and_a_row_overrides_it(settings):
    settings.DSCHED_DEFAULT_MAX_ACTIVE_SCHEDULES = 1
    create("a")
    with pytest.raises(QuotaExceeded, match="at most 1 live"):
        create("b")
    TenantQuota.objects.create(host_id=HOST, max_active_schedules=None)  # no limit here
    create("b")
    create("c")
    TenantQuota.objects.create(host_id=OTHER, max_active_schedules=0)
    with pytest.raises(QuotaExceeded, match="at most 0 live"):
        create("x", host=OTHER)


def test_a_quota_given_to_a_host_applies_to_its_next_create_in_this_process():
    create("a")  # remembered: no quota
    TenantQuota.objects.create(host_id=HOST, max_active_schedules=1)  # forgets it
    with pytest.raises(QuotaExceeded):
        create("b")


def test_a_host_without_a_quota_pays_one_read_then_nothing(django_assert_num_queries):
    quotas.forget()

    def once(name: str) -> Schedule:  # one statement, the delay computed in SQL
        return api.create_once(name=name, delay=timedelta(hours=1), host_id=HOST, **COMMON)

    with django_assert_num_queries(2):  # its quota row, then the insert
        once("a")
    with django_assert_num_queries(1):
        once("b")


def test_a_bulk_call_past_the_quota_is_refused_whole():
    TenantQuota.objects.create(host_id=HOST, max_active_schedules=3)
    create("a")
    events = Event.objects.count()
    with pytest.raises(QuotaExceeded) as refused:
        api.bulk_create([spec("b"), spec("c"), spec("d"), spec("e", host=OTHER)])
    assert "the 3 this call creates" in refused.value.messages[0]
    assert str(HOST) in refused.value.messages[0] and "at most 3" in refused.value.messages[0]
    assert live() == 1 and live(OTHER) == 0 and Event.objects.count() == events
    # Up to the limit is fine; items whose key exists take no place.
    made = api.bulk_create([spec("b", key="kb"), spec("c", key="kc")])
    assert live() == 3
    again = api.bulk_create([spec("b", key="kb"), spec("c", key="kc")])
    assert [s.pk for s in again] == [s.pk for s in made]


def test_a_declared_schedule_past_the_quota_fails_the_sync_with_the_message(settings):
    settings.DSCHED_DEFAULT_MAX_ACTIVE_SCHEDULES = 1
    declarations = {
        name: {"every": 1, "unit": "MINUTES", "topic": "ops", "event_type": "ping"}
        for name in ("one", "two")
    }
    with pytest.raises(ValidationError, match=r"declared schedule 'two'.*at most 1 live"):
        declared.sync(declarations)
    assert Schedule.objects.count() == 0  # the sync is one transaction


def race(first: Callable[[], object], second: Callable[[], object]) -> dict[str, object]:
    """``first`` in session A, whose transaction stays open; then ``second`` in session B,
    until B waits for A's quota lock; then A commits. What each session ended with."""
    created = threading.Event()
    release = threading.Event()
    outcome: dict[str, object] = {}

    def session_a() -> None:
        try:
            with transaction.atomic():
                first()
                created.set()
                release.wait(timeout=30)
        except BaseException as exc:  # reported below
            outcome["a"] = exc
        finally:
            connections.close_all()

    def session_b() -> None:
        try:
            second()
            outcome["b"] = "created"
        except BaseException as exc:
            outcome["b"] = exc
        finally:
            connections.close_all()

    a = threading.Thread(target=session_a)
    a.start()
    assert created.wait(timeout=30)
    b = threading.Thread(target=session_b)
    b.start()
    lock_waiter("%pg_advisory_xact_lock%", what="session B waiting for the quota lock")
    release.set()
    a.join(timeout=30)
    b.join(timeout=30)
    return outcome


@pytest.mark.django_db(transaction=True)
def test_two_sessions_at_the_limit_never_both_get_the_last_place():
    """Session A creates the last allowed schedule and keeps its transaction open; session B
    creates one too and must wait for A's quota lock, then count A's row: refused."""
    TenantQuota.objects.create(host_id=HOST, max_active_schedules=2)
    create("a")
    outcome = race(lambda: create("from-a"), lambda: create("from-b"))
    assert "a" not in outcome, outcome
    assert isinstance(outcome["b"], QuotaExceeded), outcome
    names = sql("SELECT schedule_name FROM schedule_t WHERE host_id = %s ORDER BY 1", [HOST])
    assert names == [("a",), ("from-a",)]


@pytest.mark.django_db(transaction=True)
def test_two_bulk_calls_at_the_limit_never_both_fit():
    """Bulk calls count once inserted: B's count waits for A's quota lock (A keeps its
    transaction open), then sees A's rows beside its own: refused, undone."""
    TenantQuota.objects.create(host_id=HOST, max_active_schedules=3)
    outcome = race(
        lambda: api.bulk_create([spec("a-1"), spec("a-2")]),
        lambda: api.bulk_create([spec("b-1"), spec("b-2")]),
    )
    assert "a" not in outcome, outcome
    assert isinstance(outcome["b"], QuotaExceeded), outcome
    assert sorted(Schedule.objects.values_list("schedule_name", flat=True)) == ["a-1", "a-2"]
