"""The schedule form: the model's own validation, the concurrent-edit check, and the
permission check of edits that would end or fire a schedule at once."""

from __future__ import annotations

import copy
import uuid
from datetime import UTC, datetime, tzinfo
from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib.admin.widgets import AdminSplitDateTime
from django.db import transaction
from django.forms.models import construct_instance
from django.utils import timezone
from django.utils.functional import cached_property
from django.utils.translation import gettext_lazy as _

from django_dsched.admin.tenancy import allowed_host
from django_dsched.changes import edits, permissions, quotas
from django_dsched.changes.calendar_use import check_calendars, usable_hosts
from django_dsched.changes.creates import Preparer
from django_dsched.changes.describe import both_times
from django_dsched.changes.routes import check_routed
from django_dsched.conf import app_settings
from django_dsched.enums import CalendarPolicy, ScheduleState
from django_dsched.exceptions import CronError, EditNotPermitted, TimetableError, ValidationError
from django_dsched.models import Calendar, Schedule
from django_dsched.runtime.clock import database_now
from django_dsched.timetables.zones import zone as zone_named


def calendar_choices(hosts: list[uuid.UUID] | None) -> list[tuple[str, str]]:
    """The calendars a user of ``hosts`` (None: every host) may choose from: their hosts'
    and the operator's, by name (and host, when there is more than one)."""
    rows = Calendar.objects.order_by("name", "host_id")
    if hosts is not None:
        rows = rows.filter(host_id__in={h for host in hosts for h in usable_hosts(host)})
    found = list(rows.values_list("pk", "name", "host_id"))
    many = len({host for _pk, _name, host in found}) > 1
    return [(str(pk), f"{name} ({host})" if many else name) for pk, name, host in found]


CONFLICT = _(
    "This schedule changed since you opened it (it fired or someone edited it): version "
    "%(seen)d is now %(current)d. Your changes were not saved; reload the page and apply "
    "them again."
)


ZONED_HELP = _(
    "On the wall clock of the schedule's time zone (the Time zone field above: "
    "%(zone)s), not yours and not UTC."
)
SAVED_AS = _("Saved: %(when)s.")


class ZonedSplitDateTime(AdminSplitDateTime):
    """The admin's date and time boxes, showing a time on ``zone``'s wall clock."""

    zone: tzinfo = UTC

    def decompress(self, value: Any) -> Any:
        with timezone.override(self.zone):
            return super().decompress(value)


class ZonedSplitDateTimeField(forms.SplitDateTimeField):
    """A date and a time read on ``zone``'s wall clock (a wall time that a DST change
    skips or repeats there is refused as ambiguous, naming the zone)."""

    widget = ZonedSplitDateTime
    zone: tzinfo = UTC

    def compress(self, data_list: Any) -> Any:
        with timezone.override(self.zone):
            return super().compress(data_list)


# ModelForm is generic for the type checker only (django-stubs).
if TYPE_CHECKING:
    ScheduleModelForm = forms.ModelForm[Schedule]
else:
    ScheduleModelForm = forms.ModelForm


# Schedule health's thresholds (models/health.py), a fieldset of their own.
HEALTH_FIELDS = ("health_grace_seconds", "failure_tolerance", "max_runtime_seconds", "monitored")


class ScheduleForm(ScheduleModelForm):
    """The schedule form, with the version it was read at (for the concurrent-edit check).

    ``seen_version`` is the ``aggregate_version`` the page showed. Every fire and every
    change bumps the version, so a save over a newer state is refused instead of
    overwriting it. Inside the admin's transaction the row is locked while checking, so
    nothing can change it between the check and the save.
    """

    seen_version = forms.IntegerField(widget=forms.HiddenInput, required=False)
    # The calendars the schedule's host may use (its own and the operator's; each
    # schedule's are checked again against its host when the form is cleaned).
    calendar_ids = forms.TypedMultipleChoiceField(
        label=_("calendars"),
        required=False,
        coerce=uuid.UUID,
        help_text=_(
            "Business calendars that filter the slots: a slot on a day off is dropped or "
            "moved (the policy), a slot in a blackout window is dropped."
        ),
    )
    # Read only with calendars; not sent (a form of before): the schedule's, unchanged.
    calendar_policy = forms.TypedChoiceField(
        label=_("on a day off"),
        choices=CalendarPolicy.choices,
        required=False,
        empty_value=CalendarPolicy.OMIT.value,
        help_text=_("What a slot on a day off of its calendars becomes."),
    )
    # Whether the user may end a schedule (cancel) or fire it at once (run now): an edit
    # that would do either is refused without it. The admin sets both per request.
    may_complete = False
    may_fire = False
    # The hosts the user may see (admin/tenancy.py), or None: every host. The admin sets it
    # per request; a schedule is created in, or moved to, one of them only.
    hosts: list[uuid.UUID] | None = None

    class Meta:
        model = Schedule
        fields = [
            "schedule_name",
            "host_id",
            "schedule_kind",
            "frequency_time",
            "frequency_unit",
            "cron_expression",
            "time_zone",
            "start_ts",
            "end_ts",
            "max_fires",
            "jitter_seconds",
            "priority",
            "misfire_policy",
            "misfire_grace_seconds",
            "catch_up_limit",
            "event_topic",
            "event_type",
            "event_data",
            *HEALTH_FIELDS,
            # The overlap and failure policies (docs/overlap.md).
            "overlap_policy",
            "pause_on_failure",
            # The recurrence rule and the calendars (models/recurrence.py).
            "rrule",
            "calendar_ids",
            "calendar_policy",
        ]
        widgets = {
            "event_data": forms.Textarea(attrs={"rows": 4, "class": "vLargeTextField"}),
            "rrule": forms.Textarea(attrs={"rows": 3, "class": "vLargeTextField"}),
        }
        help_texts = {
            "misfire_grace_seconds": _(
                "The catch-up window: a slot later than this (after an outage, or held for "
                "the previous run) is skipped. Empty: no limit for fire-once and catch-up, "
                "DSCHED_MISFIRE_GRACE_SECONDS for skip."
            ),
            "time_zone": _(
                "IANA zone whose wall clock a cron expression follows and day, week, month "
                "and year intervals step (seconds, minutes and hours are plain durations)."
            ),
            "jitter_seconds": _(
                "Each fire happens up to this much after its slot (a fixed spread), and "
                "always before the next slot."
            ),
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._zone_times()
        if self.instance.pk:
            # Shown in the page; when bound, only tells that the field did not change.
            self.fields["seen_version"].initial = self.instance.aggregate_version
        if "overlap_policy" in self.fields:
            # A post without it (a client older than the field) keeps the schedule's policy.
            self.fields["overlap_policy"].required = False
        if self.hosts is not None and "host_id" in self.fields:
            # Offer the user's hosts only (a value posted by hand is checked all the same).
            self.fields["host_id"].widget = forms.Select(
                choices=[(str(host), str(host)) for host in self.hosts]
            )
        if "calendar_ids" in self.fields:
            field = self.fields["calendar_ids"]
            assert isinstance(field, forms.TypedMultipleChoiceField)
            field.choices = calendar_choices(self.hosts)

    # Fields a post may leave out (a client older than them): the schedule keeps its value,
    # and the edit does not count them as changed.
    KEPT_WHEN_ABSENT = ("overlap_policy", "calendar_policy")

    def _sent(self, name: str) -> bool:
        return self.add_prefix(name) in self.data

    @cached_property
    def changed_data(self) -> list[str]:
        changed = super().changed_data
        return [n for n in changed if n not in self.KEPT_WHEN_ABSENT or self._sent(n)]

    def clean_overlap_policy(self) -> str:
        value = self.cleaned_data.get("overlap_policy") if self._sent("overlap_policy") else None
        return str(value or self.instance.overlap_policy)

    def clean_calendar_policy(self) -> str:
        if not self._sent("calendar_policy"):
            return str(self.instance.calendar_policy)
        return str(self.cleaned_data.get("calendar_policy") or CalendarPolicy.OMIT.value)

    def _zone_times(self) -> None:
        """Start and end are entered and shown on the schedule zone's wall clock: the zone
        sent with them, else the schedule's (UTC for a new one)."""
        name = self.data.get(self.add_prefix("time_zone")) if self.is_bound else None
        name = name or self.instance.time_zone or self.initial.get("time_zone") or "UTC"
        try:
            zone: tzinfo = zone_named(str(name))
        except CronError:
            zone = UTC  # the time zone field says what is wrong
        for field_name in ("start_ts", "end_ts"):
            field = self.fields.get(field_name)
            if not isinstance(field, forms.SplitDateTimeField):
                continue
            zoned = ZonedSplitDateTimeField(
                required=field.required,
                label=field.label,
                widget=ZonedSplitDateTime(),
            )
            zoned.zone = zoned.widget.zone = zone
            # The zone of the boxes' "Today" and "Now" (schedule_form.js).
            zoned.widget.attrs["data-dsched-zone"] = str(zone)
            helps = [str(field.help_text), str(ZONED_HELP % {"zone": zone})]
            saved = getattr(self.instance, field_name, None)
            if self.instance.pk and isinstance(saved, datetime):
                helps.append(str(SAVED_AS % {"when": both_times(saved, zone)}))
            zoned.help_text = " ".join(h for h in helps if h)
            self.fields[field_name] = zoned

    def clean_host_id(self) -> Any:
        return allowed_host(self.hosts, self.cleaned_data.get("host_id"))

    def clean_calendar_ids(self) -> Any:
        return self.cleaned_data.get("calendar_ids") or None  # none is NULL

    def clean(self) -> dict[str, Any] | None:
        cleaned = super().clean()
        self._check_calendars()
        if self.instance._state.adding:
            self._check_create()
            return cleaned
        current = self._current()
        if current is None:
            return cleaned
        version, state = current
        seen = (cleaned or {}).get("seen_version")
        if seen is not None and version != seen:
            raise forms.ValidationError(
                CONFLICT, code="conflict", params={"seen": seen, "current": version}
            )
        if state == ScheduleState.CANCELLED:
            raise forms.ValidationError(
                _("A cancelled schedule cannot be edited."), code="cancelled"
            )
        self._check_edit()
        return cleaned

    def _check_edit(self) -> None:
        """Refuse an edit that would end or fire the schedule at once without the
        permission to cancel / run now, on the field that causes it."""
        if self.errors:
            return
        fields = [name for name in self.changed_data if name != "seen_version"]
        edited = construct_instance(self, copy.copy(self.instance), fields=self._meta.fields)
        try:
            edits.check_edit(edited, fields, may_complete=self.may_complete, may_fire=self.may_fire)
        except TimetableError:
            return  # an invalid timing: the model's own validation reports it
        except EditNotPermitted as exc:
            raise forms.ValidationError(exc.message_dict) from None

    def _check_create(self) -> None:
        """Refuse a new schedule past its host's quota of live schedules (checked under the
        host's quota lock, which the admin's transaction keeps until the save commits), or
        that would fire a backlog at once without the permission to run now
        (:func:`.permissions.check_new`), on its misfire policy."""
        if self.errors:
            return
        new = construct_instance(self, copy.copy(self.instance), fields=self._meta.fields)
        refused = quotas.room(new.host_id, 1, record=False)  # the save writes a new row
        if refused is not None:
            raise forms.ValidationError(refused.message, code=refused.code)
        check_routed(new)  # a topic no route grants to the host: on the topic field
        if self.may_fire:
            return
        try:
            Preparer().prepare_instance(new)
        except (forms.ValidationError, TimetableError):
            return  # invalid: the model's own validation reports it
        if permissions.fires_a_backlog(new, database_now):
            error = permissions.refusal(permissions.FIRE, permissions.BACKLOG_WHY)
            raise forms.ValidationError({"misfire_policy": error.message})

    def _check_calendars(self) -> None:
        """Refuse calendars the schedule's host may not use (another tenant's) on the
        calendars field."""
        if self.errors or not self.cleaned_data.get("calendar_ids"):
            return
        new = construct_instance(self, copy.copy(self.instance), fields=self._meta.fields)
        try:
            check_calendars(new)
        except ValidationError as exc:
            raise forms.ValidationError(exc.message_dict) from None

    def _current(self) -> tuple[int, str] | None:
        """The stored version and state, locked when inside a transaction."""
        rows = Schedule.objects.filter(pk=self.instance.pk).values_list(
            "aggregate_version", "state"
        )
        if transaction.get_connection(app_settings.DATABASE).in_atomic_block:
            rows = rows.select_for_update()
        return rows.first()
