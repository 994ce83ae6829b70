from __future__ import annotations

import json
from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from ..models import Event, OutboxMessage


class ReadOnlyAdmin(admin.ModelAdmin):
    """History is written by the scheduler only."""

    show_full_result_count = False

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description=_("payload"))
    def payload_pretty(self, obj: Event | OutboxMessage) -> str:
        return format_html("<pre>{}</pre>", json.dumps(obj.payload, indent=2, sort_keys=True))
