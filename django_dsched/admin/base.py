"""What the dsched admin pages share: read-only history admins and the shared assets."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.contrib.admin.views.main import ERROR_FLAG
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect

from django_dsched.admin.paging import EstimatedCountPaginator

# The stylesheet (badges, panels, narrow screens; admin colour variables, so dark mode
# works) and the script that shows times in the viewer's time zone.
ASSETS = {"css": {"all": ["dsched/admin.css"]}, "js": ["dsched/localtime.js"]}


def pretty_json(value: Any) -> str:
    """JSON indented for reading; HTML-escaped by the caller (``format_html``)."""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


# ModelAdmin is generic for the type checker only (django-stubs); at run time it is a plain
# class, so the subscripted form must not be evaluated.
if TYPE_CHECKING:
    AnyModelAdmin = admin.ModelAdmin[Any]
else:
    AnyModelAdmin = admin.ModelAdmin


def storable(value: str) -> bool:
    """Whether PostgreSQL text can hold ``value`` (no NUL, no lone surrogate)."""
    return "\x00" not in value and not any("\ud800" <= c <= "\udfff" for c in value)


def unstorable_query(request: HttpRequest) -> HttpResponse | None:
    """The admin's "invalid filter" answer for a change list whose filters or search hold
    text PostgreSQL cannot (a NUL would be a database error, a 500), else None."""
    if all(storable(v) for values in request.GET.lists() for v in values[1]):
        return None
    return HttpResponseRedirect(f"{request.path}?{ERROR_FLAG}=1")


class ShownTimes(AnyModelAdmin):
    """Gives each time shown by :func:`.display.time_display` on a page the help text of
    its model field, as Django gives a field's (a display method has none of its own)."""

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any
    ) -> Any:
        texts: dict[str, Any] = {}
        for name in self.get_readonly_fields(request, obj):
            text = (
                getattr(getattr(self, name, None), "help_text", "") if isinstance(name, str) else ""
            )
            if text:
                texts[str(name)] = text
        if texts:
            meta = getattr(kwargs.get("form", self.form), "Meta", None)
            kwargs["help_texts"] = {**(getattr(meta, "help_texts", None) or {}), **texts}
        return super().get_form(request, obj, change=change, **kwargs)


class ReadOnlyAdmin(ShownTimes):
    """History is written by the scheduler only, and grows: no query may read all of it."""

    show_full_result_count = False
    paginator = EstimatedCountPaginator
    # Facet counts are a COUNT per filter value over the whole table.
    show_facets = admin.ShowFacets.NEVER

    class Media:
        css = ASSETS["css"]
        js = ASSETS["js"]

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        refused = unstorable_query(request)
        if refused is not None:
            return refused
        return super().changelist_view(request, extra_context)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
