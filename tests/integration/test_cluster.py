"""Three run_scheduler processes: one leads, failover is fast, every slot fires once."""

from __future__ import annotations

import itertools
import signal
import time
from datetime import timedelta

import pytest

from django_dsched.enums import FrequencyUnit
from django_dsched.models import Event, Lease, SchedulerInstance
from tests.factories import ScheduleFactory
from tests.helpers import sql, wait_for

pytestmark = pytest.mark.integration

SCHEDULES = 20


def leader():
    lock = Lease.objects.filter(last_heartbeat__year__gt=1970).first()
    return (lock.instance_id, lock.epoch) if lock else None


def check_every_slot_fired_once_in_both_tables():
    """Every (schedule, slot) once in event_store_t and once in outbox_message_t."""
    assert (
        sql(
            "SELECT aggregate_id, scheduled_ts FROM event_store_t"
            " WHERE scheduled_ts IS NOT NULL GROUP BY 1, 2 HAVING count(*) > 1"
        )
        == []
    )
    assert (
        sql(
            # Fires only: audit events (set aside, edited, ...) have no outbox message.
            "SELECT e.id FROM event_store_t e FULL JOIN outbox_message_t o ON o.id = e.id"
            " WHERE e.id IS NULL OR (o.id IS NULL AND e.scheduled_ts IS NOT NULL)"
        )
        == []
    )


def check_no_gaps(schedules, period):
    """Each schedule's fired slots are consecutive on its grid (no lost fire)."""
    for schedule in schedules:
        slots = list(
            Event.objects.filter(aggregate_id=schedule.schedule_id)
            .order_by("scheduled_ts")
            .values_list("scheduled_ts", flat=True)
        )
        assert slots, f"{schedule} never fired"
        gaps = [b - a for a, b in itertools.pairwise(slots) if b - a != period]
        assert gaps == [], f"{schedule}: slots not consecutive: {gaps}"


def start_three(cluster):
    for name in ("alpha", "beta", "gamma"):
        cluster.start(name)
    current = wait_for(leader, timeout=15, what="a leader")
    roles = wait_for(
        lambda: (
            (r := sorted(SchedulerInstance.objects.values_list("role", flat=True)))
            == ["leader", "standby", "standby"]
            and r
        ),
        timeout=15,
        what="three instances on the cluster page",
    )
    assert roles
    return current


def test_sigkill_of_the_leader_fails_over_fast_and_loses_nothing(cluster, db_now):
    schedules = ScheduleFactory.create_batch(
        SCHEDULES, frequency_unit=FrequencyUnit.SECONDS, frequency_time=1, start_ts=db_now()
    )
    first, epoch = start_three(cluster)
    wait_for(lambda: Event.objects.count() >= 3 * SCHEDULES, timeout=15, what="fires")

    killed_at = time.monotonic()
    cluster.instances[first].signal(signal.SIGKILL)
    second, second_epoch = wait_for(
        lambda: (current := leader()) and current[0] != first and current,
        timeout=10,
        what="a standby to take over",
    )
    failover = time.monotonic() - killed_at
    assert second_epoch == epoch + 1
    # The leader's session ended, so no one waited out the 3 s lease.
    assert failover < 2.5, cluster.logs()
    fired_before = Event.objects.filter(leader_epoch=second_epoch).count()
    wait_for(
        lambda: (
            Event.objects.filter(leader_epoch=second_epoch).count() >= fired_before + 2 * SCHEDULES
        ),
        timeout=15,
        what="fires by the new leader",
    )
    # The standby first: stopped first, the leader would hand the lease to it (a third epoch).
    for name in sorted({"alpha", "beta", "gamma"} - {first}, key=lambda n: n == second):
        assert cluster.instances[name].stop() == 0, cluster.logs()
    check_every_slot_fired_once_in_both_tables()
    check_no_gaps(schedules, timedelta(seconds=1))
    assert set(Event.objects.values_list("leader_epoch", flat=True)) <= {epoch, second_epoch}


def test_sigterm_releases_the_lease_and_a_standby_takes_over_at_once(cluster, db_now):
    ScheduleFactory.create_batch(
        5, frequency_unit=FrequencyUnit.SECONDS, frequency_time=1, start_ts=db_now()
    )
    first, epoch = start_three(cluster)
    wait_for(lambda: Event.objects.count() >= 5, timeout=10, what="fires")
    stopped_at = time.monotonic()
    instance = cluster.instances[first]
    instance.signal(signal.SIGTERM)
    assert instance.process.wait(10) == 0, instance.log()
    assert "released leadership" in instance.log()
    wait_for(lambda: (c := leader()) and c[1] > epoch, timeout=10, what="a new leader")
    assert time.monotonic() - stopped_at < 2.5
    check_every_slot_fired_once_in_both_tables()


def test_a_paused_leader_resumes_and_cannot_commit_a_fire(cluster, db_now):
    ScheduleFactory.create_batch(
        10, frequency_unit=FrequencyUnit.SECONDS, frequency_time=1, start_ts=db_now()
    )
    first, epoch = start_three(cluster)
    wait_for(
        lambda: Event.objects.filter(leader_epoch=epoch).count() >= 10, timeout=10, what="fires"
    )
    zombie = cluster.instances[first]
    zombie.signal(signal.SIGSTOP)
    # Its session stays open, so the standbys wait out the lease (3 s), then take over.
    second, second_epoch = wait_for(
        lambda: (c := leader()) and c[0] != first and c, timeout=15, what="takeover by expiry"
    )
    taken_over_at = Lease.objects.get().acquired_ts
    wait_for(
        lambda: Event.objects.filter(leader_epoch=second_epoch).count() >= 10,
        timeout=10,
        what="fires by the new leader",
    )
    zombie.signal(signal.SIGCONT)
    wait_for(
        lambda: (
            "lost leadership" in zombie.log()
            or "fire refused" in zombie.log()
            or "stepping down" in zombie.log()
        ),
        timeout=10,
        what="the old leader to notice",
    )
    # Nothing committed under the old epoch after the new leader took over.
    assert not Event.objects.filter(leader_epoch=epoch, event_ts__gte=taken_over_at).exists()
    assert leader()[0] == second
    assert zombie.stop() == 0
    check_every_slot_fired_once_in_both_tables()


def test_a_leader_whose_connection_is_killed_keeps_running_and_nothing_is_lost(cluster, db_now):
    ScheduleFactory.create_batch(
        5, frequency_unit=FrequencyUnit.SECONDS, frequency_time=1, start_ts=db_now()
    )
    first, epoch = start_three(cluster)
    wait_for(
        lambda: Event.objects.filter(leader_epoch=epoch).count() >= 5, timeout=10, what="fires"
    )
    # The database ends the leader's session (as a failover or an admin would).
    sql(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
        [f"dsched:{first}"],
    )
    wait_for(lambda: (c := leader()) and c[1] > epoch, timeout=10, what="leadership after the kill")
    instance = cluster.instances[first]
    wait_for(
        lambda: "database unavailable" in instance.log() or "stepping down" in instance.log(),
        timeout=10,
        what="the old leader to log the lost connection",
    )
    newest = leader()[1]
    wait_for(
        lambda: Event.objects.filter(leader_epoch=newest).count() >= 10,
        timeout=15,
        what="fires under the new epoch",
    )
    assert instance.process.poll() is None, "the process must survive a lost connection"
    assert instance.stop() == 0
    check_every_slot_fired_once_in_both_tables()
    check_no_gaps(ScheduleFactory._meta.model.objects.all(), timedelta(seconds=1))


def test_a_poison_row_is_set_aside_and_every_instance_keeps_firing(cluster, db_now):
    """Rows the scheduler cannot plan (a zone this host's tzdata lacks, a cron croniter
    refuses), written straight into the table: each is set aside once, with its error; the
    other schedules keep firing whichever instance leads, and no instance dies."""
    from django_dsched.enums import ScheduleKind

    healthy = ScheduleFactory.create_batch(
        8, frequency_unit=FrequencyUnit.SECONDS, frequency_time=1, start_ts=db_now()
    )
    zone = ScheduleFactory(
        schedule_kind=ScheduleKind.CRON, cron_expression="* * * * * *", start_ts=db_now()
    )
    sql("UPDATE schedule_t SET time_zone = 'Mars/Olympus' WHERE schedule_id = %s", [zone.pk])
    names = ["alpha", "beta", "gamma"]
    first, epoch = start_three(cluster)
    wait_for(
        lambda: (
            Event.objects.filter(leader_epoch=epoch, scheduled_ts__isnull=False).count()
            >= 2 * len(healthy)
        ),
        timeout=15,
        what="fires past the poison row",
    )
    # A second one, while the cluster runs.
    cron = ScheduleFactory(
        schedule_kind=ScheduleKind.CRON, cron_expression="* * * * * *", start_ts=db_now()
    )
    sql("UPDATE schedule_t SET cron_expression = '61 * * * *' WHERE schedule_id = %s", [cron.pk])
    led = [first]
    current = (first, epoch)
    # Each instance leads in turn (the leader stops; a standby takes over and goes on).
    for _ in range(2):
        stopped = cluster.instances[current[0]]
        fired = Event.objects.filter(leader_epoch=current[1]).count()
        wait_for(
            lambda e=current[1], f=fired: (
                Event.objects.filter(leader_epoch=e).count() >= f + len(healthy)
            ),
            timeout=15,
            what="fires by the current leader",
        )
        assert stopped.stop() == 0, cluster.logs()
        current = wait_for(
            lambda e=current[1]: (c := leader()) and c[1] > e and c,
            timeout=10,
            what="the next leader",
        )
        led.append(current[0])
    wait_for(
        lambda: Event.objects.filter(leader_epoch=current[1]).count() >= 2 * len(healthy),
        timeout=15,
        what="fires by the last leader",
    )
    assert sorted(led) == names
    last = cluster.instances[current[0]]
    assert last.process.poll() is None, last.log()
    assert last.stop() == 0, cluster.logs()
    for schedule, fragment in ((zone, "Mars/Olympus"), (cron, "61 * * * *")):
        state, why = sql(
            "SELECT state, set_aside_reason FROM schedule_t WHERE schedule_id = %s",
            [schedule.pk],
        )[0]
        assert state == "SET_ASIDE", cluster.logs()
        assert fragment in why
        audits = Event.objects.filter(
            aggregate_id=schedule.pk, event_type="dsched.schedule.set_aside"
        )
        assert audits.count() == 1
        assert not Event.objects.filter(
            aggregate_id=schedule.pk, scheduled_ts__isnull=False
        ).exists()
    assert "set aside schedule" in cluster.logs()
    check_every_slot_fired_once_in_both_tables()
    check_no_gaps(healthy, timedelta(seconds=1))
