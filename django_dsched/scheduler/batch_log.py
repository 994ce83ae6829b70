"""What a batch did, in the logs: what fired, what was skipped, set aside, passed over or
left for the next batch."""

from __future__ import annotations

from typing import Any

from django_dsched.firing.batch import BatchResult
from django_dsched.runtime.logs import get_logger

logger = get_logger(__name__)


def log_batch(
    result: BatchResult, context: dict[str, Any], plan_budget: float, passed_over_for: float
) -> None:
    """Log ``result`` (``context``: the instance and its epoch; ``plan_budget``: the
    planning's time budget; ``passed_over_for``: how long a quarantined row is passed over,
    in seconds)."""
    logger.info(
        "fired %d schedule(s)%s instance=%s epoch=%d",
        result.fired,
        f": {result.names}" if result.names else "",
        context["instance"],
        context["epoch"],
        extra={**context, "schedules": result.names} if result.names else context,
    )
    if result.duplicates:
        logger.warning(
            "skipped %d slot(s) that had already fired (refused by the database)",
            result.duplicates,
            extra=context,
        )
    refused_ids = {schedule_id for schedule_id, _ in result.refused}
    for schedule_id, why in result.aside:
        logger.error(
            "set aside schedule %s: %s: %s",
            schedule_id,
            "the database refused its fire"
            if schedule_id in refused_ids
            else "it cannot be planned",
            why,
            extra={**context, "schedule": schedule_id},
        )
    for schedule_id, why in result.quarantined:
        logger.error(
            "passing over schedule %s for %.0fs: the database refused to fire it and to "
            "set it aside: %s",
            schedule_id,
            passed_over_for,
            why,
            extra={**context, "schedule": schedule_id},
        )
    if result.skipped or result.buffered or result.cancelled:
        logger.info(
            "the previous run still going: %d slot(s) skipped, %d held, %d run(s) cancelled",
            result.skipped,
            result.buffered,
            result.cancelled,
            extra=context,
        )
    if result.deferred:
        logger.warning(
            "planning took longer than %.2fs: %d schedule(s) left for the next batch",
            plan_budget,
            result.deferred,
            extra=context,
        )
