"""django-dsched: reliable periodic work for Django clusters."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("django-dsched")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"
