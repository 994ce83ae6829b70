"""Every error django-dsched raises derives from :class:`DschedError`.

Each also derives from the built-in or Django exception a caller would catch without
knowing this package (``ValueError``, ``django.core.exceptions.ValidationError``,
``ImproperlyConfigured``), so ``except ValidationError`` in a view keeps working.
"""

from __future__ import annotations

from typing import Any

from django.core import exceptions as django_exceptions
from django.db.utils import OperationalError, ProgrammingError


class DschedError(Exception):
    """Base class of the package's errors."""


class ValidationError(DschedError, django_exceptions.ValidationError):
    """Bad input at any door (API, admin, commands, declared schedules): nothing was written.

    A :class:`django.core.exceptions.ValidationError` with the same ``message_dict`` /
    ``messages`` shapes.
    """


class BulkValidationError(ValidationError):
    """Items of a bulk call are invalid: nothing was written.

    ``item_errors`` lists each problem as ``(index, field, message)``: the item's position
    in the call, the keyword of the spec at fault (``"__all__"`` for the item as a whole),
    and the message a single create would give.
    """

    def __init__(self, item_errors: list[tuple[int, str, str]]) -> None:
        self.item_errors = sorted(item_errors)
        super().__init__(
            [f"Item {index}, {field}: {message}" for index, field, message in self.item_errors],
            code="invalid_items",
        )


class ConflictError(ValidationError):
    """The schedule changed (it fired, or someone edited it) since the caller read it."""


class EditNotPermitted(ValidationError):
    """An edit would complete the schedule at once (like cancel) or fire it at once (like
    run now), and the caller lacks that permission: nothing was written."""


class QuotaExceeded(ValidationError):
    """A create would give a host (tenant) more live schedules than its quota allows
    (``TenantQuota.max_active_schedules``, or ``DSCHED_DEFAULT_MAX_ACTIVE_SCHEDULES``):
    nothing was written. ``host_id`` and ``limit`` name the quota."""

    def __init__(self, message: str, *, host_id: Any, limit: int) -> None:
        super().__init__(message, code="quota_exceeded")
        self.host_id = host_id
        self.limit = limit


class NotPermitted(DschedError, django_exceptions.PermissionDenied):
    """The acting user lacks the permission this needs (:mod:`django_dsched.changes.permissions`):
    nothing was done. A :class:`django.core.exceptions.PermissionDenied`, so Django's views
    and the REST API answer it with a 403."""

    def __init__(self, message: str, *, permission: str) -> None:
        super().__init__(message)
        self.message = message
        self.permission = permission

    def __str__(self) -> str:
        return self.message


class ConfigurationError(DschedError, django_exceptions.ImproperlyConfigured):
    """A setting, a declaration or a registration cannot work as given."""


class TransportConfigError(ConfigurationError):
    """DSCHED_TRANSPORTS names no usable transport for a topic."""


class TimetableError(DschedError, ValueError):
    """A timetable cannot be built from these values (unit, count, start)."""


class CronError(TimetableError):
    """An expression or zone that cannot drive a schedule."""


class RecurrenceError(TimetableError):
    """A recurrence rule (RFC 5545 RRULE, EXDATE, RDATE, DTSTART) that cannot drive a schedule:
    a part that is unknown or out of range, a combination RFC 5545 forbids, or a rule that
    never fires."""


class CalendarError(TimetableError):
    """A calendar (excluded dates, weekend, blackout windows) that cannot filter a schedule."""


class ScheduleDataError(DschedError, ValueError):
    """A stored schedule holds a value the scheduler cannot plan with (written behind the
    validators' back, say with SQL): the scheduler sets it aside."""


class NoMoreSlots(DschedError):
    """The grid has no slot after this one within the calendar datetime can represent."""


class DeliveryError(DschedError):
    """The message was not delivered; the relay retries it later (with backoff).

    ``retry_after``: seconds the destination asked to be left alone (HTTP ``Retry-After``).
    The relay then waits at least that long, and never longer than
    ``DSCHED_RELAY_RETRY_MAX``.
    """

    def __init__(self, *args: object, retry_after: float | None = None) -> None:
        super().__init__(*args)
        self.retry_after = retry_after


class PermanentDeliveryError(DeliveryError):
    """The message can never be delivered as it is: dead-letter it now, do not retry."""


class AddressRefused(PermanentDeliveryError):
    """A webhook's host resolves to an address webhooks may not reach (loopback, private,
    link-local, metadata, ...) and ``DSCHED_WEBHOOK_ALLOWED_NETWORKS`` does not open it."""


class NotImportable(DschedError):
    """A row of another scheduler's tables has no faithful equivalent (the message says why)."""


class BucketCountMismatch(ConfigurationError):
    """``DSCHED_BUCKETS`` differs from the bucket count the cluster in the database uses."""


class NotPrimary(DschedError, OperationalError):
    """The session reached a standby (a server in recovery): the loops write, so they need
    the primary. A Django ``OperationalError`` too: the loop reconnects."""


class MissingTables(DschedError, ProgrammingError):
    """The package's tables are not in the database (``migrate`` has not run there)."""
