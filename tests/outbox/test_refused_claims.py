"""One outbox row cannot stop the others' delivery (issue 38), in every statement of the relay.

* A row the relay cannot read (``event_ts`` = ``-infinity``): each claim failed after it
  committed, so every message of the batch, other tenants' included, ran out of attempts
  unsent. Now it is dead-lettered at its claim with the reason, and the others are sent.
* A row the database refuses to claim (a CHECK ... NOT VALID or a trigger an operator
  added): every claim failed, and nothing was delivered. Now the claim narrows down to it
  under savepoints, dead-letters it with the database's error if it can, else passes over it
  for a while (the relay's quarantine), and delivers the rest; a claim passing over held-back
  destinations runs the same narrowing. The heartbeat's ``EXTEND`` and a stopping relay's
  ``RELEASE`` likewise lose only the refused row.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from django_dsched.enums import DeliveryStatus
from django_dsched.models import OutboxMessage
from django_dsched.outbox.claims import claim_batch
from django_dsched.outbox.holding import extend
from django_dsched.outbox.messages import Claimed
from django_dsched.outbox.relay import Relay
from django_dsched.runtime import binding
from tests.helpers import sql
from tests.outbox_helpers import make_messages

pytestmark = pytest.mark.django_db(transaction=True)

TENANTS = [uuid.UUID(int=n + 1) for n in range(4)]


def others(count: int = 20) -> list[uuid.UUID]:
    """``count`` messages of four other tenants, claimed before and after the bad one."""
    return [
        id_
        for n in range(count // 4)
        for id_ in make_messages(4, host_id=TENANTS[n % 4], age=10 - n)
    ]


def status_of(ids: list[uuid.UUID]) -> dict[str, int]:
    found: dict[str, int] = {}
    for status in OutboxMessage.objects.filter(id__in=ids).values_list("status", flat=True):
        found[status] = found.get(status, 0) + 1
    return found


@pytest.fixture
def delivered(handle, settings) -> list[str]:
    # The messages are several tenants': their route and handlers serve every host.
    settings.DSCHED_TRANSPORTS = {"*": {"BACKEND": "handlers", "HOSTS": "*"}}
    seen: list[str] = []
    handle(lambda event: seen.append(event["id"]), topic="reports", hosts="*")
    handle(lambda event: seen.append(event["id"]), topic="poison", hosts="*")
    return seen


@pytest.fixture
def trigger() -> Iterator[None]:
    """``trigger(condition)``: a BEFORE UPDATE trigger on outbox_message_t that raises for
    rows where ``condition`` (over OLD and NEW) holds, for the test only."""
    made = []

    def add(condition: str) -> None:
        sql(
            "CREATE FUNCTION dsched_test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$"
            f" BEGIN IF {condition} THEN RAISE EXCEPTION 'refused by the operator''s rule';"
            " END IF; RETURN NEW; END $$"
        )
        sql(
            "CREATE TRIGGER dsched_test_refuse BEFORE UPDATE ON outbox_message_t"
            " FOR EACH ROW EXECUTE FUNCTION dsched_test_refuse()"
        )
        made.append(True)

    yield add
    if made:
        sql("DROP TRIGGER dsched_test_refuse ON outbox_message_t")
        sql("DROP FUNCTION dsched_test_refuse()")


@pytest.fixture
def constraint() -> Iterator[None]:
    """A CHECK on outbox_message_t that rows already there need not meet (NOT VALID): every
    update of such a row is refused."""
    yield lambda check: sql(
        f"ALTER TABLE outbox_message_t ADD CONSTRAINT relay_test_refuses CHECK ({check}) NOT VALID"
    )
    sql("ALTER TABLE outbox_message_t DROP CONSTRAINT IF EXISTS relay_test_refuses")


# -- a row the relay cannot read ---------------------------------------------------------


@pytest.mark.parametrize(
    "value", ["-infinity", "0001-01-01 00:00:00+00 BC", "4713-11-24 00:00:00+00 BC"]
)
def test_a_message_whose_time_cannot_be_read_is_dead_lettered_and_the_rest_delivered(
    relay_settings, delivered, unchecked, value
):
    healthy = others()
    [bad] = make_messages(1, host_id=uuid.uuid4(), age=8)
    with unchecked("outbox_message_t"):
        sql("UPDATE outbox_message_t SET event_ts = %s WHERE id = %s", [value, bad])

    relay = Relay(instance_id="r1")
    assert relay.run_until_idle() == 20

    assert relay.stats.db_errors == 0
    assert sorted(delivered) == sorted(str(i) for i in healthy)
    assert status_of(healthy) == {DeliveryStatus.DELIVERED: 20}
    status, attempts, error = sql(
        "SELECT status, attempts, last_error FROM outbox_message_t WHERE id = %s", [bad]
    )[0]
    assert (status, attempts) == (DeliveryStatus.DELIVERY_FAILED, 0)
    assert "event_ts" in error and "years 1 to 9999" in error
    assert relay.stats.dead_lettered == 1


def test_the_database_refuses_to_store_such_a_time():
    from django.db import IntegrityError

    [message] = make_messages(1)
    for column in ("event_ts", "next_attempt_ts", "claimed_until", "delivered_ts", "picked_ts"):
        with pytest.raises(IntegrityError, match="dsched_outbox_times_in_range"):
            sql(f"UPDATE outbox_message_t SET {column} = '-infinity' WHERE id = %s", [message])
    with pytest.raises(IntegrityError, match="dsched_event_times_in_range"):
        sql("UPDATE event_store_t SET event_ts = '294270-01-01' WHERE id = %s", [message])


def test_the_largest_attempts_is_dead_lettered_at_claim(relay_settings, delivered):
    healthy = others(8)
    [edge] = make_messages(1, age=8)
    sql("UPDATE outbox_message_t SET attempts = %s WHERE id = %s", [2**31 - 1, edge])
    relay = Relay(instance_id="r1")
    assert relay.run_until_idle() == 8
    assert status_of(healthy) == {DeliveryStatus.DELIVERED: 8}
    assert status_of([edge]) == {DeliveryStatus.DELIVERY_FAILED: 1}


# -- a row the database refuses to claim -------------------------------------------------


def poisoned_round(refuse, rule: str) -> tuple[uuid.UUID, Relay]:
    """Twenty messages of four tenants and one of another tenant, which the operator's
    ``rule`` (added by ``refuse``) refuses: one relay, run until idle, delivers the twenty."""
    healthy = others()
    [bad] = make_messages(1, topic="poison", host_id=uuid.uuid4(), age=8)
    refuse(rule)
    relay = Relay(instance_id="r1")
    assert relay.run_until_idle() == 20
    assert relay.stats.db_errors == 0
    assert status_of(healthy) == {DeliveryStatus.DELIVERED: 20}
    return bad, relay


def test_a_message_whose_claim_is_refused_is_dead_lettered_with_the_error(
    relay_settings, delivered, trigger
):
    # The operator's rule refuses claims of that topic, not other updates.
    bad, _relay = poisoned_round(trigger, "NEW.topic = 'poison' AND NEW.claimed_by <> ''")
    row = OutboxMessage.objects.get(id=bad)
    assert (row.status, row.attempts, row.claimed_by) == (DeliveryStatus.DELIVERY_FAILED, 0, "")
    assert "RaiseException (P0001): refused by the operator's rule" in row.last_error
    assert str(bad) not in delivered


def test_a_message_the_database_will_not_even_dead_letter_is_passed_over(
    relay_settings, delivered, constraint
):
    bad, relay = poisoned_round(constraint, "topic <> 'poison'")  # refuses every update
    row = OutboxMessage.objects.get(id=bad)
    assert (row.status, row.attempts, row.claimed_by) == (DeliveryStatus.PENDING, 0, "")
    assert list(relay.quarantine.until) == [bad]
    # Passed over: the next claim finds nothing, and the relay does not spin on it.
    again = Relay(instance_id="r1")
    again.quarantine = relay.quarantine
    again._ensure_session()
    assert again.step() > 0
    assert again.stats.db_errors == 0
    again.shutdown()


def test_several_refused_messages_in_one_batch_are_each_found(relay_settings, delivered, trigger):
    healthy = others()
    bad = [make_messages(1, topic="poison", age=9 - n)[0] for n in range(3)]
    trigger("NEW.topic = 'poison' AND NEW.claimed_by <> ''")
    relay = Relay(instance_id="r1")
    assert relay.run_until_idle() == 20
    assert status_of(healthy) == {DeliveryStatus.DELIVERED: 20}
    assert status_of(bad) == {DeliveryStatus.DELIVERY_FAILED: 3}


def test_a_claim_passing_over_held_back_destinations_runs_the_same_narrowing(
    relay_settings, delivered, trigger
):
    """The claim of a relay that passes over destinations it holds enough of (another
    statement) narrows down to the refused row the same way."""
    healthy = others()
    [bad] = make_messages(1, topic="poison", age=8)
    trigger("NEW.topic = 'poison' AND NEW.claimed_by <> ''")
    relay = Relay(instance_id="r1")
    try:
        relay._ensure_session()
        relay._held_back = [f"{uuid.UUID(int=0xF)} reports"]  # a destination with no message
        claimed = relay._claim(100, relay.batch_bytes, None)
        assert sorted(m.id for m in claimed.live) == sorted(healthy)
        assert [m.id for m in claimed.dead] == [bad]
    finally:
        relay.shutdown()
    assert status_of([bad]) == {DeliveryStatus.DELIVERY_FAILED: 1}


@pytest.fixture
def claimed_batch() -> Iterator[tuple[list[uuid.UUID], uuid.UUID, Relay, Claimed]]:
    """Eight healthy messages and a poison one, claimed by a relay (stopped afterwards)."""
    from django.db import connections

    healthy = others(8)
    [bad] = make_messages(1, topic="poison", age=8)
    relay = Relay(instance_id="r1")
    relay._ensure_session()
    with binding.cursor(connections[relay.using]) as cursor:
        claimed = claim_batch(cursor, relay.claimer, 100)
    assert len(claimed.live) == 9
    yield healthy, bad, relay, claimed
    relay.shutdown()


def test_a_refused_extend_loses_only_that_claim(relay_settings, trigger, claimed_batch):
    healthy, bad, relay, claimed = claimed_batch
    before = dict(sql("SELECT id, claimed_until FROM outbox_message_t"))
    # Renewals of that topic are refused (a claim and a settle are not).
    trigger("NEW.topic = 'poison' AND OLD.claimed_by <> '' AND NEW.claimed_by = OLD.claimed_by")
    relay.heartbeat.hold(claimed.live)
    relay.heartbeat.beat()
    after = dict(sql("SELECT id, claimed_until FROM outbox_message_t"))
    assert all(after[i] > before[i] for i in healthy)
    assert after[bad] == before[bad]
    assert relay.heartbeat.lost() == {bad}
    held, refused = extend(relay.using, relay.claimer, claimed.live)
    assert held == set(healthy) and [m.id for m, _ in refused] == [bad]


def test_a_refused_release_keeps_the_others_released(relay_settings, trigger, claimed_batch):
    healthy, bad, relay, claimed = claimed_batch
    trigger("NEW.topic = 'poison' AND NEW.claimed_by = '' AND NEW.attempts < OLD.attempts")
    relay._release(claimed.live)
    assert relay.stats.released == 8
    rows = dict(sql("SELECT id, claimed_by FROM outbox_message_t"))
    assert {rows[i] for i in healthy} == {""}
    assert rows[bad] == "r1"  # its claim expires after the visibility timeout
