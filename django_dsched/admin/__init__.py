"""Admin registrations, one module per area."""

from __future__ import annotations

from . import history, outbox, schedules

__all__ = ["history", "outbox", "schedules"]
