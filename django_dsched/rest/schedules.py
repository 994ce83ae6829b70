"""``schedules/``: list, create, read, replace, change and cancel schedules; their actions
(pause, resume, trigger, backfill), their next fires and their history.

Every change goes through :mod:`django_dsched.changes`, as from the admin and the Python
API: the same rules, the same audit events (with the requesting user as actor).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, TypeVar

from django.db import IntegrityError
from django.db.models import QuerySet
from django.utils.translation import gettext as _
from drf_spectacular.utils import PolymorphicProxySerializer
from rest_framework import serializers as drf_serializers
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response

from django_dsched import api
from django_dsched.changes import cancels, creates, edits, on_demand, pauses, unchanged
from django_dsched.changes import permissions as rules
from django_dsched.counts import ChangeCount
from django_dsched.enums import ScheduleOrigin, ScheduleState
from django_dsched.exceptions import ConflictError
from django_dsched.exceptions import ValidationError as DschedValidationError
from django_dsched.models import Event, OutboxMessage, Schedule
from django_dsched.rest import permissions, tenancy
from django_dsched.rest.base import TenantViewSet, atomic, body, query
from django_dsched.rest.bulk import request_host
from django_dsched.rest.conditional import etag, expected_version
from django_dsched.rest.errors import (
    PreconditionFailed,
    StateConflict,
    race_lost,
    validation_failed,
)
from django_dsched.rest.responses import (
    CREATE_409,
    ETAG,
    ETAG_412,
    READ,
    READ_ONE,
    WRITE,
    WRITE_ONE,
    described,
    errors,
    if_match,
)
from django_dsched.rest.serializers.actions import (
    BackfillResultSerializer,
    FiresSerializer,
    NoOptions,
    PauseInput,
    RangeInput,
    ResumeInput,
    TriggerResultSerializer,
)
from django_dsched.rest.serializers.events import EventSerializer
from django_dsched.rest.serializers.messages import MessageSerializer
from django_dsched.rest.serializers.queries import (
    DeliveriesQuery,
    DryRunQuery,
    EventsQuery,
    PreviewQuery,
    ScheduleListQuery,
    StatusQuery,
)
from django_dsched.rest.serializers.schedule_input import (
    API_NAMES,
    ScheduleInputSerializer,
    api_names,
    definition_defaults,
    model_values,
)
from django_dsched.rest.serializers.schedule_output import (
    ExistingScheduleSerializer,
    ScheduleDetailSerializer,
    ScheduleSerializer,
    ScheduleStatusSerializer,
    existing_only,
    schedule_detail,
)

T = TypeVar("T")

# Next fire times shown with one schedule.
NEXT_FIRES = 5


def detail(schedule: Schedule) -> dict[str, Any]:
    return schedule_detail(schedule, api.preview(schedule, NEXT_FIRES))


def with_etag(schedule: Schedule, code: int = status.HTTP_200_OK) -> Response:
    return Response(detail(schedule), status=code, headers={"ETag": etag(schedule)})


class ScheduleViewSet(TenantViewSet[Schedule]):
    permission_table = permissions.SCHEDULES
    query_actions = frozenset(
        {"list", "status_by_key", "preview", "dry_run", "events", "deliveries"}
    )
    field_names = API_NAMES
    queryset = Schedule.objects.all()
    serializer_class = ScheduleSerializer
    # Unique together, and served by the (host_id, schedule_name) index.
    ordering = ("schedule_name", "host_id")

    def get_object(self) -> Schedule:
        return self.selected().get()

    def _version(self, request: Request, schedule: Schedule, *, required: bool) -> int | None:
        return expected_version(request, schedule, required=required, current=detail)

    def _act(
        self, request: Request, act: Callable[[Schedule], T], *, required: bool
    ) -> tuple[Schedule, T]:
        """``act`` on the schedule with its row locked, after the If-Match check; the
        services' refusals become API errors. Returns the schedule after it, and what
        ``act`` returned."""
        with atomic():
            schedule = self.selected().select_for_update().get()
            self._version(request, schedule, required=required)
            try:
                outcome = act(schedule)
            except DschedValidationError as exc:
                raise validation_failed(exc, API_NAMES) from None
            schedule.refresh_from_db()
        return schedule, outcome

    # -- the collection -------------------------------------------------------------------
    @described(
        summary="List schedules",
        parameters=[ScheduleListQuery],
        responses={200: ScheduleSerializer(many=True), **errors(400, *READ)},
    )
    def list(self, request: Request) -> Response:
        filters = query(ScheduleListQuery, request, paginated=True)
        queryset = self.get_queryset()
        for name, column in (
            ("state", "state"),
            ("kind", "schedule_kind"),
            ("topic", "event_topic"),
            ("event_type", "event_type"),
            ("key", "idempotency_key"),
            ("name", "schedule_name"),
        ):
            if name in filters:
                queryset = queryset.filter(**{column: filters[name]})
        if filters.get("search"):
            queryset = queryset.filter(schedule_name__icontains=filters["search"])
        return self.page(queryset, ScheduleSerializer)

    @described(
        summary="Create a schedule",
        request=ScheduleInputSerializer,
        responses={
            201: ScheduleDetailSerializer,
            200: PolymorphicProxySerializer(
                component_name="ScheduleCreateExisting",
                serializers=[ScheduleDetailSerializer, ExistingScheduleSerializer],
                resource_type_field_name=None,
            ),
            **errors(*WRITE, 409, why={409: CREATE_409}),
        },
        parameters=[ETAG],
        description=(
            "With a `key` that a schedule of the host already has, nothing is created: the "
            "answer is 200 with that schedule, as it is (whatever the rest of the body says); "
            "to a caller who may not view schedules, only `outcome`, `id`, `host_id` and "
            "`key` (and no ETag). A schedule that would fire a backlog at once (CATCH_UP "
            "with more than one slot since its start already due) also needs the run-now "
            "permission."
        ),
    )
    def create(self, request: Request) -> Response:
        values = body(ScheduleInputSerializer, request)
        allowed = tenancy.hosts(request)
        host = values.get("host_id", allowed[0] if allowed else None)
        if host is None:
            raise PermissionDenied(_("This request may not reach any host."))
        if host not in allowed:
            raise drf_serializers.ValidationError({"host_id": [_("You may not use this host.")]})
        schedule = Schedule(host_id=host, origin=ScheduleOrigin.REST, **model_values(values))
        outcome: list[tuple[Schedule, bool]] = []
        self._save(
            lambda: outcome.append(creates.create_instance(schedule, actor=request.user)),
            api_names(schedule.schedule_kind),
        )
        schedule, created = outcome[0]
        if created or rules.allows(request.user, rules.VIEW):
            code = status.HTTP_201_CREATED if created else status.HTTP_200_OK
            response = with_etag(schedule, code)
        else:
            # The key's schedule exists, and this caller may not read it: that it exists
            # and its id (what a retried create needs), no more.
            response = Response(existing_only(schedule))
        response["Location"] = request.build_absolute_uri(f"{schedule.pk}/")
        return response

    @described(
        operation_id="schedules_status_by_key",
        summary="A delayed message's status, by its idempotency key",
        description=(
            "Where the schedule with this `key` stands, read in one query with its newest "
            "message (as the Python API's `api.status(key=...)`): `message_status` is "
            "PENDING (not fired yet, or not yet delivered), DELIVERED or DELIVERY_FAILED "
            "(its newest fire's delivery), or CANCELLED or COMPLETED (it will never fire and "
            "has no message). Among the schedules of `host_id` (default: the request's "
            "first host); 404 when none of them has the key."
        ),
        parameters=[StatusQuery],
        responses={200: ScheduleStatusSerializer, **errors(400, *READ_ONE)},
    )
    @action(detail=False, methods=["get"], url_path="status")
    def status_by_key(self, request: Request, **kwargs: Any) -> Response:
        values = query(StatusQuery, request)
        host = request_host(request, values.get("host_id"))
        try:
            found = api.status(key=values["key"], host_id=host)
        except Schedule.DoesNotExist:
            raise NotFound() from None
        context = self.get_serializer_context()
        return Response(ScheduleStatusSerializer(found, context=context).data)

    # -- one schedule ---------------------------------------------------------------------
    @described(
        summary="Read a schedule, with its next fire times",
        responses={200: ScheduleDetailSerializer, **errors(*READ_ONE)},
        parameters=[ETAG],
    )
    def retrieve(self, request: Request, **kwargs: Any) -> Response:
        return with_etag(self.get_object())

    @described(
        summary="Replace a schedule's definition",
        description=(
            "Fields left out take their defaults, as at creation (but `start` and `key` "
            "stay; a key cannot change). "
            "An edit that leaves the schedule with no fire ahead also needs the cancel "
            "permission; one that makes it due at once needs the run-now permission."
        ),
        request=ScheduleInputSerializer,
        responses={200: ScheduleDetailSerializer, **errors(*WRITE_ONE, 409, 412, 428)},
        parameters=[if_match(True), ETAG, ETAG_412],
    )
    def update(self, request: Request, **kwargs: Any) -> Response:
        return self._edit(request, partial=False)

    @described(
        summary="Change some fields of a schedule's definition",
        description="As PUT, for the fields sent only.",
        request=ScheduleInputSerializer,
        responses={200: ScheduleDetailSerializer, **errors(*WRITE_ONE, 409, 412, 428)},
        parameters=[if_match(True), ETAG, ETAG_412],
    )
    def partial_update(self, request: Request, **kwargs: Any) -> Response:
        return self._edit(request, partial=True)

    @described(
        summary="Cancel a schedule",
        description=(
            "It never fires again and cannot be resumed or edited; its history is kept. "
            "Answers the cancelled schedule."
        ),
        responses={200: ScheduleDetailSerializer, **errors(*READ_ONE, 409, 412, 413, 428)},
        parameters=[if_match(True), ETAG, ETAG_412],
    )
    def destroy(self, request: Request, **kwargs: Any) -> Response:
        return self._transition(
            request,
            lambda selected: cancels.cancel(selected, actor=request.user),
            required=True,
            change="cancel",
        )

    def _edit(self, request: Request, *, partial: bool) -> Response:
        schedule = self.get_object()
        # A malformed body is a 400 whatever the precondition; then 428 / 412.
        serializer = ScheduleInputSerializer(
            data=request.data, partial=partial, context={"kind": schedule.schedule_kind}
        )
        serializer.is_valid(raise_exception=True)
        values = serializer.validated_data
        version = self._version(request, schedule, required=True)
        if "host_id" in values and values["host_id"] != schedule.host_id:
            raise drf_serializers.ValidationError(
                {"host_id": [_("A schedule cannot move to another host.")]}
            )
        if "key" in values and values["key"] != schedule.idempotency_key:
            raise drf_serializers.ValidationError(
                {"key": [_("A schedule keeps the idempotency key it was created with.")]}
            )
        changes = model_values(values)
        if not partial:
            changes = {**definition_defaults(), **changes}
        for name, value in changes.items():
            setattr(schedule, name, value)

        def save() -> None:
            # The service decides what the edit needs (the user's permissions to cancel and
            # to run now, as at every door); its refusal is a 403 naming the permission.
            try:
                edits.save_schedule(
                    schedule, list(changes), actor=request.user, expected_version=version
                )
            except edits.EditNeeds as refused:
                raise PermissionDenied(
                    _(
                        "This edit would end the schedule or fire it at once, which also "
                        "needs the permission %(permissions)s."
                    )
                    % {"permissions": refused.capability.permission}
                ) from None

        self._save(save, api_names(schedule.schedule_kind))
        return with_etag(Schedule.objects.get(pk=schedule.pk))

    def _save(self, save: Callable[[], Any], names: Mapping[str, str] = API_NAMES) -> None:
        """Run ``save`` in a transaction; the services' refusals become API errors (the
        model's fields under ``names``, the API's)."""
        try:
            with atomic():
                save()
        except ConflictError:
            current = self.get_object()
            raise PreconditionFailed(current=detail(current), etag=etag(current)) from None
        except DschedValidationError as exc:
            raise validation_failed(exc, names) from None
        except IntegrityError:
            raise race_lost() from None

    def _transition(
        self,
        request: Request,
        service: Callable[[QuerySet[Schedule]], ChangeCount],
        *,
        required: bool,
        change: str,
    ) -> Response:
        """A state change (``change``: pause, resume, cancel) by ``service``; 409, naming
        the schedule's state, if the state does not allow it."""
        schedule, count = self._act(
            request,
            lambda locked: service(Schedule.objects.filter(pk=locked.pk)),
            required=required,
        )
        if not count.changed:  # nothing was written
            # A set-aside schedule's error, in the words this caller may read.
            schedule.set_aside_reason = self.audience().error(schedule.set_aside_reason)
            raise StateConflict(unchanged.why_not(change, schedule))
        return with_etag(schedule)

    # -- actions --------------------------------------------------------------------------
    @described(
        summary="Pause a schedule",
        request=PauseInput,
        responses={200: ScheduleDetailSerializer, **errors(*WRITE_ONE, 409, 412)},
        parameters=[if_match(False), ETAG, ETAG_412],
    )
    @action(detail=True, methods=["post"])
    def pause(self, request: Request, **kwargs: Any) -> Response:
        options = body(PauseInput, request)
        return self._transition(
            request,
            lambda selected: pauses.pause(
                selected, actor=request.user, reason=options["reason"], until=options["until"]
            ),
            required=False,
            change="pause",
        )

    @described(
        summary="Resume a paused schedule",
        description=(
            "`catch_up: true` fires the slots missed while paused: it also needs the run-now "
            "permission (checked first; 403 without it, nothing changed)."
        ),
        request=ResumeInput,
        responses={200: ScheduleDetailSerializer, **errors(*WRITE_ONE, 409, 412)},
        parameters=[if_match(False), ETAG, ETAG_412],
    )
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, **kwargs: Any) -> Response:
        options = body(ResumeInput, request)
        if options["catch_up"]:  # checked before anything is read (the table asked PAUSE)
            rules.require(request.user, rules.FIRE, rules.CATCH_UP_WHY)
        return self._transition(
            request,
            lambda selected: pauses.resume(
                selected, actor=request.user, catch_up=options["catch_up"]
            ),
            required=False,
            change="resume",
        )

    @described(
        summary="Fire a schedule once, now",
        description=(
            "Through the exactly-once path; its regular slots do not move and a paused "
            "schedule stays paused."
        ),
        request=NoOptions,
        responses={200: TriggerResultSerializer, **errors(*WRITE_ONE, 409, 412)},
        parameters=[if_match(False), ETAG_412],
    )
    @action(detail=True, methods=["post"])
    def trigger(self, request: Request, **kwargs: Any) -> Response:
        body(NoOptions, request)
        return self._fire(
            request, lambda schedule: {"fired": on_demand.trigger(schedule, actor=request.user)}
        )

    @described(
        summary="Fire the past slots of a range, once each",
        description=(
            "Slots that already fired are not fired again (`already_fired`). A range that "
            "holds no slot of the schedule fires nothing, and `note` says why."
        ),
        request=RangeInput,
        responses={200: BackfillResultSerializer, **errors(*WRITE_ONE, 409, 412)},
        parameters=[if_match(False), ETAG_412],
    )
    @action(detail=True, methods=["post"])
    def backfill(self, request: Request, **kwargs: Any) -> Response:
        bounds = body(RangeInput, request)

        def fire(schedule: Schedule) -> dict[str, Any]:
            start, end = bounds["start"], bounds["end"]
            fired, already = on_demand.backfill(schedule, start, end, actor=request.user)
            note = unchanged.no_slot(schedule, start, end) if fired + already == 0 else None
            return {"fired": fired, "already_fired": already, "note": note}

        return self._fire(request, fire)

    def _fire(self, request: Request, fire: Callable[[Schedule], dict[str, Any]]) -> Response:
        schedule, counts = self._act(request, fire, required=False)
        return Response({**counts, "schedule": detail(schedule)})

    # -- reading ahead --------------------------------------------------------------------
    @described(
        summary="The next fire times",
        parameters=[PreviewQuery],
        responses={200: FiresSerializer, **errors(400, *READ_ONE)},
    )
    @action(detail=True, methods=["get"])
    def preview(self, request: Request, **kwargs: Any) -> Response:
        count = query(PreviewQuery, request)["count"]
        return Response(FiresSerializer({"fires": api.preview(self.get_object(), count)}).data)

    @described(
        summary="What would fire in a range (nothing is written)",
        description="The schedule's slots in [start, end] from its next one on, if it is active.",
        parameters=[DryRunQuery],
        responses={200: FiresSerializer, **errors(400, *READ_ONE)},
    )
    @action(detail=True, methods=["get"], url_path="dry-run")
    def dry_run(self, request: Request, **kwargs: Any) -> Response:
        bounds = query(DryRunQuery, request)
        schedule = self.get_object()
        fires: list[datetime] = []
        if schedule.state == ScheduleState.ACTIVE:
            begin = max(bounds["start"], schedule.next_slot_ts)
            fires = on_demand.slots_between(schedule, begin, bounds["end"], limit=bounds["limit"])
        return Response(FiresSerializer({"fires": fires}).data)

    # -- history --------------------------------------------------------------------------
    @described(
        summary="A schedule's events (fires and changes), newest first",
        parameters=[EventsQuery],
        responses={200: EventSerializer(many=True), **errors(400, *READ_ONE)},
    )
    @action(detail=True, methods=["get"])
    def events(self, request: Request, **kwargs: Any) -> Response:
        kind = query(EventsQuery, request, paginated=True).get("kind")
        queryset = Event.objects.filter(aggregate_id=self.get_object().pk)
        if kind is not None:
            queryset = queryset.filter(scheduled_ts__isnull=kind == "change")
        return self.page(queryset, EventSerializer, ("-aggregate_version",))

    @described(
        summary="A schedule's deliveries (outbox messages), newest first",
        parameters=[DeliveriesQuery],
        responses={200: MessageSerializer(many=True), **errors(400, *READ_ONE)},
    )
    @action(detail=True, methods=["get"])
    def deliveries(self, request: Request, **kwargs: Any) -> Response:
        filters: Mapping[str, Any] = query(DeliveriesQuery, request, paginated=True)
        queryset = OutboxMessage.objects.filter(aggregate_id=self.get_object().pk)
        if "status" in filters:
            queryset = queryset.filter(status=filters["status"])
        return self.page(queryset, MessageSerializer, ("-aggregate_version",))
