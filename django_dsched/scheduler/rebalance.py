"""With buckets: the ownership rule applied, between batches (buckets handed off and taken)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django_dsched.cluster.lease import BucketLeases, decide
from django_dsched.runtime.logs import get_logger
from django_dsched.scheduler.stats import Stats

if TYPE_CHECKING:
    from django_dsched.metrics.scheduler import SchedulerMetrics

logger = get_logger(__name__)


def rebalance(
    lease: BucketLeases, instance_id: str, stats: Stats, metrics: SchedulerMetrics | None
) -> bool:
    """Apply the ownership rule (see lease.decide): hand off the buckets another live
    instance now owns, take those this one owns or stands by for that are free. Runs
    between batches, so a bucket is released only after its batch in flight. True: this
    instance's buckets changed (its presence is to be reported)."""
    view = lease.look()
    decision = decide(view, instance_id, set(lease.held), lease.count, lease.replicas)
    if decision.release:
        lease.release_some(decision.release)
        if metrics is not None:
            metrics.leader.set(int(lease.is_leader))
        stats.handoffs += len(decision.release)
        logger.info(
            "handed off bucket(s) %s instance=%s: their owner is back or new",
            decision.release,
            instance_id,
        )
    taken = lease.acquire(decision.take_as_owner, decision.take_as_standby)
    if taken:
        stats.leaderships += 1
        if metrics is not None:
            metrics.became_leader()
        standby = sorted(set(taken) & set(decision.take_as_standby))
        logger.info(
            "took bucket(s) %s instance=%s%s epochs=%s",
            taken,
            instance_id,
            f" (as standby: {standby})" if standby else "",
            [lease.held[b] for b in taken],
        )
        if not lease.is_trusted():
            lease.renew()
    return bool(decision.release or taken)
