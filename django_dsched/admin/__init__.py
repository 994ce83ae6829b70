"""Admin registrations, one module per area (see docs/admin.md)."""

from __future__ import annotations

from django_dsched.admin import calendars, cluster, events, outbox, quotas, schedules

__all__ = ["calendars", "cluster", "events", "outbox", "quotas", "schedules"]
