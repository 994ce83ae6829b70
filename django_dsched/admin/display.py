"""HTML snippets the admin pages share: state badges and moments (absolute + relative).

Everything here escapes what it shows (``format_html``, or :func:`markup` where a list
writes it for every row); data is never marked safe.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

from django.contrib import admin
from django.db.models import Model
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.html import avoid_wrapping, escape
from django.utils.safestring import SafeData, SafeString, mark_safe
from django.utils.timesince import timesince, timeuntil
from django.utils.timezone import is_aware
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from django_dsched.changes.describe import is_utc, zone_of
from django_dsched.enums import ScheduleState
from django_dsched.models import OutboxMessage
from django_dsched.outbox import phases

EMPTY = "-"

# Badge colours by value: the admin's own message colours, so dark mode follows.
TONES = {
    ScheduleState.ACTIVE: "ok",
    ScheduleState.PAUSED: "warn",
    ScheduleState.CANCELLED: "bad",
    ScheduleState.COMPLETED: "quiet",
    ScheduleState.SET_ASIDE: "bad",
    "PENDING": "warn",
    "DELIVERED": "ok",
    "DELIVERY_FAILED": "bad",
    # Run statuses (outbox.phases.run_status) not listed above.
    "PICKED": "quiet",
    "RUNNING": "warn",
    "RETRYING": "warn",
    "HANDED_OFF": "quiet",
    "SUCCEEDED": "ok",
    "FAILED": "bad",
    "DEAD": "bad",
    "leader": "ok",
    "standby": "quiet",
    "stale": "bad",
}


# Where a long name, zone or event type may break: after these characters, and inside a
# run of more than LONG_RUN characters without them (so "Australia/Sydney" breaks only at
# the slash, never inside "Sydney").
_BREAK_AFTER = re.compile(r"([/._:\-])")
_LONG_RUN = re.compile(r"([^/._:\-\s]{24})(?=[^/._:\-\s])")


def markup(template: str, *args: Any) -> SafeString:
    """``format_html`` for what a list writes thousands of times a page: each argument
    escaped unless it is safe already, the same text, without its lazy-string wrappers
    (a third of the time)."""
    return SafeString(
        template.format(*(a if isinstance(a, SafeData) else html.escape(str(a)) for a in args))
    )


def breakable(text: str) -> SafeString:
    """``text`` (escaped) with line-break opportunities at its separators (``<wbr>``): a
    list's narrow column wraps it between words and parts, never mid-word."""
    escaped = str(escape(text))
    with_runs = _LONG_RUN.sub(lambda m: m.group(1) + "\0", escaped)
    return mark_safe(_BREAK_AFTER.sub(r"\1\0", with_runs).replace("\0", "<wbr>"))


def badge(value: str, label: str, *, title: str = "") -> SafeString:
    """A coloured label, e.g. the state of a schedule."""
    tone = TONES.get(value, "quiet")
    if title:
        return markup(
            '<span class="dsched-badge dsched-{}" title="{}">{}</span>', tone, title, label
        )
    return markup('<span class="dsched-badge dsched-{}">{}</span>', tone, label)


# One unit of a relative time under a day, as Django's timesince writes it (the same
# messages, so its translations apply).
UNDER_A_DAY: tuple[tuple[int, Callable[[int], str]], ...] = (
    (3600, lambda n: ngettext("%(num)d hour", "%(num)d hours", n)),
    (60, lambda n: ngettext("%(num)d minute", "%(num)d minutes", n)),
)


def relative(moment: datetime, now: datetime) -> str:
    """ "in 4 minutes", "2 hours ago" or "now", measured on ``now`` (the database's clock):
    under a day, the time that passes (one unit, as Django's ``timesince`` writes it,
    without its calendar arithmetic: what a list shows most); from a day on, Django's
    ``timeuntil``/``timesince`` with ``depth=1``."""
    if is_aware(moment) and is_aware(now):
        seconds = (moment.astimezone(UTC) - now.astimezone(UTC)).total_seconds()
    else:
        seconds = (moment - now).total_seconds()
    if abs(seconds) < 1:
        return _("now")
    if abs(seconds) < 60:
        if seconds > 0:
            return _("in %(seconds)d s") % {"seconds": seconds}
        return _("%(seconds)d s ago") % {"seconds": -seconds}
    whole = int(abs(seconds))  # as timesince: no fractions of a second
    if whole < 86_400:
        size, phrase = next(unit for unit in UNDER_A_DAY if whole >= unit[0])
        delta = avoid_wrapping(phrase(whole // size) % {"num": whole // size})
    elif moment > now:
        delta = timeuntil(moment, now, depth=1)
    else:
        delta = timesince(moment, now, depth=1)
    if moment > now:
        return _("in %(delta)s") % {"delta": delta}
    return _("%(delta)s ago") % {"delta": delta}


def age(seconds: float) -> str:
    """A duration for ages such as a heartbeat's: "0.4 s", "12 s", "3 minutes"."""
    if seconds < 10:
        return _("%(seconds).1f s") % {"seconds": seconds}
    if seconds < 120:
        return _("%(seconds)d s") % {"seconds": seconds}
    now = timezone.now()
    return timesince(now - timedelta(seconds=seconds), now, depth=2)


def absolute(moment: datetime) -> SafeString:
    """The time in the server's time zone; ``localtime.js`` rewrites it in the viewer's."""
    local = timezone.localtime(moment)
    return markup(
        '<time datetime="{}" data-dsched-local title="{}">{}</time>',
        moment.isoformat(),
        local.isoformat(),
        f"{date_format(local, 'Y-m-d H:i:s')} {local:%Z}",
    )


def zoned(moment: datetime, zone: tzinfo) -> SafeString:
    """A schedule's time as its staff read it: on the wall clock of the schedule's zone,
    then in UTC (``2026-12-31 09:00:00 AEDT`` / ``2026-12-30 22:00:00 UTC``); a UTC
    schedule's in UTC only. Never rewritten in the viewer's zone: the schedule's day is
    the one that matters (a Sydney month-end is not the 30th)."""
    utc = moment.astimezone(UTC)
    if is_utc(zone):
        return markup(
            '<time datetime="{}" class="dsched-zoned"><span class="dsched-date">{}</span> '
            '<span class="dsched-time">{} UTC</span></time>',
            utc.isoformat(),
            f"{utc:%Y-%m-%d}",
            f"{utc:%H:%M:%S}",
        )
    local = moment.astimezone(zone)
    return markup(
        '<time datetime="{}" class="dsched-zoned" title="{}"><span class="dsched-date">{}'
        '</span> <span class="dsched-time">{} {}</span></time> <small class="dsched-utc">'
        '<span class="dsched-date">{}</span> <span class="dsched-time">{} UTC</span></small>',
        utc.isoformat(),
        str(zone),
        f"{local:%Y-%m-%d}",
        f"{local:%H:%M:%S}",
        local.tzname() or str(zone),
        f"{utc:%Y-%m-%d}",
        f"{utc:%H:%M:%S}",
    )


def moment(
    value: datetime | None,
    now: datetime | None,
    *,
    quiet: bool = False,
    zone: tzinfo | None = None,
) -> SafeString:
    """Absolute time and, under it, how far it is from now. With ``zone`` (a schedule's
    time), on that zone's wall clock and in UTC (:func:`zoned`); else in the viewer's."""
    if value is None:
        return markup("{}", EMPTY)
    shown = absolute(value) if zone is None else zoned(value, zone)
    if now is None:
        return shown
    return markup(
        '<span class="dsched-moment{}">{}<br><small>{}</small></span>',
        " dsched-muted" if quiet else "",
        shown,
        relative(value, now),
    )


def time_display(
    model: type[Model], field: str, *, description: Any = None, in_zone: bool = False
) -> Callable[[Any, Any], SafeString]:
    """A ModelAdmin display method for the datetime ``field`` of ``model``, written as
    every dsched page writes a time (:func:`absolute`: ``2026-11-27 03:14:00 UTC``, then
    the viewer's zone), not as Django's default (``Nov. 27, 2026, 3:14 a.m.``); with
    ``in_zone``, a schedule's own time, on its zone's wall clock and in UTC (:func:`zoned`).
    Sorts by the field; labelled by its verbose name unless ``description`` says otherwise."""
    model_field = model._meta.get_field(field)
    label = description or getattr(model_field, "verbose_name", field)

    @admin.display(description=label, ordering=field)
    def show(model_admin: Any, obj: Any) -> SafeString:
        value = getattr(obj, field, None)
        # Not a time yet (None, or an unsaved row's database default): "-".
        if not isinstance(value, datetime):
            return markup("{}", EMPTY)
        return zoned(value, zone_of(obj)) if in_zone else absolute(value)

    # The field's help text, for its page (base.ShownTimes puts it under the value).
    show.help_text = getattr(model_field, "help_text", "")  # type: ignore[attr-defined]
    return show


def duration(value: timedelta | None) -> str:
    """A duration such as a run's, or "-"."""
    return EMPTY if value is None else age(max(0.0, value.total_seconds()))


def run_badge(message: OutboxMessage) -> SafeString:
    """A delivery's run status (derived from its phases, ``outbox.phases``) as a badge."""
    status = phases.run_status(message)
    return badge(status.value, str(status.label))


def run_duration(message: OutboxMessage) -> str:
    """From the run's start to its end (completed or failed), or "-"."""
    return duration(phases.run_time(message.started_ts, message.completed_ts, message.failed_ts))
