"""Validators shared by the model, the admin form and the API."""

from __future__ import annotations

import json
import math
import re
from datetime import UTC, datetime
from typing import Any

from django.core.validators import RegexValidator
from django.utils.translation import gettext_lazy as _

from django_dsched.conf import app_settings
from django_dsched.exceptions import CronError, ValidationError
from django_dsched.runtime.text import has_control_characters
from django_dsched.timetables.cron import check_expression
from django_dsched.timetables.zones import zone

NAME_MAX_LENGTH = 126
# Idempotency keys: as long as a name (a name may be derived from one).
KEY_MAX_LENGTH = 126

# Topics and event types become stream names, routing keys and task names downstream.
identifier_validator = RegexValidator(
    regex=r"^[A-Za-z0-9][A-Za-z0-9._:/-]*\Z",
    message=_("Use letters, digits and . _ : / - only, starting with a letter or digit."),
    code="invalid_identifier",
)


def validate_plain_text(value: str) -> None:
    """Names and reasons: no control characters (line breaks, tabs, escapes, bidi overrides).

    They end up in log lines, terminals and page titles, where such characters could forge
    a line or disguise what is shown.
    """
    if has_control_characters(value):
        raise ValidationError(
            _(
                "Use printable characters only: no line breaks, tabs, escape characters or "
                "direction overrides."
            ),
            code="control_characters",
        )


# What matters to nesting in JSON text: brackets, and the quotes and backslashes of strings.
_STRUCTURE = re.compile(r'[\\"\[\]{}]')


def _text_depth(text: str, limit: int) -> int:
    """Nesting depth of JSON text (brackets outside strings), stopping once past ``limit``.

    One pass over the structural characters, without parsing (and without a regular
    expression over whole strings, which could take quadratic time on hostile text).
    """
    depth = deepest = 0
    in_string = False
    escaped_until = -1
    for match in _STRUCTURE.finditer(text):
        position, char = match.start(), match.group()
        if position < escaped_until:
            continue
        if in_string:
            if char == "\\":
                escaped_until = position + 2
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
            if deepest > limit:
                break
        elif char in "]}":
            depth -= 1
    return deepest


# Event data as text may be indented: up to this many times the compact limit is parsed.
TEXT_SLACK = 4


def check_event_data_text(text: str) -> None:
    """Refuse event data *text* that is too big or too deep before anyone parses it.

    ``json.loads`` recurses once per nesting level: ``[[[[...]]]]`` ten thousand deep raises
    ``RecursionError`` inside the parser. So the text's size is checked first, then its depth
    is counted without parsing (brackets outside string literals).
    """
    max_bytes = app_settings.EVENT_DATA_MAX_BYTES
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > TEXT_SLACK * max_bytes:
        raise ValidationError(
            _("Event data is %(size)d bytes; the limit is %(limit)d bytes."),
            code="too_large",
            params={"size": size, "limit": max_bytes},
        )
    max_depth = app_settings.EVENT_DATA_MAX_DEPTH
    if _text_depth(text, max_depth) > max_depth:
        raise ValidationError(
            _("Event data is nested deeper than %(limit)d levels."),
            code="too_deep",
            params={"limit": max_depth},
        )


def check_event_data_depth(value: Any) -> None:
    """Refuse event data nested deeper than allowed, without recursing into it."""
    max_depth = app_settings.EVENT_DATA_MAX_DEPTH
    if _depth(value, max_depth) > max_depth:
        raise ValidationError(
            _("Event data is nested deeper than %(limit)d levels."),
            code="too_deep",
            params={"limit": max_depth},
        )


def _depth(value: Any, limit: int) -> int:
    """Nesting depth of a JSON value, stopping early once past ``limit``."""
    depth = 0
    level = [value]
    while level:
        containers = [v for v in level if isinstance(v, dict | list)]
        if not containers:
            break
        depth += 1
        if depth > limit:
            break
        level = [
            child
            for container in containers
            for child in (container.values() if isinstance(container, dict) else container)
        ]
    return depth


def storable_text(text: str) -> bool:
    """PostgreSQL text (and jsonb) can hold ``text``: no NUL, no lone surrogate. A lookup by
    a name or key that cannot be stored finds nothing, without asking the database (which
    would refuse the parameter)."""
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def make_storable_text(text: str, max_chars: int | None = None) -> str:
    """``text`` as PostgreSQL text can hold it, at most ``max_chars`` characters: a NUL is
    written ``\\x00`` and a lone surrogate as its escape (``\\udcff``), so what an endpoint
    or an exception said stays readable. Text that can be stored is returned as it is (cut
    to length), at the cost of one scan for NUL and one UTF-8 encoding.

    For text from outside (an endpoint's reply, a transport's or a handler's exception) on
    its way into a column: one value the database refuses must not fail a whole statement.
    """
    if not storable_text(text):
        escaped = text.replace("\x00", "\\x00")
        text = escaped.encode("utf-8", "backslashreplace").decode("utf-8")
    if max_chars is not None and len(text) > max_chars:
        text = text[:max_chars]
    return text


def _has_bad_text(value: Any) -> bool:
    """NUL characters and lone surrogates: PostgreSQL's jsonb refuses both."""
    if isinstance(value, str):
        return not storable_text(value)
    if isinstance(value, dict):
        return any(_has_bad_text(k) or _has_bad_text(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_bad_text(v) for v in value)
    if isinstance(value, float):
        return not math.isfinite(value)
    return False


def validate_event_data(value: Any) -> None:
    """``event_data`` is a JSON object of bounded size and depth.

    It becomes the ``data`` of every event the schedule fires, so it must survive a
    round trip through PostgreSQL's ``jsonb`` and any JSON consumer.
    """
    if not isinstance(value, dict):
        raise ValidationError(
            _('Event data must be a JSON object, such as {"report": "daily"}.'),
            code="not_an_object",
        )
    check_event_data_depth(value)
    if _has_bad_text(value):
        raise ValidationError(
            _(
                "Event data contains a NUL character, an unpaired surrogate, NaN or "
                "Infinity, which JSON in the database cannot hold."
            ),
            code="bad_value",
        )
    try:
        size = len(json.dumps(value, separators=(",", ":"), allow_nan=False).encode())
    except (TypeError, ValueError) as exc:
        raise ValidationError(
            _("Event data is not valid JSON: %(error)s"), code="not_json", params={"error": exc}
        ) from None
    max_bytes = app_settings.EVENT_DATA_MAX_BYTES
    if size > max_bytes:
        raise ValidationError(
            _("Event data is %(size)d bytes; the limit is %(limit)d bytes."),
            code="too_large",
            params={"size": size, "limit": max_bytes},
        )


# The times a schedule may name. Wide enough for any real schedule, and far enough from
# the ends of Python's calendar (years 1 and 9999) that the timetables' arithmetic (jitter,
# a cron's search around a time, a grid's next slot) never leaves it.
SUPPORTED_TIMES = (datetime(1900, 1, 1, tzinfo=UTC), datetime(9000, 1, 1, tzinfo=UTC))


def validate_aware(value: datetime | None) -> None:
    """A timezone-aware time within :data:`SUPPORTED_TIMES`."""
    if value is None:
        return
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValidationError(
            _("Give a timezone-aware time (with an offset or a zone)."), code="naive"
        )
    earliest, latest = SUPPORTED_TIMES
    try:
        supported = earliest <= value < latest
    except OverflowError:  # at the very ends of the calendar, with an offset
        supported = False
    if not supported:
        raise ValidationError(
            _("Give a time from %(earliest)s to before %(latest)s."),
            code="out_of_range",
            params={"earliest": earliest.date().isoformat(), "latest": latest.date().isoformat()},
        )


def validate_time_zone(value: str) -> None:

    try:
        zone(value)
    except CronError:
        raise ValidationError(
            _("%(zone)s is not a known IANA time zone (such as Europe/Brussels)."),
            code="unknown_time_zone",
            params={"zone": value},
        ) from None


def validate_cron_expression(value: str) -> None:

    try:
        check_expression(value)
    except CronError as exc:
        raise ValidationError(
            _("Invalid cron expression: %(error)s."), code="invalid_cron", params={"error": exc}
        ) from None
