"""``schedules/bulk/`` and ``schedules/bulk-cancel/``: many schedules in one call, all or
nothing, through :func:`django_dsched.api.bulk_create` and :func:`~django_dsched.api.bulk_cancel`.

Each item of a bulk create is read by the single create's serializer and becomes the
``Schedule`` the single create would build, so it is validated by the same code and an
invalid item gets the single create's messages, under ``<index>.<field>``. A call with more
than ``DSCHED_BULK_MAX_ITEMS`` items is refused (413) once the caller is authenticated and allowed,
before any item is read: the body is parsed only then, within
``DSCHED_API_MAX_BULK_BODY_BYTES``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from django.db import IntegrityError
from django.db.models.base import ModelState
from django.utils.translation import gettext as _
from rest_framework import exceptions, status
from rest_framework.request import Request
from rest_framework.response import Response

from django_dsched import api
from django_dsched.changes import bulk
from django_dsched.changes import permissions as rules
from django_dsched.changes.creates import Clock, Preparer
from django_dsched.conf import app_settings
from django_dsched.enums import PLANNED, ScheduleOrigin, ScheduleState
from django_dsched.exceptions import BulkValidationError
from django_dsched.exceptions import ValidationError as DschedValidationError
from django_dsched.models import Schedule
from django_dsched.rest import permissions, tenancy
from django_dsched.rest.base import APIMixin, atomic, body
from django_dsched.rest.errors import (
    NON_FIELD,
    TooManyItems,
    django_errors,
    flatten,
    race_lost,
    validation_failed,
)
from django_dsched.rest.responses import described, errors
from django_dsched.rest.serializers.bulk import (
    BulkCancelInput,
    BulkCancelResultSerializer,
    BulkCreateResultSerializer,
)
from django_dsched.rest.serializers.fields import AwareDateTimeField
from django_dsched.rest.serializers.schedule_input import (
    API_NAMES,
    ScheduleInputSerializer,
    api_names,
    model_values,
)
from django_dsched.rest.serializers.schedule_output import existing_only, late_answer

JSON_TYPES = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
WHY = {
    409: (
        "A concurrent change won a race the validation could not see: read and retry; or "
        "(`quota_exceeded`, bulk create) the call would take its host past its quota of live "
        "schedules: nothing is written."
    ),
    413: (
        "The body is larger than DSCHED_API_MAX_BULK_BODY_BYTES, or has more items than "
        "DSCHED_BULK_MAX_ITEMS (code too_many_items; checked after authentication, "
        "before any item is read)."
    ),
}


def json_type(value: Any) -> str:
    """What ``value`` is, in JSON's words."""
    if value is None:
        return "null"
    return JSON_TYPES.get(type(value), "a number")


ItemErrors = dict[int, dict[str, list[str]]]


def invalid(found: ItemErrors) -> exceptions.ValidationError:
    """A 400 naming each item's fields as ``<index>.<field>``, in the items' order."""
    return exceptions.ValidationError({str(index): found[index] for index in sorted(found)})


def item_errors(exc: BulkValidationError, items: Sequence[Schedule]) -> ItemErrors:
    """The Python API's ``(index, field, message)`` under the API's field names (those of
    each item's kind)."""
    found: ItemErrors = {}
    for index, field, message in exc.item_errors:
        kind = items[index].schedule_kind if 0 <= index < len(items) else None
        name = NON_FIELD if field == "__all__" else api_names(kind).get(field, field)
        found.setdefault(index, {}).setdefault(name, []).append(message)
    return found


@contextmanager
def refusals(items: Sequence[Schedule] = ()) -> Iterator[None]:
    """A transaction; the services' refusals become API errors (as a single create's),
    an item's fields named as its kind names them."""
    try:
        with atomic():
            yield
    except BulkValidationError as exc:
        raise invalid(item_errors(exc, items)) from None
    except DschedValidationError as exc:
        raise validation_failed(exc, API_NAMES) from None
    except IntegrityError:
        raise race_lost(many=True) from None


def request_host(request: Request, asked: uuid.UUID | None) -> uuid.UUID:
    """The host ``asked`` for (or the request's first), if the request may reach it."""
    allowed = tenancy.hosts(request)
    if not allowed:
        raise exceptions.PermissionDenied(_("This request may not reach any host."))
    host = allowed[0] if asked is None else asked
    if host not in allowed:
        raise exceptions.ValidationError({"host_id": [_("You may not use this host.")]})
    return host


class BulkView(APIMixin):
    # Shared by the two bulk endpoints (no docstring: drf-spectacular would show it).

    permission_table = permissions.SCHEDULES

    def max_body_bytes(self) -> int:
        return app_settings.API_MAX_BULK_BODY_BYTES

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        # The byte limit, authentication, permissions and throttles first: a body is parsed
        # only for a caller allowed to send it. Then the items are counted, before any of
        # them is looked at or anything is read from the schedules.
        super().initial(request, *args, **kwargs)
        count = self.count(request.data)  # parsed here, within the body limit
        limit = app_settings.BULK_MAX_ITEMS
        if count > limit:
            raise TooManyItems(count, limit)

    def count(self, data: Any) -> int:
        """The items ``data`` holds (0 when it is not shaped as the endpoint expects: the
        endpoint's own checks answer that)."""
        raise NotImplementedError


class BulkCreateView(BulkView):
    action = "bulk_create"

    def count(self, data: Any) -> int:
        return len(data) if isinstance(data, list) else 0

    @described(
        operation_id="schedules_bulk_create",
        summary="Create many schedules, all or nothing",
        description=(
            "A JSON array of schedules, each as the single create takes it (any mix of "
            "kinds, `key` included). Every item is validated as a single create; if any is "
            "invalid, nothing is written and the 400 names each bad item's fields as "
            "`<index>.<field>`, with the single create's messages. A key or a name given "
            "twice in the call is an error on the later item. An item whose `key` a "
            "schedule of its host already has creates nothing: the answer gives that "
            "schedule (`outcome: existing`; to a caller who may not view schedules, only its "
            "`id`, `host_id` and `key`). An item that would fire a backlog at once (CATCH_UP "
            "with more than one slot since its start already due) needs the run-now "
            "permission: without it the call is a 403 naming the item. 201 when the call "
            "created any schedule, else 200. At most DSCHED_BULK_MAX_ITEMS items (10,000 by "
            "default)."
        ),
        request=ScheduleInputSerializer(many=True),
        responses={
            201: BulkCreateResultSerializer,
            200: BulkCreateResultSerializer,
            **errors(400, 401, 403, 409, 413, 415, why=WHY),
        },
    )
    def post(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        items = request.data
        allowed = tenancy.hosts(request)
        if not allowed:
            raise exceptions.PermissionDenied(_("This request may not reach any host."))
        if not isinstance(items, list):
            raise exceptions.ValidationError(
                {
                    NON_FIELD: [
                        _("Send a JSON array of schedules (objects), not %(type)s.")
                        % {"type": json_type(items)}
                    ]
                }
            )
        schedules, found = self.read(items, allowed)
        if found:
            # Also the rules, for the items whose shape is right (no write): every bad item
            # is named at once. Duplicates and names in use are checked once all are valid.
            preparer = Preparer()
            for index, schedule in schedules.items():
                try:
                    preparer.prepare_instance(schedule)
                except DschedValidationError as exc:
                    found[index] = django_errors(exc, api_names(schedule.schedule_kind))
            raise invalid(found)
        ordered = [schedules[index] for index in range(len(items))]
        with refusals(ordered):
            stored = api.bulk_create(ordered, actor=request.user)
        # An existing item's schedule is another's: shown whole only to who may view it.
        viewer = rules.allows(request.user, rules.VIEW)
        results = [
            summary(schedule, "created")
            if schedule.pk == sent.pk
            else (summary(schedule, "existing") if viewer else existing_only(schedule))
            for schedule, sent in zip(stored, ordered, strict=True)
        ]
        created = sum(1 for result in results if result["outcome"] == "created")
        return Response(
            {"created": created, "existing": len(results) - created, "results": results},
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )

    def read(
        self, items: Sequence[Any], allowed: Sequence[uuid.UUID]
    ) -> tuple[dict[int, Schedule], ItemErrors]:
        """Each item as the unsaved schedule the single create would build, or its errors
        (types, unknown fields, a host the request may not reach)."""
        reader = ScheduleInputSerializer()  # its fields are built once, for every item
        blanks = Blanks()
        clock = Clock()  # the database's now, read once, for the items with a delay
        schedules: dict[int, Schedule] = {}
        found: ItemErrors = {}
        for index, item in enumerate(items):
            if not isinstance(item, dict):
                found[index] = {
                    NON_FIELD: [
                        _("Each item must be a schedule (an object), not %(type)s.")
                        % {"type": json_type(item)}
                    ]
                }
                continue
            try:
                values = reader.run_validation(item)
            except exceptions.ValidationError as exc:
                found[index] = flatten(exc.detail)
                continue
            host = values.get("host_id", allowed[0])
            if host not in allowed:
                found[index] = {"host_id": [_("You may not use this host.")]}
                continue
            schedules[index] = blanks.make(
                host_id=host, origin=ScheduleOrigin.REST, **model_values(values, clock.now)
            )
        return schedules, found


class Blanks:
    """Unsaved schedules as ``Schedule(**fields)`` makes them (the single create's), without
    running ``Model.__init__`` for each: a copy of one new instance's values, with a fresh
    id and data. (``Model.__init__`` costs about as much as checking the item's JSON, and
    its fresh ``DatabaseDefault`` values are slow to hash for the validation's cache.)"""

    def __init__(self) -> None:
        template = Schedule()
        self.defaults = {name: value for name, value in vars(template).items() if name != "_state"}
        pk = Schedule._meta.pk
        assert pk is not None
        self.new_id = pk.get_default

    def make(self, **fields: Any) -> Schedule:
        schedule = Schedule.__new__(Schedule)
        values = vars(schedule)
        values.update(self.defaults)
        values["_state"] = ModelState()
        values["schedule_id"] = self.new_id()
        values["event_data"] = {}  # the field's default (dict): one per schedule
        values.update(fields)
        return schedule


_time = AwareDateTimeField()


def summary(schedule: Schedule, outcome: str) -> dict[str, Any]:
    """``schedule`` as :class:`~.serializers.BulkCreatedSerializer` describes it."""
    planned = schedule.state in PLANNED
    return {
        "outcome": outcome,
        "id": str(schedule.schedule_id),
        "host_id": str(schedule.host_id),
        "name": schedule.schedule_name,
        "key": schedule.idempotency_key,
        "kind": schedule.schedule_kind,
        "state": schedule.state,
        "next_run": _time.to_representation(schedule.next_run_ts) if planned else None,
        "version": schedule.aggregate_version,
        "late": late_answer(schedule),
    }


class BulkCancelView(BulkView):
    action = "bulk_cancel"

    def count(self, data: Any) -> int:
        if not isinstance(data, Mapping):
            return 0
        return sum(len(data[name]) for name in ("ids", "keys") if isinstance(data.get(name), list))

    @described(
        operation_id="schedules_bulk_cancel",
        summary="Cancel many schedules, all or nothing",
        description=(
            "By `ids` and/or `keys`, of one host (`host_id`, default the request's first). "
            "An id or key that names no schedule of that host, or names one an earlier id "
            "or key names, is a 400 naming it (`ids.<index>`, `keys.<index>`), and nothing "
            "is cancelled. Schedules "
            "already cancelled or completed are left as they are (`outcome: skipped`). No "
            "If-Match: the state rules are checked under the rows' locks. At most "
            "DSCHED_BULK_MAX_ITEMS ids and keys together."
        ),
        request=BulkCancelInput,
        responses={
            200: BulkCancelResultSerializer,
            **errors(400, 401, 403, 409, 413, 415, why=WHY),
        },
    )
    def post(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        values = body(BulkCancelInput, request)
        host = request_host(request, values.get("host_id"))
        ids: list[uuid.UUID] = values["ids"]
        keys: list[str] = values["keys"]
        with refusals():
            try:
                count, rows = bulk.cancel_items(ids, keys=keys, host_id=host, actor=request.user)
            except BulkValidationError as exc:
                raise invalid_references(exc, len(ids)) from None
        # ``rows``: each item's schedule as the cancel statement locked it, in the items'
        # order (the call is refused, and undone, unless there is exactly one per item).
        results = [
            {
                "outcome": "cancelled" if row.cancelled else "skipped",
                "id": str(row.schedule_id),
                "name": row.schedule_name,
                "key": row.idempotency_key,
                "state": ScheduleState.CANCELLED.value if row.cancelled else row.state,
            }
            for row in rows
        ]
        return Response({"cancelled": count.changed, "skipped": count.skipped, "results": results})


def invalid_references(exc: BulkValidationError, ids: int) -> exceptions.ValidationError:
    """The Python API's errors (indexes into the ids, then the keys) as ``ids.<i>`` and
    ``keys.<i>``."""
    found: dict[str, list[str]] = {}
    for index, _field, message in exc.item_errors:
        name = f"ids.{index}" if index < ids else f"keys.{index - ids}"
        found.setdefault(name, []).append(message)
    return exceptions.ValidationError(found)
