from __future__ import annotations

import pytest

from django_dsched.cluster.lease import LeaseHolder
from django_dsched.models import Lease
from tests.helpers import backend_gone, backend_pid, other_session, sql, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def make_lease(wrapper, instance: str, *, fast: bool = True, lease: float = 2.0) -> LeaseHolder:
    return LeaseHolder(
        wrapper, lease_id=1, instance_id=instance, lease_seconds=lease, fast_failover=fast
    )


def expire_lease() -> None:
    sql("UPDATE scheduler_lock_t SET last_heartbeat = clock_timestamp() - interval '1 hour'")


def test_first_instance_takes_the_lease_and_others_wait():
    with other_session() as s1, other_session() as s2:
        a, b = make_lease(s1, "a"), make_lease(s2, "b")
        assert a.try_acquire() and a.epoch == 1
        assert not b.try_acquire()
        assert a.renew()
        row = Lease.objects.get()
        assert (row.instance_id, row.epoch, row.holder_pid) == ("a", 1, backend_pid(s1))


def test_expired_lease_is_taken_with_a_new_epoch_and_the_old_holder_cannot_renew():
    with other_session() as s1, other_session() as s2:
        a, b = make_lease(s1, "a"), make_lease(s2, "b")
        assert a.try_acquire()
        expire_lease()
        assert b.try_acquire()
        assert b.epoch == a.epoch + 1
        assert not a.renew()
        assert not a.is_leader
        assert Lease.objects.get().instance_id == "b"


def test_renewing_keeps_the_lease_from_expiring():
    with other_session() as s1, other_session() as s2:
        a, b = make_lease(s1, "a"), make_lease(s2, "b")
        assert a.try_acquire()
        sql("UPDATE scheduler_lock_t SET last_heartbeat = clock_timestamp() - interval '1.9 s'")
        assert a.renew()
        assert not b.try_acquire()


def test_graceful_release_lets_a_standby_take_over_at_once():
    with other_session() as s1, other_session() as s2:
        a, b = make_lease(s1, "a"), make_lease(s2, "b")
        assert a.try_acquire()
        a.release()
        assert not a.is_leader
        assert b.try_acquire()
        assert b.epoch == 2


def test_fast_failover_when_the_leaders_session_ends():
    with other_session() as s2:
        b = make_lease(s2, "b")
        with other_session() as s1:
            a = make_lease(s1, "a")
            assert a.try_acquire()
            pid = backend_pid(s1)
            assert not b.try_acquire()
        wait_for(lambda: backend_gone(pid), timeout=5, what="the leader's backend to exit")
        # The lease is fresh (2 s) but its holder's session is gone.
        assert b.try_acquire()


def test_without_fast_failover_a_standby_waits_for_expiry():
    with other_session() as s2:
        b = make_lease(s2, "b", fast=False)
        with other_session() as s1:
            assert make_lease(s1, "a").try_acquire()
            pid = backend_pid(s1)
        wait_for(lambda: backend_gone(pid), timeout=5, what="the leader's backend to exit")
        assert not b.try_acquire()
        expire_lease()
        assert b.try_acquire()


def test_a_paused_leader_does_not_block_takeover_by_expiry():
    """A stopped process keeps its session: no fast failover, but expiry still works."""
    with other_session() as s1, other_session() as s2:
        a, b = make_lease(s1, "a"), make_lease(s2, "b")
        assert a.try_acquire()
        assert not b.try_acquire()  # a's backend is alive
        expire_lease()
        assert b.try_acquire()


def test_same_instance_id_in_two_processes_cannot_share_the_lease():
    with other_session() as s1, other_session() as s2:
        a1, a2 = make_lease(s1, "same"), make_lease(s2, "same")
        assert a1.try_acquire()
        assert not a2.try_acquire()
        a2.epoch = None
        assert not a2.renew()


def test_missing_lock_row_heals_itself():
    with other_session() as s1:
        a = make_lease(s1, "a")
        assert a.try_acquire()
        sql("DELETE FROM scheduler_lock_t")
        assert not a.renew()
        assert a.try_acquire()
        assert a.epoch == 1


def test_trust_window_ends_without_renewal():
    with other_session() as s1:
        a = make_lease(s1, "a", lease=2.0)
        assert a.try_acquire()
        assert a.is_trusted()
        a.trusted_until -= 10
        assert not a.is_trusted()


def test_a_leader_behind_a_pooler_offers_no_pid_so_standbys_wait_for_expiry():
    """Behind a pooler a backend's life is not the leader's: the pid rule must not apply."""
    with other_session() as s2:
        b = make_lease(s2, "b")
        with other_session() as s1:
            a = make_lease(s1, "a")
            a.direct_session = False
            assert a.try_acquire() and a.renew()
            assert Lease.objects.get().holder_pid == 0
            pid = backend_pid(s1)
        # The backend the leader used is gone (a pooler closed it): the leader may live on.
        wait_for(lambda: backend_gone(pid), timeout=5, what="the backend to exit")
        assert not b.try_acquire()
        expire_lease()
        assert b.try_acquire()
