"""One outcome cannot lose a batch's others (issue 23): what the relay stores from endpoints,
transports and handlers is made storable, and an outcome the database refuses is recorded as
a failed attempt while the batch's other outcomes are kept.

Real PostgreSQL, a real local HTTP endpoint (``tests/webhook_servers.Sink``); two tenants
(hosts) routed to their own webhook URLs by ``DSCHED_TRANSPORTS_BY_HOST``.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Iterator

import pytest

from django_dsched.enums import DeliveryStatus
from django_dsched.models import OutboxMessage
from django_dsched.outbox.relay import Relay
from tests.helpers import sql
from tests.outbox_helpers import make_messages
from tests.webhook_servers import Sink

pytestmark = pytest.mark.django_db(transaction=True)

HOSTILE = uuid.UUID("aaaaaaaa-0000-4000-8000-000000000001")  # the tenant whose endpoint misbehaves
HEALTHY = uuid.UUID("bbbbbbbb-0000-4000-8000-000000000002")
CONSTRAINT = "relay_test_refuses"


def route(settings, sink: str, hostile_path: str) -> None:
    """The healthy tenant's messages go to ``/ok``, the hostile tenant's to ``hostile_path``."""
    settings.DSCHED_TRANSPORTS = {
        "*": {
            "BACKEND": "webhook",
            "HOSTS": [str(HEALTHY)],
            "OPTIONS": {"URL": sink + "/ok/{host}/{topic}", "TIMEOUT": 2},
        }
    }
    settings.DSCHED_TRANSPORTS_BY_HOST = {
        str(HOSTILE): {
            "*": {"BACKEND": "webhook", "OPTIONS": {"URL": sink + hostile_path, "TIMEOUT": 2}}
        }
    }


def one_batch() -> tuple[list[uuid.UUID], uuid.UUID]:
    """Healthy messages claimed before and after the hostile one, all in one batch."""
    before = make_messages(2, host_id=HEALTHY, age=3)
    (hostile,) = make_messages(1, host_id=HOSTILE, age=2)
    after = make_messages(2, host_id=HEALTHY, age=1)
    return before + after, hostile


def expire_claims_and_backoffs() -> None:
    """Every claim expires and every retry is due: a message with no recorded outcome, or one
    to retry, is claimed again by the next relay."""
    sql(
        "UPDATE outbox_message_t SET claimed_until = clock_timestamp() - interval '1 second', "
        "next_attempt_ts = NULL WHERE status = 'PENDING'"
    )


def sends() -> Counter[str]:
    """How many times the endpoint received each message (its Idempotency-Key)."""
    return Counter(headers["Idempotency-Key"] for _, headers, _ in Sink.requests)


def rows(ids: list[uuid.UUID]) -> set[tuple[str, int]]:
    return set(OutboxMessage.objects.filter(id__in=ids).values_list("status", "attempts"))


@pytest.mark.parametrize(
    ("status", "after_two_rounds", "hostile_sends"),
    [(500, (DeliveryStatus.PENDING, 2), 2), (400, (DeliveryStatus.DELIVERY_FAILED, 1), 1)],
    ids=["retryable", "permanent"],
)
def test_a_nul_in_one_reply_loses_no_other_outcome(
    relay_settings, sink, status, after_two_rounds, hostile_sends
):
    route(relay_settings, sink, f"/nul?status={status}")
    healthy, hostile = one_batch()

    first = Relay(instance_id="r1")
    first.run_until_idle()
    expire_claims_and_backoffs()
    Relay(instance_id="r2").run_until_idle()

    assert first.stats.db_errors == 0 and first.stats.batches == 1
    # The other tenant's messages were answered 200 once and recorded once: never sent again.
    assert {sends()[str(i)] for i in healthy} == {1}
    assert rows(healthy) == {(DeliveryStatus.DELIVERED, 1)}
    assert sends()[str(hostile)] == hostile_sends
    row = OutboxMessage.objects.get(id=hostile)
    assert (row.status, row.attempts) == after_two_rounds
    # The failure is recorded, readable: the NUL shows as an escape.
    kind = "DeliveryError" if status == 500 else "PermanentDeliveryError"
    assert row.last_error == f"{kind}: HTTP {status} from {sink}: bad\\x00reply"


class Unreadable(Exception):
    def __str__(self) -> str:
        raise ValueError("no text")


def test_a_handlers_exception_text_is_stored_readable_and_cannot_stop_the_relay(
    relay_settings, handle
):
    def nul_and_surrogate(event):
        raise RuntimeError("bad\x00text \udcff end")

    def unreadable(event):
        raise Unreadable

    def long(event):
        raise RuntimeError("x" * 5000)

    for func in (nul_and_surrogate, unreadable, long):
        handle(func, topic=func.__name__)
    handle(lambda event: None, topic="fine")
    fine = make_messages(2, topic="fine", age=3)
    failing = [make_messages(1, topic=t, age=2)[0] for t in ("nul_and_surrogate", "unreadable")]
    failing += make_messages(1, topic="long", age=1)
    fine += make_messages(1, topic="fine")

    relay = Relay(instance_id="r1")
    assert relay.run_until_idle() == 3

    assert relay.stats.db_errors == 0 and relay.stats.batches == 1
    assert rows(fine) == {(DeliveryStatus.DELIVERED, 1)}
    assert rows(failing) == {(DeliveryStatus.PENDING, 1)}
    errors = dict(OutboxMessage.objects.values_list("id", "last_error"))
    nul, opaque, too_long = (errors[i] for i in failing)
    assert nul == "RuntimeError: bad\\x00text \\udcff end"
    assert opaque == "Unreadable (its message could not be read: ValueError)"
    assert len(too_long) == 2000 and too_long.startswith("RuntimeError: xxx")


@pytest.fixture
def refuse() -> Iterator[Callable[[str], None]]:
    """``refuse(check)``: add the CHECK constraint CONSTRAINT on outbox_message_t, NOT VALID
    (rows already there are not checked, rows written from now on are), for the test only."""

    def add(check: str) -> None:
        sql(f"ALTER TABLE outbox_message_t ADD CONSTRAINT {CONSTRAINT} CHECK ({check}) NOT VALID")

    yield add
    sql(f"ALTER TABLE outbox_message_t DROP CONSTRAINT IF EXISTS {CONSTRAINT}")


def test_an_outcome_the_database_refuses_is_recorded_as_a_failed_attempt(
    relay_settings, sink, refuse
):
    # The hostile endpoint's error ("try later") is storable text, but a constraint refuses it.
    route(relay_settings, sink, "/fail")
    refuse("last_error NOT LIKE '%try later%'")
    healthy, hostile = one_batch()

    first = Relay(instance_id="r1")
    first.run_until_idle()
    expire_claims_and_backoffs()
    Relay(instance_id="r2").run_until_idle()

    assert first.stats.db_errors == 0 and first.stats.refused == 1
    assert {sends()[str(i)] for i in healthy} == {1}
    assert rows(healthy) == {(DeliveryStatus.DELIVERED, 1)}
    row = OutboxMessage.objects.get(id=hostile)
    assert (row.status, row.attempts, sends()[str(hostile)]) == (DeliveryStatus.PENDING, 2, 2)
    assert row.next_attempt_ts is not None and row.claimed_by == ""
    assert row.last_error.startswith(
        "the outcome of this attempt (sent and failed) could not be stored: the database "
        'refused it (CheckViolation (23514): new row for relation "outbox_message_t'
    )
    assert row.last_error.endswith(
        f'violates check constraint "{CONSTRAINT}"); recorded as a failed attempt instead'
    )


def test_an_outcome_a_user_trigger_refuses_loses_no_other(relay_settings, sink):
    """A trigger's RAISE (SQLSTATE P0001, an InternalError to the driver) is a refusal of
    that row too, not a reason to drop the batch."""
    route(relay_settings, sink, "/fail")
    sql(
        "CREATE FUNCTION dsched_test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$"
        " BEGIN IF NEW.last_error LIKE '%%try later%%' THEN RAISE EXCEPTION 'not here'; END IF;"
        " RETURN NEW; END $$"
    )
    sql(
        "CREATE TRIGGER dsched_test_refuse BEFORE UPDATE ON outbox_message_t"
        " FOR EACH ROW EXECUTE FUNCTION dsched_test_refuse()"
    )
    try:
        healthy, hostile = one_batch()
        relay = Relay(instance_id="r1")
        relay.run_until_idle()
    finally:
        sql("DROP TRIGGER dsched_test_refuse ON outbox_message_t")
        sql("DROP FUNCTION dsched_test_refuse()")
    assert relay.stats.db_errors == 0 and relay.stats.refused == 1
    assert rows(healthy) == {(DeliveryStatus.DELIVERED, 1)}
    row = OutboxMessage.objects.get(id=hostile)
    assert "(RaiseException (P0001): not here)" in row.last_error


def test_an_outcome_refused_even_as_a_failed_attempt_loses_no_other(relay_settings, sink, refuse):
    route(relay_settings, sink, "/fail")
    healthy, hostile = one_batch()
    # No outcome of this message can be written: every outcome gives up the claim.
    refuse(f"id <> '{hostile}'::uuid OR claimed_by <> ''")

    relay = Relay(instance_id="r1")
    relay.run_until_idle()

    assert relay.stats.db_errors == 0 and relay.stats.unrecorded == 1
    assert rows(healthy) == {(DeliveryStatus.DELIVERED, 1)}
    row = OutboxMessage.objects.get(id=hostile)
    # Left as claimed: the claim expires, and the claim's limit dead-letters it in the end.
    assert (row.status, row.attempts, row.claimed_by) == (DeliveryStatus.PENDING, 1, "r1")


def test_a_batch_nothing_refuses_costs_one_statement(relay_settings, handle):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    handle(lambda event: None, topic="reports")
    make_messages(5)

    with CaptureQueriesContext(connection) as queries:
        assert Relay(instance_id="r1").run_until_idle() == 5

    statements = [q["sql"] for q in queries.captured_queries]
    assert sum("unnest(" in s and "delivered_ts =" in s for s in statements) == 1
    assert not any("SAVEPOINT" in s for s in statements)
