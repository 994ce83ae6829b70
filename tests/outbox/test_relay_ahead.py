"""The relay under a backlog: it claims its next batch while it sends the end of this one,
and sizes its claims by how fast its last batch was sent."""

from __future__ import annotations

import time

import pytest
from django.db.models.functions import Now

from django_dsched.enums import DeliveryStatus
from django_dsched.models import OutboxMessage
from django_dsched.outbox import pace
from django_dsched.outbox.ahead import CLAIM_AHEAD_MIN
from django_dsched.outbox.claims import Claimer, claim
from django_dsched.outbox.relay import Relay
from tests.helpers import other_session, wait_for
from tests.outbox_helpers import make_messages, statuses

pytestmark = pytest.mark.django_db(transaction=True)

BATCH = CLAIM_AHEAD_MIN


def claimed_by(relay_id: str) -> int:
    """Messages claimed by ``relay_id`` and not settled (committed: the claims are)."""
    return OutboxMessage.objects.filter(status=DeliveryStatus.PENDING, claimed_by=relay_id).count()


def expired(relay_id: str) -> int:
    """Claims of ``relay_id`` past their visibility timeout (the database's clock)."""
    return OutboxMessage.objects.filter(
        status=DeliveryStatus.PENDING, claimed_by=relay_id, claimed_until__lt=Now()
    ).count()


def test_under_a_backlog_the_next_batch_is_claimed_while_this_one_is_sent(relay_settings, handle):
    seen: list[str] = []
    during_second_batch: list[int] = []

    def record(event):
        seen.append(event["id"])
        if len(seen) == 2 * BATCH - 5:
            # Sending the end of the second batch (the pace known): the third is claimed
            # meanwhile. A relay that claimed only after sending would never get there.
            wait_for(lambda: claimed_by("r1") >= 2 * BATCH, timeout=20)
            during_second_batch.append(claimed_by("r1"))

    handle(record, topic="reports")
    ids = make_messages(3 * BATCH + 50)

    assert Relay(instance_id="r1", batch_size=BATCH).run_until_idle() == 3 * BATCH + 50

    # The second batch (settled once it is all sent) and the third.
    assert during_second_batch == [2 * BATCH]
    assert seen == [str(i) for i in ids]  # each once, oldest first
    assert statuses() == {DeliveryStatus.DELIVERED: 3 * BATCH + 50}
    assert set(OutboxMessage.objects.values_list("attempts", flat=True)) == {1}


def test_the_claim_ahead_waits_for_the_end_of_a_slow_batch(relay_settings, handle, monkeypatch):
    """A send that hangs in the middle of a batch holds no batch claimed ahead, and what
    arrives meanwhile is not queued behind one: the claim ahead is made near the end of a
    batch (with 20 ms a message, beside its settle), not when the batch begins."""
    monkeypatch.setattr(pace, "BATCH_SECONDS", 60.0)  # whole batches at 20 ms a message
    seen: list[str] = []
    held: list[int] = []

    def slow(event):
        seen.append(event["id"])
        time.sleep(0.02)  # at least: the middle of a batch is 1 s of sending from its end
        if len(seen) == BATCH + BATCH // 2:  # the middle of the second batch
            held.append(claimed_by("r1"))

    handle(slow, topic="reports")
    make_messages(3 * BATCH)

    assert Relay(instance_id="r1", batch_size=BATCH).run_until_idle() == 3 * BATCH
    assert held == [BATCH]  # the batch in hand only


def test_a_batch_claimed_ahead_whose_claims_expired_is_renewed_before_it_is_sent(
    relay_settings, handle
):
    relay_settings.DSCHED_RELAY_VISIBILITY_TIMEOUT = 1.0
    seen: list[str] = []
    stolen = []

    def slow_end(event):
        seen.append(event["id"])
        if len(seen) == 2 * BATCH:
            # The last message of the second batch outlasts the visibility timeout while the
            # third batch waits, claimed ahead: another relay takes some of it over.
            wait_for(lambda: claimed_by("r1") == 2 * BATCH, timeout=20)
            wait_for(lambda: expired("r1") >= BATCH, timeout=20)  # not renewed meanwhile
            with other_session() as session, session.cursor() as cursor:
                live, _ = claim(cursor, Claimer("thief", 30, 5), 10)
                stolen.extend(str(m.id) for m in live)

    handle(slow_end, topic="reports")
    make_messages(3 * BATCH)
    relay = Relay(instance_id="r1", batch_size=BATCH)

    assert relay.run_until_idle() == 3 * BATCH - 10
    assert len(stolen) == 10 and not set(stolen) & set(seen)  # taken over: not sent again
    assert relay.stats.lost_claims == 10


def test_stopping_gives_back_the_batch_claimed_ahead(relay_settings, handle):
    relay = Relay(instance_id="r1", batch_size=BATCH)
    seen: list[str] = []

    def stop(event):
        seen.append(event["id"])
        if len(seen) == 2 * BATCH - 5:
            try:
                wait_for(lambda: claimed_by("r1") == 2 * BATCH, timeout=20)
            finally:
                relay.stop()

    handle(stop, topic="reports")
    make_messages(3 * BATCH + 50)

    relay.run()

    # All but five of the second batch were sent; those five and the whole batch claimed
    # ahead go back, claimable at once by any relay, no attempt spent.
    assert relay.stats.delivered == 2 * BATCH - 5
    assert relay.stats.released == BATCH + 5
    assert statuses() == {
        DeliveryStatus.DELIVERED: 2 * BATCH - 5,
        DeliveryStatus.PENDING: BATCH + 55,
    }
    rest = OutboxMessage.objects.filter(status=DeliveryStatus.PENDING)
    assert not rest.exclude(claimed_by="").exists()
    assert not rest.filter(attempts__gt=0).exists()


def test_a_slow_batch_makes_the_next_claim_smaller(relay_settings, handle, monkeypatch):
    monkeypatch.setattr(pace, "BATCH_SECONDS", 0.1)
    handle(lambda event: time.sleep(0.02), topic="reports")  # at least 20 ms a message
    make_messages(40)
    relay = Relay(instance_id="r1", batch_size=10)
    try:
        assert relay.claim_limit() == 10
        relay.step()
        assert relay.stats.delivered == 10
        # About 0.1 s of sending at 20 ms or more a message: 6 at most (int(0.1 / 0.02) + 1).
        assert relay.claim_limit() <= 6
        relay.step()
        assert relay.stats.delivered <= 16
    finally:
        relay.shutdown()


def test_a_small_batch_claims_nothing_ahead(relay_settings, handle):
    """Below CLAIM_AHEAD_MIN a relay claims one batch at a time: what it does not hold,
    another relay can take."""
    relay = Relay(instance_id="r1", batch_size=10)
    held: list[int] = []
    handle(lambda event: held.append(claimed_by("r1")), topic="reports")
    make_messages(30)
    try:
        relay.step()
        relay.step()
    finally:
        relay.shutdown()
    assert held == [10] * 20  # the batch in hand (settled once it is all sent), nothing more
