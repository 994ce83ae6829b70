"""Reading request bodies: JSON only, bounded in size (413) and in nesting (400).

The body is read through the limit, never past it: a request announcing more than
the view's limit (``DSCHED_API_MAX_BODY_BYTES``; ``DSCHED_API_MAX_BULK_BODY_BYTES`` for the
bulk endpoints) is refused before anything is read (see :func:`check_content_length`), and
one that sends more than it announced stops at the limit.

Django's ``DATA_UPLOAD_MAX_MEMORY_SIZE`` bounds ``request.body``, which this parser does not
use: it reads the request's stream itself (REST framework hands it the stream unless
something read ``request.body`` first), so the limits above are the ones that apply.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import IO, Any

from django.http import HttpRequest
from django.utils.translation import gettext as _
from rest_framework.exceptions import ParseError
from rest_framework.parsers import BaseParser
from rest_framework.request import Request

from django_dsched.conf import app_settings
from django_dsched.rest.errors import PayloadTooLarge


def body_limit(view: Any) -> int:
    """The largest body ``view`` reads (its ``max_body_bytes()``, else the API's limit)."""
    limit = getattr(view, "max_body_bytes", None)
    return int(limit()) if limit is not None else app_settings.API_MAX_BODY_BYTES


def check_content_length(request: Request | HttpRequest, limit: int | None = None) -> None:
    """413 when the announced body is over ``limit`` (default: the API's), before anything
    has been read."""
    header = request.headers.get("content-length") or "0"
    try:
        length = int(header)
    except ValueError:
        raise ParseError(_("The Content-Length header is not a number.")) from None
    if length > (app_settings.API_MAX_BODY_BYTES if limit is None else limit):
        raise PayloadTooLarge()


def _refuse_constant(name: str) -> Any:
    raise ValueError(_("%(name)s is not allowed in JSON") % {"name": name})


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(_("the number %(text)s is out of range") % {"text": text[:20]})
    return value


def loads(raw: bytes, encoding: str = "utf-8") -> Any:
    """Strict JSON (no NaN or Infinity) from ``raw``; :class:`ParseError` for anything else."""
    try:
        text = raw.decode(encoding)
    except (UnicodeDecodeError, LookupError):
        raise ParseError(
            _("The body is not valid %(encoding)s text.") % {"encoding": encoding}
        ) from None
    try:
        return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except RecursionError:
        raise ParseError(_("The JSON body is nested too deeply.")) from None
    except ValueError as exc:
        raise ParseError(_("The body is not valid JSON: %(error)s.") % {"error": exc}) from None


class JSONBodyParser(BaseParser):
    media_type = "application/json"

    def parse(
        self,
        stream: IO[Any] | None,
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        limit = body_limit((parser_context or {}).get("view"))
        raw = stream.read(limit + 1) if stream is not None else b""
        if len(raw) > limit:
            raise PayloadTooLarge()
        encoding = (parser_context or {}).get("encoding") or "utf-8"
        return loads(raw, encoding)
