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
from django.utils.translation import gettext_lazy as _

from django_dsched.admin.tenancy import allowed_host
from django_dsched.changes import edits, permissions, quotas
from django_dsched.changes.creates import Preparer
from django_dsched.changes.describe import both_times
from django_dsched.changes.routes import check_routed
from django_dsched.conf import app_settings
from django_dsched.enums import ScheduleState
from django_dsched.exceptions import CronError, EditNotPermitted, TimetableError
from django_dsched.models import Schedule
from django_dsched.runtime.clock import database_now
from django_dsched.timetables.zones import zone as zone_named

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


class ScheduleForm(ScheduleModelForm):
    """The schedule form, with the version it was read at (for the concurrent-edit check).

    ``seen_version`` is the ``aggregate_version`` the page showed. Every fire and every
    change bumps the version, so a save over a newer state is refused instead of
    overwriting it. Inside the admin's transaction the row is locked while checking, so
    nothing can change it between the check and the save.
    """

    seen_version = forms.IntegerField(widget=forms.HiddenInput, required=False)
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
        ]
        widgets = {"event_data": forms.Textarea(attrs={"rows": 4, "class": "vLargeTextField"})}
        help_texts = {
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
        if self.hosts is not None and "host_id" in self.fields:
            # Offer the user's hosts only (a value posted by hand is checked all the same).
            self.fields["host_id"].widget = forms.Select(
                choices=[(str(host), str(host)) for host in self.hosts]
            )

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
            helps = [str(field.help_text), str(ZONED_HELP % {"zone": zone})]
            saved = getattr(self.instance, field_name, None)
            if self.instance.pk and isinstance(saved, datetime):
                helps.append(str(SAVED_AS % {"when": both_times(saved, zone)}))
            zoned.help_text = " ".join(h for h in helps if h)
            self.fields[field_name] = zoned

    def clean_host_id(self) -> Any:
        return allowed_host(self.hosts, self.cleaned_data.get("host_id"))

    def clean(self) -> dict[str, Any] | None:
        cleaned = super().clean()
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

    def _current(self) -> tuple[int, str] | None:
        """The stored version and state, locked when inside a transaction."""
        rows = Schedule.objects.filter(pk=self.instance.pk).values_list(
            "aggregate_version", "state"
        )
        if transaction.get_connection(app_settings.DATABASE).in_atomic_block:
            rows = rows.select_for_update()
        return rows.first()
