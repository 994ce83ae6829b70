"""The one shape of every error the REST API answers, and the handler that builds it.

.. code-block:: json

    {"status": 400, "code": "invalid", "detail": "Some fields are invalid.",
     "errors": {"cron": ["Invalid cron expression: ..."], "non_field_errors": ["..."]}}

``errors`` maps request fields (or ``non_field_errors``) to their messages; it is empty
when the error is about no field. A 412 adds ``current``, the schedule as it is now.
Validation errors raised by the services and the model (the Python API's own checks and
messages) are mapped onto the API's field names. The API's own errors live here, not in
:mod:`django_dsched.exceptions`, because they are REST framework's (an optional extra); they
derive from :class:`~django_dsched.exceptions.DschedError` all the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.core import exceptions as django_exceptions
from django.http import Http404
from django.utils.translation import gettext_lazy as _
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import set_rollback

from django_dsched.exceptions import ConflictError, DschedError, QuotaExceeded

NON_FIELD = "non_field_errors"

# Validation codes of the services that mean "the schedule's state does not allow it".
STATE_CODES = {"not_triggerable", "state_changed", "cancelled"}


class PayloadTooLarge(DschedError, exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = _("The request body is larger than the API accepts.")
    default_code = "too_large"


class TooManyItems(DschedError, exceptions.APIException):
    """A bulk call with more items than ``DSCHED_BULK_MAX_ITEMS``: refused once the caller
    is authenticated and allowed (the body is parsed only then), before any item is read
    or anything is read from the schedules."""

    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = _("The call has more items than the API takes in one call.")
    default_code = "too_many_items"

    def __init__(self, count: int, limit: int) -> None:
        super().__init__(
            _(
                "One call takes at most %(limit)d items (DSCHED_BULK_MAX_ITEMS); this one has "
                "%(count)d. Split it into several calls."
            )
            % {"limit": limit, "count": count}
        )


class PreconditionRequired(DschedError, exceptions.APIException):
    status_code = 428
    default_detail = _(
        'Send the version you read in If-Match (the ETag of the schedule, such as "3").'
    )
    default_code = "precondition_required"


class PreconditionFailed(DschedError, exceptions.APIException):
    """The schedule changed since the version the client sent; ``current`` is it now."""

    status_code = status.HTTP_412_PRECONDITION_FAILED
    default_detail = _(
        "This schedule changed since you read it (it fired or someone edited it): read it "
        "again and apply your change to the current version."
    )
    default_code = "precondition_failed"

    def __init__(self, current: Mapping[str, Any], etag: str, detail: Any = None) -> None:
        super().__init__(detail)
        self.current = current
        self.etag = etag


class StateConflict(DschedError, exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = _("The schedule's state does not allow this.")
    default_code = "state_conflict"


class QuotaConflict(StateConflict):
    """A create past the host's quota of live schedules (``QuotaExceeded``): a 409, since
    the same request succeeds once the host has room (a schedule cancelled or completed, a
    larger quota), not a 400 that asks to correct it."""

    default_detail = _("The host has reached its quota of live schedules.")
    default_code = "quota_exceeded"


def race_lost(*, many: bool = False) -> StateConflict:
    """The 409 for an ``IntegrityError`` of a write: a concurrent request won a race the
    validation could not see (the same name, say)."""
    return StateConflict(
        _("Another change conflicted with this one; read the schedules and retry.")
        if many
        else _("Another change conflicted with this one; read the schedule and retry."),
        code="conflict",
    )


def flatten(detail: Any, prefix: str = "") -> dict[str, list[str]]:
    """DRF's error detail (dicts and lists, nested) as ``{field or a.b.c: [messages]}``."""
    if isinstance(detail, Mapping):
        flat: dict[str, list[str]] = {}
        for key, value in detail.items():
            name = NON_FIELD if key in (api_settings.NON_FIELD_ERRORS_KEY, "__all__") else key
            for field, found in flatten(value, f"{prefix}{name}.").items():
                flat.setdefault(field, []).extend(found)
        return flat
    key = prefix[:-1] if prefix else NON_FIELD
    if isinstance(detail, list):
        messages: list[str] = []
        nested: dict[str, list[str]] = {}
        for index, item in enumerate(detail):
            if isinstance(item, Mapping | list):
                for field, found in flatten(item, f"{prefix}{index}.").items():
                    nested.setdefault(field, []).extend(found)
            else:
                messages.append(str(item))
        return {key: messages, **nested} if messages else nested
    return {key: [str(detail)]}


def django_errors(
    exc: django_exceptions.ValidationError, names: Mapping[str, str]
) -> dict[str, list[str]]:
    """A Django ValidationError's messages under the API's field names (``names``)."""
    if hasattr(exc, "error_dict"):
        errors: dict[str, list[str]] = {}
        for field, messages in exc.message_dict.items():
            name = NON_FIELD if field == "__all__" else names.get(field, field)
            errors.setdefault(name, []).extend(messages)
        return errors
    return {NON_FIELD: list(exc.messages)}


def validation_failed(
    exc: django_exceptions.ValidationError, names: Mapping[str, str] | None = None
) -> exceptions.APIException:
    """The API error for a Django/dsched ValidationError raised by the services."""
    if isinstance(exc, ConflictError):
        return StateConflict(" ".join(exc.messages), code="conflict")
    if isinstance(exc, QuotaExceeded):
        return QuotaConflict(" ".join(exc.messages), code="quota_exceeded")
    codes = {error.code for error in exc.error_list} if hasattr(exc, "error_list") else set()
    if codes & STATE_CODES:
        return StateConflict(" ".join(exc.messages))
    return exceptions.ValidationError(django_errors(exc, names or {}))


def body(
    status_code: int, code: str, detail: str, errors: Mapping[str, list[str]]
) -> dict[str, Any]:
    return {"status": status_code, "code": code, "detail": detail, "errors": dict(errors)}


def exception_handler(exc: Exception, context: Mapping[str, Any]) -> Response | None:
    """DRF's exception handler, answering every error in the one documented shape."""
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, django_exceptions.PermissionDenied):
        exc = exceptions.PermissionDenied(*exc.args)
    elif isinstance(exc, django_exceptions.RequestDataTooBig):
        exc = PayloadTooLarge()
    elif isinstance(exc, django_exceptions.SuspiciousOperation):
        exc = exceptions.ParseError(_("The request could not be read."))
    elif isinstance(exc, django_exceptions.ValidationError):
        exc = validation_failed(exc, getattr(context.get("view"), "field_names", None))
    if not isinstance(exc, exceptions.APIException):
        return None
    headers: dict[str, str] = {}
    if getattr(exc, "auth_header", None):
        headers["WWW-Authenticate"] = exc.auth_header  # type: ignore[attr-defined]
    if getattr(exc, "wait", None):
        headers["Retry-After"] = f"{exc.wait:.0f}"  # type: ignore[attr-defined]
    if isinstance(exc, exceptions.ValidationError):
        data = body(
            exc.status_code, "invalid", str(_("Some fields are invalid.")), flatten(exc.detail)
        )
    else:
        codes = exc.get_codes()
        data = body(
            exc.status_code,
            codes if isinstance(codes, str) else exc.default_code,
            str(exc.detail) if not isinstance(exc.detail, list | dict) else str(exc.default_detail),
            {} if not isinstance(exc.detail, list | dict) else flatten(exc.detail),
        )
    if isinstance(exc, PreconditionFailed):
        data["current"] = exc.current
        headers["ETag"] = exc.etag
    set_rollback()
    return Response(data, status=exc.status_code, headers=headers)
