"""The schedule actions: on the selection (change list) and as buttons (schedule page).

Both paths run the same code: check the action's permission, show a confirmation page
where the action is destructive, call :mod:`django_dsched.changes` (never a raw update),
write an admin history (LogEntry) record for every schedule changed or created, and
report counts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.functional import Promise
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext

from django_dsched.admin import tenancy
from django_dsched.admin.action_forms import NoOptions, PauseOptions
from django_dsched.admin.schedule_form import ScheduleForm
from django_dsched.changes import cancels, edits, on_demand, pauses, unchanged
from django_dsched.changes import permissions as rules
from django_dsched.conf import app_settings
from django_dsched.counts import ChangeCount
from django_dsched.enums import LIVE, PLANNED, ScheduleOrigin, ScheduleState
from django_dsched.models import Schedule
from django_dsched.models.validators import NAME_MAX_LENGTH

# Schedules listed by name on a confirmation page; more are counted.
LISTED = 50


@dataclass(frozen=True)
class Action:
    name: str
    permission: str  # has_<permission>_permission on the model admin
    label: Promise  # the button
    question: Promise  # the confirmation page's question
    confirm: bool  # destructive: show a confirmation page first
    states: tuple[str, ...]  # states in which the button is offered
    options: type[forms.Form] = NoOptions
    warning: Promise | None = None


ACTIONS = {
    action.name: action
    for action in [
        Action(
            "pause",
            "pause",
            gettext_lazy("Pause"),
            gettext_lazy("Pause these schedules? They stop firing until resumed."),
            confirm=True,
            states=(ScheduleState.ACTIVE,),
            options=PauseOptions,
        ),
        Action(
            "resume",
            "pause",
            gettext_lazy("Resume"),
            gettext_lazy("Resume these schedules?"),
            confirm=False,
            states=(ScheduleState.PAUSED, ScheduleState.SET_ASIDE),
        ),
        Action(
            "run_now",
            "trigger",
            gettext_lazy("Run now"),
            gettext_lazy("Fire these schedules once, now?"),
            confirm=True,
            states=PLANNED,
            warning=gettext_lazy(
                "Each schedule fires one event now, delivered like any other fire; its "
                "regular slots are not moved."
            ),
        ),
        Action(
            "duplicate",
            "add",
            gettext_lazy("Duplicate"),
            gettext_lazy("Duplicate these schedules?"),
            confirm=False,
            states=tuple(ScheduleState.values),
        ),
        Action(
            "cancel",
            "cancel",
            gettext_lazy("Cancel"),
            gettext_lazy("Cancel these schedules for good?"),
            confirm=True,
            states=LIVE,
            warning=gettext_lazy(
                "A cancelled schedule never fires again and cannot be resumed or edited. "
                "Its history is kept."
            ),
        ),
    ]
}


@dataclass
class Result:
    changed: list[Schedule] = field(default_factory=list)
    # Left as they were because of their state (as read after the action).
    skipped: list[Schedule] = field(default_factory=list)
    created: list[Schedule] = field(default_factory=list)


def _atomic() -> transaction.Atomic:
    return transaction.atomic(using=app_settings.DATABASE)


def copy_name(name: str, taken: set[str]) -> str:
    """ "<name> (copy)", or "<name> (copy 2)" ..., free in ``taken`` and short enough."""
    number = 1
    while True:
        suffix = _(" (copy)") if number == 1 else _(" (copy %(n)d)") % {"n": number}
        candidate = name[: NAME_MAX_LENGTH - len(suffix)] + suffix
        if candidate not in taken:
            return candidate
        number += 1


# ModelAdmin is generic for the type checker only (django-stubs).
if TYPE_CHECKING:
    ScheduleModelAdmin = admin.ModelAdmin[Schedule]
else:
    ScheduleModelAdmin = admin.ModelAdmin


class ScheduleActionsMixin(ScheduleModelAdmin):
    """Actions and buttons of :class:`ScheduleAdmin`."""

    actions: Sequence[str] = [
        "pause_selected",
        "resume_selected",
        "run_now_selected",
        "duplicate_selected",
        "cancel_selected",
    ]

    # -- permissions ----------------------------------------------------------------------
    # The capabilities of django_dsched.changes.permissions, as the REST API and the
    # commands ask them.
    def has_pause_permission(self, request: HttpRequest) -> bool:
        return rules.allows(request.user, rules.PAUSE)

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return rules.allows(request.user, rules.CANCEL)

    def has_trigger_permission(self, request: HttpRequest) -> bool:
        return rules.allows(request.user, rules.FIRE)

    def allowed(self, request: HttpRequest, action: Action) -> bool:
        check: Callable[[HttpRequest], bool] = getattr(self, f"has_{action.permission}_permission")
        return check(request)

    def buttons(self, request: HttpRequest, schedule: Schedule) -> list[dict[str, Any]]:
        """The action buttons the user may press on ``schedule``'s page, in its state."""
        return [
            {
                "action": action,
                "url": reverse(
                    f"admin:{self.opts.app_label}_{self.opts.model_name}_do",
                    args=[schedule.pk, action.name],
                ),
            }
            for action in ACTIONS.values()
            if schedule.state in action.states and self.allowed(request, action)
        ]

    # -- on the selection -----------------------------------------------------------------
    @admin.action(description=gettext_lazy("Pause selected schedules"), permissions=["pause"])
    def pause_selected(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> Any:
        return self._on_selection(request, queryset, ACTIONS["pause"])

    @admin.action(description=gettext_lazy("Resume selected schedules"), permissions=["pause"])
    def resume_selected(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> Any:
        return self._on_selection(request, queryset, ACTIONS["resume"])

    @admin.action(
        description=gettext_lazy("Run selected schedules now (fire once)"),
        permissions=["trigger"],
    )
    def run_now_selected(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> Any:
        return self._on_selection(request, queryset, ACTIONS["run_now"])

    @admin.action(
        description=gettext_lazy("Duplicate selected schedules (as paused copies)"),
        permissions=["add"],
    )
    def duplicate_selected(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> Any:
        return self._on_selection(request, queryset, ACTIONS["duplicate"])

    @admin.action(description=gettext_lazy("Cancel selected schedules"), permissions=["cancel"])
    def cancel_selected(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> Any:
        return self._on_selection(request, queryset, ACTIONS["cancel"])

    def _on_selection(
        self, request: HttpRequest, queryset: QuerySet[Schedule], action: Action
    ) -> HttpResponse | None:
        confirmed = request.POST.get("post") == "yes"
        form = action.options(request.POST if confirmed else None)
        if action.confirm and not (confirmed and form.is_valid()):
            return self._confirmation(request, action, form, queryset, selection=True)
        ids = list(queryset.values_list("pk", flat=True))
        try:
            self._perform(request, action, ids, form.cleaned_data if action.confirm else {})
        except ValidationError as exc:
            form.add_error(None, exc)
            return self._confirmation(request, action, form, queryset, selection=True)
        return None

    # -- on one schedule (the buttons) ----------------------------------------------------
    def object_action_view(self, request: HttpRequest, object_id: str, action: str) -> Any:
        chosen = ACTIONS.get(action)
        if chosen is None:
            raise Http404
        schedule = self.get_object(request, unquote(object_id))
        if schedule is None:
            return self._get_obj_does_not_exist_redirect(  # type: ignore[attr-defined]
                request, self.opts, object_id
            )
        if not self.allowed(request, chosen):
            raise PermissionDenied
        change_url = reverse(
            f"admin:{self.opts.app_label}_{self.opts.model_name}_change", args=[schedule.pk]
        )
        if request.method == "GET" and chosen.confirm:
            return self._confirmation(request, chosen, chosen.options(), [schedule])
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        form = chosen.options(request.POST)
        if form.is_valid():
            try:
                result = self._perform(request, chosen, [schedule.pk], form.cleaned_data)
            except ValidationError as exc:
                form.add_error(None, exc)
            else:
                if result.created:
                    return redirect(
                        f"admin:{self.opts.app_label}_{self.opts.model_name}_change",
                        result.created[0].pk,
                    )
                return redirect(change_url)
        return self._confirmation(request, chosen, form, [schedule])

    # -- the confirmation page --------------------------------------------------------------
    def _confirmation(
        self,
        request: HttpRequest,
        action: Action,
        form: forms.Form,
        schedules: Iterable[Schedule],
        *,
        selection: bool = False,
    ) -> TemplateResponse:
        listed = list(schedules[: LISTED + 1] if isinstance(schedules, QuerySet) else schedules)
        total = schedules.count() if isinstance(schedules, QuerySet) else len(listed)
        opts = self.opts
        context = {
            **self.admin_site.each_context(request),
            "title": action.question,
            "subtitle": None,
            "opts": opts,
            "action": action,
            "form": form,
            "schedules": listed[:LISTED],
            "more": max(0, total - LISTED),
            "selection": selection,
            "selected": request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
            "select_across": request.POST.get("select_across", "0"),
            "action_name": f"{action.name}_selected",
            "cancel_url": request.get_full_path()
            if selection
            else reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[listed[0].pk]),
            "media": self.media + form.media,
        }
        return TemplateResponse(request, "admin/dsched/schedule/action_confirmation.html", context)

    # -- doing it ---------------------------------------------------------------------------
    def chosen(self, request: HttpRequest, ids: list[Any]) -> QuerySet[Schedule]:
        """The schedules ``ids`` names among those the user may see (admin/tenancy.py):
        the selection already is, and an id of another tenant's schedule acts on nothing."""
        return tenancy.scoped(request, Schedule.objects.filter(pk__in=ids))

    def _perform(
        self, request: HttpRequest, action: Action, ids: list[Any], options: dict[str, Any]
    ) -> Result:
        handler: Callable[..., Result] = getattr(self, f"_do_{action.name}")
        result = handler(request, ids, **options)
        self._report(request, action, result)
        return result

    def _transition(
        self,
        request: HttpRequest,
        ids: list[Any],
        service: Callable[..., ChangeCount],
        note: str,
        **options: Any,
    ) -> Result:
        """Run a state change over ``ids`` and log each schedule it changed.

        The rows stay locked from before the change to the log, so the versions compared
        tell exactly which schedules this action changed.
        """
        with _atomic():
            chosen = self.chosen(request, ids)
            locked = list(chosen.select_for_update().order_by("pk"))
            before = {s.pk: s.aggregate_version for s in locked}
            service(Schedule.objects.filter(pk__in=before), actor=request.user, **options)
            after = dict(
                Schedule.objects.filter(pk__in=before).values_list("pk", "aggregate_version")
            )
            changed = [s for s in locked if after.get(s.pk) != before[s.pk]]
            for schedule in changed:
                self.log_change(request, schedule, note)
            skipped = [s for s in locked if after.get(s.pk) == before[s.pk]]
        return Result(changed=changed, skipped=skipped)

    def _do_pause(
        self, request: HttpRequest, ids: list[Any], reason: str = "", until: Any = None
    ) -> Result:
        note = _("Paused.")
        if reason:
            note = _("Paused: %(reason)s") % {"reason": reason}
        if until is not None:
            note += " " + _("Until %(until)s.") % {"until": until.isoformat()}
        return self._transition(request, ids, pauses.pause, note, reason=reason, until=until)

    def _do_resume(self, request: HttpRequest, ids: list[Any]) -> Result:
        return self._transition(request, ids, pauses.resume, _("Resumed."))

    def _do_cancel(self, request: HttpRequest, ids: list[Any]) -> Result:
        return self._transition(request, ids, cancels.cancel, _("Cancelled."))

    def _do_run_now(self, request: HttpRequest, ids: list[Any]) -> Result:
        result = Result()
        for schedule in self.chosen(request, ids).order_by("schedule_name"):
            try:
                fired = on_demand.trigger(schedule, actor=request.user)
            except ValidationError:
                schedule.refresh_from_db()
                result.skipped.append(schedule)
                continue
            if fired:
                result.changed.append(schedule)
                self.log_change(request, schedule, _("Ran now: fired once."))
            else:
                result.skipped.append(schedule)
        return result

    def _do_duplicate(self, request: HttpRequest, ids: list[Any]) -> Result:
        result = Result()
        for source in self.chosen(request, ids).order_by("schedule_name"):
            try:
                result.created.append(self._duplicate(request, source))
            except ValidationError as exc:
                self.message_user(
                    request,
                    _("%(name)s was not copied: %(error)s")
                    % {"name": source.schedule_name, "error": " ".join(exc.messages)},
                    messages.WARNING,
                )
        return result

    def _duplicate(self, request: HttpRequest, source: Schedule) -> Schedule:
        """A paused copy of ``source``'s definition under a new name (never fires unseen)."""
        stem = source.schedule_name[: NAME_MAX_LENGTH - 16]
        taken = set(
            Schedule.objects.filter(
                host_id=source.host_id, schedule_name__startswith=stem
            ).values_list("schedule_name", flat=True)
        )
        copy = Schedule(
            **{name: getattr(source, name) for name in ScheduleForm.Meta.fields},
            origin=ScheduleOrigin.ADMIN,
        )
        copy.schedule_name = copy_name(source.schedule_name, taken)
        with _atomic():
            # It is paused before this transaction ends, so it never fires unseen: creating
            # it needs no permission to fire, whatever its start and misfire policy.
            edits.save_schedule(copy, actor=request.user, may_fire=True)
            reason = _("Copy of %(name)s: review it, then resume it.") % {
                "name": source.schedule_name
            }
            pauses.pause(Schedule.objects.filter(pk=copy.pk), actor=request.user, reason=reason)
            copy.refresh_from_db()
            self.log_addition(
                request, copy, _("Duplicated from %(name)s.") % {"name": source.schedule_name}
            )
        return copy

    # -- reporting ------------------------------------------------------------------------
    def _report(self, request: HttpRequest, action: Action, result: Result) -> None:
        if action.name == "duplicate":
            count = len(result.created)
            text = ngettext(
                "%(count)d schedule duplicated, as a paused copy: %(names)s.",
                "%(count)d schedules duplicated, as paused copies: %(names)s.",
                count,
            ) % {"count": count, "names": ", ".join(s.schedule_name for s in result.created)}
            if count:
                self.message_user(request, text, messages.SUCCESS)
            return
        count = len(result.changed)
        done = {
            "pause": ngettext("%(count)d schedule paused.", "%(count)d schedules paused.", count),
            "resume": ngettext(
                "%(count)d schedule resumed.", "%(count)d schedules resumed.", count
            ),
            "cancel": ngettext(
                "%(count)d schedule cancelled.", "%(count)d schedules cancelled.", count
            ),
            "run_now": ngettext(
                "%(count)d schedule fired once now.", "%(count)d schedules fired once now.", count
            ),
        }[action.name]
        self.message_user(
            request, done % {"count": count}, messages.SUCCESS if count else messages.INFO
        )
        if result.skipped:
            self.message_user(request, skipped(action.name, result.skipped), messages.WARNING)


def skipped(change: str, schedules: Sequence[Schedule]) -> str:
    """Which schedules ``change`` left as they were, and why: each one's state (the words of
    the command and the REST API, :mod:`django_dsched.changes.unchanged`)."""
    if len(schedules) == 1:
        return _("1 schedule was skipped: %(why)s") % {
            "why": unchanged.why_not(change, schedules[0])
        }
    by_name = sorted(schedules, key=lambda schedule: schedule.schedule_name)
    named = [unchanged.state_of(schedule) for schedule in by_name[:LISTED]]
    if len(schedules) > LISTED:
        named.append(_("%(count)d more") % {"count": len(schedules) - LISTED})
    return ngettext(
        "%(count)d schedule was skipped: %(which)s. %(rule)s",
        "%(count)d schedules were skipped: %(which)s. %(rule)s",
        len(schedules),
    ) % {"count": len(schedules), "which": "; ".join(named), "rule": unchanged.rule(change)}
