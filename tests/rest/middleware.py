"""A middleware that reads ``request.body`` before the view, as request loggers do."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse


def reads_body(get_response: Callable[[HttpRequest], HttpResponse]) -> Callable[..., HttpResponse]:
    def middleware(request: HttpRequest) -> HttpResponse:
        request.body  # noqa: B018  # read, as a logger would
        return get_response(request)

    return middleware
