"""Admin registrations, one module per area (see docs/admin.md)."""

from __future__ import annotations

from . import cluster, history, outbox, schedules

__all__ = ["cluster", "history", "outbox", "schedules"]
