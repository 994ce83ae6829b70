"""The schedule list's pages: which rows a page shows, and their computed columns, at a cost
that follows the page, not the table.

Past :data:`~.paging.EXACT_COUNT_LIMIT` rows, a page is read in two steps. First its rows'
ids: in the list's default order (what will fire, soonest first:
:mod:`django_dsched.models.order`) part by part, the active schedules a range of
``dsched_schedule_due_idx`` (no sort of the table); in an order a user picked, a slice of
that order. Then those rows with their computed columns, in one query: their health
(:mod:`django_dsched.health`), dead letters and the database's clock, worked out for the
page's rows alone (an ``OFFSET`` would work them out for every row it passes over). Fewer
rows (a filter that picks a few, found by their indexes) are sorted whole and the page read
with its columns at once. The count is exact up to that limit, the planner's estimate beyond
(the table's size when nothing is filtered).
"""

from __future__ import annotations

from typing import Any

from django.contrib.admin import helpers
from django.contrib.admin.utils import quote
from django.contrib.admin.views.main import ChangeList
from django.core.paginator import Page
from django.db.models import Count, IntegerField, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce, Now
from django.http import HttpRequest
from django.urls import reverse
from django.utils.functional import cached_property
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _

from django_dsched.admin.display import markup
from django_dsched.admin.outbox import RETRYING
from django_dsched.admin.paging import EXACT_COUNT_LIMIT, EstimatedCountPaginator
from django_dsched.enums import DeliveryStatus
from django_dsched.health import judge
from django_dsched.models import OutboxMessage, Schedule
from django_dsched.models.order import in_next_fire_order, read_in_parts


def with_dead_letters(queryset: QuerySet[Schedule]) -> QuerySet[Schedule]:
    """``queryset`` with each schedule's dead letters (``dead_letters``: a partial index
    serves the count), which the list can be sorted by."""
    dead = (
        OutboxMessage.objects.filter(
            aggregate_id=OuterRef("pk"), status=DeliveryStatus.DELIVERY_FAILED
        )
        .order_by()
        .values("aggregate_id")
        .annotate(n=Count("pk"))
        .values("n")
    )
    return queryset.annotate(dead_letters=Coalesce(Subquery(dead, output_field=IntegerField()), 0))


def with_list_columns(queryset: QuerySet[Schedule]) -> QuerySet[Schedule]:
    """The change list's computed columns, in one query (no per-row queries): each
    schedule's health, its dead letters and the database's clock."""
    if "dead_letters" not in queryset.query.annotations:
        queryset = with_dead_letters(queryset)
    return judge.with_health(queryset).annotate(db_now=Now())


def count_retrying(schedules: list[Schedule]) -> None:
    """Set ``retrying`` on each of ``schedules``: its messages whose delivery failed and
    will be tried again. One query for the page (pending messages are the backlog)."""
    ids = [schedule.pk for schedule in schedules]
    counts: dict[Any, int] = {}
    if ids:
        counts = dict(
            OutboxMessage.objects.filter(RETRYING, aggregate_id__in=ids)
            .order_by()
            .values("aggregate_id")
            .annotate(n=Count("pk"))
            .values_list("aggregate_id", "n")
        )
    for schedule in schedules:
        schedule.retrying = counts.get(schedule.pk, 0)  # type: ignore[attr-defined]


# The outbox list's URL on each row of a page (the deliveries column links to it).
OUTBOX_URL = "dsched_outbox_url"


def shown(rows: list[Schedule]) -> list[Schedule]:
    """``rows`` (read with :func:`with_list_columns`) with what else the page shows of them:
    their retrying messages, the outbox list's URL."""
    count_retrying(rows)
    outbox = reverse("admin:dsched_outboxmessage_changelist")
    for row in rows:
        setattr(row, OUTBOX_URL, outbox)
    return rows


def page_rows(queryset: QuerySet[Schedule], ids: list[Any]) -> list[Schedule]:
    """The schedules ``ids`` (of ``queryset``'s database), in that order, with the list's
    computed columns."""
    if not ids:
        return []
    read = with_list_columns(Schedule.objects.using(queryset.db).filter(pk__in=ids).order_by())
    rows = {row.pk: row for row in read}
    return shown([rows[pk] for pk in ids if pk in rows])


class SchedulePaginator(EstimatedCountPaginator):
    """A page of the list's rows with their computed columns. More than
    :data:`~.paging.EXACT_COUNT_LIMIT` rows: the page's ids first (in next-fire order
    :func:`read_in_parts`; else a slice of the list's order), then those rows. Fewer (a
    filter that picks a few: their indexes find them): the page's slice of them, sorted
    whole, read with its columns (worked out after the sort and the limit)."""

    def page(self, number: Any) -> Page:  # type: ignore[type-arg]  # a page of schedules
        queryset: QuerySet[Schedule] = self.object_list  # type: ignore[assignment]
        if getattr(queryset, "model", None) is not Schedule:  # the history page's entries
            return super().page(number)
        number = self.validate_number(number)
        start = (number - 1) * self.per_page
        end = start + self.per_page
        if self.count <= EXACT_COUNT_LIMIT:
            return Page(shown(list(with_list_columns(queryset)[start:end])), number, self)
        if in_next_fire_order(queryset):
            ids = read_in_parts(queryset, start, self.per_page)
        else:
            ids = list(queryset.values_list("pk", flat=True)[start:end])
        return Page(page_rows(queryset, ids), number, self)


# A placeholder for a row's id in a URL reversed once per page (a reverse per row costs more
# than the row's health).
ROW = "00000000-0000-0000-0000-00000000d5ed"


def checkbox(obj: Schedule) -> SafeString:
    """The action checkbox of a row, as Django's (``ModelAdmin.action_checkbox``) writes
    it, without rendering a form widget per row."""
    return markup(
        '<input type="checkbox" name="{}" value="{}" class="action-select" aria-label="{}">',
        helpers.ACTION_CHECKBOX_NAME,
        str(obj.pk),
        markup(_("Select this object for an action - {}"), str(obj)),
    )


class ScheduleChangeList(ChangeList):
    def get_queryset(self, request: HttpRequest, *args: Any, **kwargs: Any) -> QuerySet[Schedule]:
        return with_dead_letters(super().get_queryset(request, *args, **kwargs))

    @cached_property
    def change_url(self) -> str:
        return reverse(
            f"admin:{self.opts.app_label}_{self.opts.model_name}_change",
            args=(ROW,),
            current_app=self.model_admin.admin_site.name,
        )

    def url_for_result(self, result: Any) -> str:
        return self.change_url.replace(ROW, quote(str(result.pk)))

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        found = self.result_list
        if isinstance(found, QuerySet):  # one page, or all: the list's order, whole
            self.result_list = shown(list(with_list_columns(found)))
