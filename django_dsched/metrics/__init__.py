"""Prometheus metrics (the optional extra ``django-dsched[metrics]``; docs/observability.md).

Nothing here is imported by the fire path unless metrics are on: a loop gets a metrics
object only when its command serves ``--metrics-port``, and without prometheus_client
installed the rest of the package works as before (``require()`` says what to install).
"""

from __future__ import annotations

from django_dsched.exceptions import ConfigurationError

INSTALL_HINT = "pip install 'django-dsched[metrics]' (prometheus_client)"


def available() -> bool:
    """Whether prometheus_client can be imported."""
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        return False
    return True


def require() -> None:
    """Raise :class:`ConfigurationError` unless prometheus_client is installed."""
    if not available():
        raise ConfigurationError(f"Metrics need prometheus_client: {INSTALL_HINT}.")
