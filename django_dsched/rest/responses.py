"""The documented error answers of each endpoint, for the OpenAPI schema."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema

from django_dsched.rest.serializers.errors import ErrorSerializer, PreconditionFailedSerializer

WHY = {
    400: "Invalid input, or a query parameter the endpoint does not take: messages by field.",
    401: "Not authenticated.",
    403: "Authenticated, without the permission this needs (or a missing CSRF token).",
    404: "No such thing among the hosts this request may reach.",
    409: "Its state does not allow this (for example: resume a schedule that is not paused).",
    412: "If-Match names a version that is not the current one; `current` is it now.",
    413: "The body is larger than DSCHED_API_MAX_BODY_BYTES.",
    415: "The body is not JSON (Content-Type: application/json).",
    428: 'If-Match is missing: send the ETag you read, such as If-Match: "3".',
}


def errors(*codes: int, why: Mapping[int, str] | None = None) -> dict[int, OpenApiResponse]:
    """The error answers ``codes``, described by :data:`WHY` (or ``why``, which wins)."""
    reasons = {**WHY, **(why or {})}
    return {
        code: OpenApiResponse(
            PreconditionFailedSerializer if code == 412 else ErrorSerializer,
            description=reasons[code],
        )
        for code in sorted(set(codes))
    }


# A create's 409s.
CREATE_409 = (
    "The host has reached its quota of live schedules (`quota_exceeded`: nothing is created; "
    "the same request succeeds once the host has room), or a concurrent change won a race "
    "the validation could not see (`conflict`: read and retry)."
)

# Every endpoint refuses query parameters it does not know: each may answer 400.
READ = (400, 401, 403)
READ_ONE = (400, 401, 403, 404)
WRITE = (400, 401, 403, 413, 415)
WRITE_ONE = (*WRITE, 404)

ETAG = OpenApiParameter(
    "ETag",
    str,
    OpenApiParameter.HEADER,
    response=[200, 201],
    description='The schedule\'s version as a strong ETag, such as "3".',
)
ETAG_412 = OpenApiParameter(
    "ETag",
    str,
    OpenApiParameter.HEADER,
    response=[412],
    description="The current version.",
)


def if_match(required: bool) -> OpenApiParameter:
    return OpenApiParameter(
        "If-Match",
        str,
        OpenApiParameter.HEADER,
        required=required,
        description=(
            'The version read (its ETag, such as "3"): the write applies only if the '
            "schedule has not fired or changed since." + ("" if required else " Optional here.")
        ),
    )


F = TypeVar("F", bound=Callable[..., Any])


def described(**kwargs: Any) -> Callable[[F], F]:
    """drf-spectacular's ``extend_schema``, based on its AutoSchema whatever the project's
    ``DEFAULT_SCHEMA_CLASS`` (so the project need not configure drf-spectacular)."""

    def decorate(function: F) -> F:
        own: dict[str, Any] = function.__dict__.setdefault("kwargs", {})
        own.setdefault("schema", AutoSchema)
        decorated: F = extend_schema(**kwargs)(function)
        return decorated

    return decorate
