"""The relay (claim, claim-ahead, send, settle): messages the database refuses, messages
holding values at the edges of their types, and the database gone in the middle of a round.
The other messages are delivered in the same rounds, each once; a bad message is
dead-lettered with its reason (or waits on its own); the relay keeps its session."""

from __future__ import annotations

import pytest

from django_dsched.enums import DeliveryStatus
from django_dsched.models import OutboxMessage
from django_dsched.outbox.relay import Relay
from tests.faults.harness import (
    BIGINT_MAX,
    INTEGER_MAX,
    LAST_TIMESTAMP,
    REFUSALS,
    SMALLINT_MAX,
    deep_json,
    drive,
    refusing_all,
    terminated_at,
    write_by_hand,
)
from tests.outbox_helpers import make_messages

pytestmark = pytest.mark.django_db(transaction=True)


def status(message_id) -> tuple[str, str]:
    row = OutboxMessage.objects.values_list("status", "last_error").get(id=message_id)
    return row[0], row[1]


def all_delivered(ids, delivered) -> bool:
    return {str(i) for i in ids} <= set(delivered)


def settled(ids) -> bool:
    return not OutboxMessage.objects.filter(id__in=ids, status=DeliveryStatus.PENDING).exists()


# The settle's DELIVERED refused for one message; its failed attempt is not.
SETTLE_REFUSED = "{r}.id = '%s' AND {r}.status = 'DELIVERED'"
# The claim's update refused for one message (every claim of it).
CLAIM_REFUSED = "{r}.id = '%s' AND {r}.claimed_by <> ''"


def test_outcomes_the_database_refuses(delivered):
    healthy = make_messages(20)
    bad = {how: make_messages(1)[0] for how in REFUSALS}
    relay = Relay(instance_id="relay")
    try:
        rules = [("outbox_message_t", SETTLE_REFUSED % m, how) for how, m in bad.items()]
        with refusing_all(rules):
            drive(
                relay,
                15,
                until=lambda: (
                    all(status(m)[0] == DeliveryStatus.DELIVERY_FAILED for m in bad.values())
                    and all_delivered(healthy, delivered)
                ),
            )
    finally:
        relay.shutdown()
    # Each bad one was sent each attempt, its outcome recorded as a failed attempt naming
    # the refusal, and dead-lettered with it at the last attempt.
    for how, message in bad.items():
        state, error = status(message)
        expected = "CheckViolation (23514)" if how == "check" else "RaiseException (P0001)"
        assert state == DeliveryStatus.DELIVERY_FAILED and expected in error, error
    assert all_delivered(healthy, delivered)
    assert sorted(delivered).count(str(healthy[0])) == 1
    assert relay.stats.db_errors == 0


@pytest.mark.parametrize("ahead", [False, True], ids=["claim", "claim ahead"])
def test_a_message_the_database_refuses_to_claim(delivered, ahead):
    """Every claim of one message refused: the others are delivered, that one is
    dead-lettered with the reason, or passed over for a while."""
    healthy = make_messages(150 if ahead else 10)  # before the bad ones, and after
    bad = {how: make_messages(1)[0] for how in REFUSALS}
    healthy += make_messages(150 if ahead else 10)
    relay = Relay(instance_id="relay", batch_size=100)
    try:
        rules = [("outbox_message_t", CLAIM_REFUSED % m, how) for how, m in bad.items()]
        with refusing_all(rules):
            drive(relay, 3, until=lambda: all_delivered(healthy, delivered))
    finally:
        relay.shutdown()
    assert all_delivered(healthy, delivered)


# Values no door lets in, written by hand on a message (or its event) of their own.
EDGES = {
    "next attempt=infinity": ("outbox_message_t", {"next_attempt_ts": "'infinity'"}),
    "claimed until=year 294276": ("outbox_message_t", {"claimed_until": LAST_TIMESTAMP}),
    "priority=max smallint": ("outbox_message_t", {"priority": str(SMALLINT_MAX)}),
    "version=max bigint": ("outbox_message_t", {"aggregate_version": str(BIGINT_MAX)}),
    "payload 10,000 deep": ("event_store_t", {"payload": f"'{deep_json(10_000)}'::jsonb"}),
    "attempts=max int": ("outbox_message_t", {"attempts": str(INTEGER_MAX)}),
    "event's time=year 294276": ("event_store_t", {"event_ts": LAST_TIMESTAMP}),
    "event's time=-infinity": ("event_store_t", {"event_ts": "'-infinity'"}),
    "payload of 8 MB": (
        "event_store_t",
        {"payload": "jsonb_build_object('x', repeat('x', 8 * 1024 * 1024))"},
    ),
    "its own time=-infinity": ("outbox_message_t", {"event_ts": "'-infinity'"}),
}


def edge_messages(unchecked, edges):
    """The database refuses such times now (the range CHECKs): they are written as rows
    written before them hold them."""
    healthy = make_messages(20)
    bad = {}
    for what, (table, columns) in edges.items():
        [message] = make_messages(1)
        with unchecked(table):
            assert write_by_hand(table, "id", message, **columns), what
        bad[what] = message
    return healthy, bad


def delivers_around(delivered, healthy, bad):
    relay = Relay(instance_id="relay")
    try:
        drive(relay, 10, until=lambda: all_delivered(healthy, delivered))
        drive(relay, 1)
    finally:
        relay.shutdown()
    assert all_delivered(healthy, delivered)
    assert len(delivered) == len(set(delivered))
    assert relay.stats.db_errors == 0
    # Each bad message was delivered, or waits (its own time), or is dead-lettered with why.
    for what, message in bad.items():
        state, error = status(message)
        assert state != DeliveryStatus.DELIVERY_FAILED or error, what


def test_messages_at_the_edges_of_their_types(delivered, unchecked):
    delivers_around(delivered, *edge_messages(unchecked, EDGES))


# A relay's round: the claim, the settle.
ROUND = (r"FOR UPDATE OF o SKIP LOCKED", r"^\s*UPDATE outbox_message_t m\s+SET status = CASE")


def test_the_database_gone_in_the_middle_of_a_round(delivered):
    """The relay's session ends at its claim, then at its settle: it reconnects; every
    message is delivered, at least once (the batch whose settle was lost goes again once
    its claims expire, with the same ids), none lost."""
    ids = make_messages(20)
    relay = Relay(instance_id="relay", batch_size=10)
    try:
        with terminated_at(*ROUND) as met:
            drive(relay, 10, until=lambda: len(met) == len(ROUND))
        drive(relay, 10, until=lambda: all_delivered(ids, delivered) and settled(ids))
    finally:
        relay.shutdown()
    assert len(met) == len(ROUND) and relay.stats.db_errors >= len(ROUND)
    assert all_delivered(ids, delivered)
    assert len(delivered) - len(set(delivered)) <= 10  # one batch again, at most
    assert set(OutboxMessage.objects.values_list("status", flat=True)) == {DeliveryStatus.DELIVERED}
