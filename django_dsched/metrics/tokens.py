"""The bearer token of ``DSCHED_METRICS_TOKEN``, checked the same way by the processes'
``/metrics`` and by the Django view."""

from __future__ import annotations

import hmac

from django_dsched.conf import app_settings


def bearer_matches(authorization: str) -> bool:
    """Whether an ``Authorization`` header carries ``DSCHED_METRICS_TOKEN`` (compared in
    constant time); False when no token is set."""
    token = app_settings.METRICS_TOKEN
    scheme, _, credentials = authorization.strip().partition(" ")
    if not token or scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(credentials.strip().encode(), token.encode())
