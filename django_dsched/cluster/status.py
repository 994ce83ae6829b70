"""The cluster at a glance: the leader, the instances, the backlog, the fire and delivery
rates, the destinations relays hold back. A fixed number of queries, each served by an
index; ages on the database's clock."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Count, Min, Q

from django_dsched.cluster.buckets import lock_id, ranking
from django_dsched.conf import app_settings
from django_dsched.enums import DeliveryStatus
from django_dsched.history import event_ids
from django_dsched.history.expiry import HistoryDays, held_days
from django_dsched.models import (
    Circuit,
    Event,
    Lease,
    OutboxMessage,
    Schedule,
    SchedulerInstance,
)
from django_dsched.runtime.clock import database_now

# Instances shown: seen within this many lease periods (and at least a minute).
RECENT_LEASES = 12
# Most instances listed.
INSTANCE_LIMIT = 200
# Most buckets listed.
BUCKET_LIMIT = 4096
# Most open circuits listed.
CIRCUIT_LIMIT = 200


@dataclass(frozen=True)
class Instance:
    row: SchedulerInstance
    seen_seconds: float
    up_seconds: float
    stale: bool  # has not reported for longer than it should


@dataclass(frozen=True)
class Leader:
    instance_id: str
    epoch: int
    heartbeat_seconds: float  # age of the last heartbeat
    acquired: datetime
    live: bool  # the lease has not expired
    released: bool  # given up gracefully (heartbeat set to 1970)


@dataclass(frozen=True)
class Bucket:
    """One bucket's lease and who should hold it (with DSCHED_BUCKETS > 1)."""

    bucket: int
    holder: str  # the instance in the lease row ("" when never taken)
    epoch: int
    heartbeat_seconds: float | None  # age of the holder's last renewal; None: released
    live: bool  # held: renewed within the lease
    owner: str | None  # the top of the rendezvous ranking over the live instances
    standbys: list[str]  # the next ones (DSCHED_REPLICAS - 1)


@dataclass(frozen=True)
class HeldBack:
    """A destination a relay holds back (its circuit is open, or half-open: probing)."""

    row: Circuit
    seconds_left: float  # until the relay probes it again (0: probing now, or its relay died)
    stale: bool  # its time ended long ago: the relay that wrote it is likely gone


@dataclass(frozen=True)
class ClusterStatus:
    now: datetime
    lease_seconds: float
    leader: Leader | None
    instances: list[Instance]
    recent_seconds: float
    due: int
    oldest_due: datetime | None
    fires_minute: int
    fires_hour: int
    pending: int
    oldest_pending: OutboxMessage | None
    dead_letters: int
    bucket_count: int = 1  # DSCHED_BUCKETS here
    stored_bucket_count: int | None = None  # the count the cluster in the database runs with
    buckets: list[Bucket] | None = None  # with buckets: each one's lease, owner and standbys
    # The history's day partitions, and the days past the retention kept (and why).
    history: HistoryDays | None = None
    # The destinations relays hold back (relay_circuit_t), oldest first.
    circuits: list[HeldBack] | None = None


def _seconds(later: datetime, earlier: datetime) -> float:
    return max(0.0, (later - earlier).total_seconds())


def _leader(now: datetime, lease_seconds: float) -> Leader | None:
    lock = Lease.objects.filter(lease_id=app_settings.LEASE_ID).first()
    if lock is None:
        return None
    released = lock.last_heartbeat.year <= 1970
    heartbeat = _seconds(now, lock.last_heartbeat)
    return Leader(
        instance_id=lock.instance_id,
        epoch=lock.epoch,
        heartbeat_seconds=heartbeat,
        acquired=lock.acquired_ts,
        live=not released and heartbeat <= lease_seconds,
        released=released,
    )


def _buckets(now: datetime, lease_seconds: float, instances: list[Instance]) -> list[Bucket]:
    count = int(app_settings.BUCKETS)
    base = app_settings.LEASE_ID
    shown = min(count, BUCKET_LIMIT)
    rows = {
        row.lease_id: row
        for row in Lease.objects.filter(lease_id__in=[lock_id(base, b) for b in range(shown)])
    }
    live = [i.row.instance_id for i in instances if i.seen_seconds <= lease_seconds]
    result = []
    for bucket in range(shown):
        row = rows.get(lock_id(base, bucket))
        ranked = ranking(bucket, live, int(app_settings.REPLICAS))
        released = row is None or row.last_heartbeat.year <= 1970
        heartbeat = None if released or row is None else _seconds(now, row.last_heartbeat)
        result.append(
            Bucket(
                bucket=bucket,
                holder=row.instance_id if row else "",
                epoch=row.epoch if row else 0,
                heartbeat_seconds=heartbeat,
                live=heartbeat is not None and heartbeat <= lease_seconds,
                owner=ranked[0] if ranked else None,
                standbys=ranked[1:],
            )
        )
    return result


def _circuits(now: datetime) -> list[HeldBack]:
    rows = Circuit.objects.order_by("opened_ts", "id")[:CIRCUIT_LIMIT]
    # A row whose probe is this much overdue: its relay stopped without deleting it.
    stale_after = float(app_settings.RELAY_VISIBILITY_TIMEOUT)
    return [
        HeldBack(
            row=row,
            seconds_left=_seconds(row.until_ts, now),
            stale=_seconds(now, row.until_ts) > stale_after,
        )
        for row in rows
    ]


def cluster_status() -> ClusterStatus:
    now = database_now()
    lease = float(app_settings.LEASE_SECONDS)
    recent = max(60.0, RECENT_LEASES * lease)
    rows = SchedulerInstance.objects.filter(
        last_seen_ts__gte=now - timedelta(seconds=recent)
    ).order_by("role", "instance_id")[:INSTANCE_LIMIT]
    instances = [
        Instance(
            row=row,
            seen_seconds=_seconds(now, row.last_seen_ts),
            up_seconds=_seconds(now, row.started_ts),
            # Standbys report once per lease, leaders every heartbeat: two missed reports.
            stale=_seconds(now, row.last_seen_ts) > 2 * lease + 1,
        )
        for row in rows
    ]
    backlog = Schedule.objects.due().aggregate(n=Count("pk"), oldest=Min("next_run_ts"))
    # A fire's id carries its slot's millisecond: the last hour's slots are a range of the
    # primary key (a fire written in the last hour for an older slot is not counted).
    hour_ago = now - timedelta(hours=1)
    fires = Event.objects.filter(
        pk__gte=event_ids.id_floor(hour_ago),
        event_ts__gte=hour_ago,
        scheduled_ts__isnull=False,
    ).aggregate(
        hour=Count("pk"), minute=Count("pk", filter=Q(event_ts__gte=now - timedelta(minutes=1)))
    )
    outbox = OutboxMessage.objects.filter(
        status__in=[DeliveryStatus.PENDING, DeliveryStatus.DELIVERY_FAILED]
    ).aggregate(
        pending=Count("pk", filter=Q(status=DeliveryStatus.PENDING)),
        dead=Count("pk", filter=Q(status=DeliveryStatus.DELIVERY_FAILED)),
    )
    oldest_pending = (
        OutboxMessage.objects.filter(status=DeliveryStatus.PENDING)
        .only("id", "topic", "event_type", "event_ts", "attempts", "last_error")
        .order_by("id")
        .first()
        if outbox["pending"]
        else None
    )
    return ClusterStatus(
        now=now,
        lease_seconds=lease,
        leader=_leader(now, lease),
        instances=instances,
        recent_seconds=recent,
        due=backlog["n"],
        oldest_due=backlog["oldest"],
        fires_minute=fires["minute"],
        fires_hour=fires["hour"],
        pending=outbox["pending"],
        oldest_pending=oldest_pending,
        dead_letters=outbox["dead"],
        bucket_count=int(app_settings.BUCKETS),
        stored_bucket_count=Lease.objects.filter(lease_id=app_settings.LEASE_ID)
        .values_list("buckets", flat=True)
        .first(),
        buckets=_buckets(now, lease, instances) if app_settings.BUCKETS > 1 else None,
        history=held_days(),
        circuits=_circuits(now),
    )
