"""Creating and cancelling many schedules at once, all or nothing.

Every item is validated as a single create would validate it, before anything is written;
all problems are reported together (:class:`BulkValidationError`: index, field, message).
A call larger than ``DSCHED_BULK_MAX_ITEMS`` is refused before anything is read or
written. The writes run in a savepoint (or a transaction of their own in autocommit), so
a problem the database finds (a name taken meanwhile) undoes the whole call, and a caller's
transaction makes them part of its own.
"""

from __future__ import annotations

import gc
import itertools
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from django.core.exceptions import NON_FIELD_ERRORS
from django.db import connections, transaction
from django.utils.translation import gettext as _

from django_dsched.changes import cancels, permissions, quotas
from django_dsched.changes.bulk_insert import CHUNK, Inserter
from django_dsched.changes.constraints import unique_name_error
from django_dsched.changes.creates import Prepared, Preparer, existing_by_key, lateness
from django_dsched.changes.specs import Spec, spec_field
from django_dsched.conf import app_settings
from django_dsched.counts import ChangeCount
from django_dsched.exceptions import BulkValidationError, ValidationError
from django_dsched.models import Schedule
from django_dsched.models.schedule import resolve_host
from django_dsched.models.validators import storable_text
from django_dsched.runtime import binding
from django_dsched.runtime.logs import get_logger

# Items validated before the first statement goes out (then CHUNK at a time, each sent
# while the next is validated).
FIRST_CHUNK = 1_000

log = get_logger(__name__)


def _bounded(items: Iterable[Any], what: str) -> list[Any]:
    """``items`` as a list, refused (having read one past the limit) when too many."""
    limit = app_settings.BULK_MAX_ITEMS
    taken = list(itertools.islice(items, limit + 1))
    if len(taken) > limit:
        raise ValidationError(
            _("One call takes at most %(limit)d %(what)s (DSCHED_BULK_MAX_ITEMS); split it.")
            % {"limit": limit, "what": what},
            code="too_many_items",
        )
    return taken


def _item_errors(index: int, spec: Any, exc: ValidationError) -> list[tuple[int, str, str]]:
    """``exc``'s errors as ``(index, field, message)``, a model field's named by the spec
    keyword that set it."""
    if not hasattr(exc, "error_dict"):
        return [(index, NON_FIELD_ERRORS, message) for message in exc.messages]
    return [
        (index, spec_field(field, spec), message)
        for field, messages in exc.message_dict.items()
        for message in messages
    ]


def _probe(table: str, column: str, db_type: str) -> str:
    """A select of the host's schedules whose ``column`` is in an array: one index probe
    per element (a LATERAL subquery that ``OFFSET 0`` keeps from being flattened into a
    join), so its cost never depends on the table's statistics. An id is probed alone (the
    host is checked on the row found: with ``host_id`` in the probe, the planner may take
    the name index's ``host_id`` prefix and filter every row of the host, per item); a
    name or a key is probed with its host (both columns of its unique index)."""
    if column == "schedule_id":
        inner, outer = f"s.{column} = r.v_", " WHERE l.host_id = %s"
    else:
        inner, outer = f"s.host_id = %s AND s.{column} = r.v_", ""
    return (
        f"SELECT l.schedule_id, l.schedule_name, l.idempotency_key"
        f" FROM unnest(%b::{db_type}[]) AS r(v_) CROSS JOIN LATERAL ("
        f"SELECT s.schedule_id, s.schedule_name, s.idempotency_key, s.host_id FROM {table} s"
        f" WHERE {inner} OFFSET 0) l{outer}"
    )


def _resolve(
    host: uuid.UUID, ids: list[uuid.UUID], names: list[str], keys: list[str]
) -> list[tuple[uuid.UUID, str, str | None]]:
    """(id, name, key) of the schedules of ``host`` with these ids, names or keys: one
    query with one array parameter each (an ``IN`` list would be 10,000 parameters to
    quote, send and parse), probing the primary key, the name and the key indexes once per
    element (a row named twice comes back twice)."""
    connection = connections[app_settings.DATABASE]
    table = connection.ops.quote_name(Schedule._meta.db_table)
    parts, params = [], []
    for column, db_type, values in (
        ("schedule_id", "uuid", ids),
        ("schedule_name", "text", names),
        ("idempotency_key", "text", keys),
    ):
        if values:
            parts.append(_probe(table, column, db_type))
            params += [values, host]
    if not parts:
        return []
    with binding.cursor(connection) as cursor:  # the arrays in binary
        cursor.execute(" UNION ALL ".join(parts), params)
        rows: list[tuple[uuid.UUID, str, str | None]] = cursor.fetchall()
    return rows


@contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """No cyclic garbage collection while a bulk call runs (reference counting still frees
    what it drops; a decorator too). Building 10,000 instances allocates some 60,000
    tracked objects, and the collections they trigger walked every object of the process:
    about a quarter of ``bulk_create``'s time, a tenth of ``bulk_cancel``'s
    (docs/performance.md). Left as it was if already off."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class _Checker:
    """Validates ``bulk_create``'s items one by one, each as a single create would, and
    refuses a key, a name or an instance's id given twice in the call (an error on the later
    item); ``errors`` collects the errors of every item."""

    def __init__(self, may_fire: bool) -> None:
        self.may_fire = may_fire
        self.preparer = Preparer()
        self.errors: list[tuple[int, str, str]] = []
        self.keys: dict[tuple[uuid.UUID, str], int] = {}
        self.names: dict[tuple[uuid.UUID, str], int] = {}
        self.ids: dict[uuid.UUID, int] = {}

    def check(self, index: int, spec: Spec | Schedule) -> Prepared | None:
        """``spec`` validated, or None with its errors recorded."""
        spec_is_instance = isinstance(spec, Schedule)
        try:
            if isinstance(spec, Schedule):
                item = self.preparer.prepare_instance(spec)
            else:
                item = self.preparer.prepare(spec)
        except ValidationError as exc:
            self.errors += _item_errors(index, spec, exc)
            return None
        schedule = item.schedule
        if not self.may_fire and permissions.fires_a_backlog(schedule, self.preparer.clock.now):
            why = _("Item %(index)d: %(why)s") % {"index": index, "why": permissions.BACKLOG_WHY}
            raise permissions.refusal(permissions.FIRE, why)
        # An id made here (a spec's) is new: only instances may repeat one.
        first = self.ids.setdefault(schedule.schedule_id, index) if spec_is_instance else index
        if first != index:  # two instances built with one id
            message = _("Item %(first)d has the same id.") % {"first": first}
            self.errors.append((index, spec_field("schedule_id", spec), message))
            return None
        key = schedule.idempotency_key
        if key is not None:
            first = self.keys.setdefault((schedule.host_id, key), index)
            if first != index:
                message = _("Item %(first)d has the same key.") % {"first": first}
                self.errors.append((index, spec_field("idempotency_key", spec), message))
                return None
        first = self.names.setdefault((schedule.host_id, schedule.schedule_name), index)
        if first != index:
            message = _("Item %(first)d has the same name.") % {"first": first}
            self.errors.append((index, spec_field("schedule_name", spec), message))
            return None
        return item


@_no_cycle_collection()
def bulk_create(
    specs: Iterable[Spec | Schedule], *, actor: Any = None, may_fire: bool | None = None
) -> list[Schedule]:
    """Create the schedules ``specs`` describe (any mix of ``Once``, ``Interval``,
    ``Cron``), in order; an item whose key exists gives the existing schedule.

    An item may also be an unsaved ``Schedule`` built by the caller (the REST API's items:
    validated as ``creates.create_instance`` validates one); its errors name the model's
    fields (``schedule_name``, ``idempotency_key``, ...).

    All or nothing: any invalid item (or a key, a name or an instance's id given twice in
    the call, or an instance's id already taken) raises :class:`BulkValidationError` and
    nothing is written; so does a call that would take a host past its quota of live
    schedules (:class:`QuotaExceeded`, checked once every item is valid and inserted, under
    the host's quota lock: :mod:`.quotas`). One statement for the first 1,000 items, then
    one per 2,500, each sent while the next is validated (plus one to read the database's
    clock when an item needs it or more than 1,000 items are given, and one to read the
    schedules whose keys exist, and one whether the ids of items the insert skipped are
    taken, when any are not keys found; and, for a host with a quota, one to lock it and
    two to read its quota and count).
    """
    items = _bounded(specs, _("items"))
    if may_fire is None:
        may_fire = permissions.may(actor, permissions.FIRE)
    checker = _Checker(may_fire)
    prepared: list[Prepared] = []
    # Each chunk is sent as soon as it is validated, while no item so far has an error:
    # the server inserts it while the next one is validated. Any error stops the sending
    # (the rest is still validated, to report every error) and the savepoint undoes what
    # was sent: nothing is written, as when validation came first.
    with ExitStack() as stack:
        inserter: Inserter | None = None
        sending = ExitStack()
        # The first chunk is smaller: nothing runs beside its validation.
        first = min(FIRST_CHUNK, CHUNK)
        bounds = [0, *range(first, len(items), CHUNK), len(items)]
        for start, end in itertools.pairwise(bounds):
            chunk = [
                item
                for index in range(start, end)
                if (item := checker.check(index, items[index])) is not None
            ]
            prepared += chunk
            if checker.errors or not chunk:
                continue
            if inserter is None:
                if end < len(items):
                    # Items are validated after this send: the clock is read now, in case
                    # one needs it. A query on this connection once a chunk is in flight
                    # joins the pipeline: it would fail with (and as) a refused chunk.
                    checker.preparer.clock.now()
                stack.enter_context(transaction.atomic(using=app_settings.DATABASE))
                sending = stack.enter_context(ExitStack())  # left before the savepoint
                inserter = sending.enter_context(Inserter(actor=actor))
            inserter.send(chunk)
        if checker.errors:
            raise BulkValidationError(checker.errors)
        if inserter is None:
            return []
        inserter.finish()
        sending.close()
        result = _settle(items, prepared)
        # Counted once inserted, under each host's quota lock, so that what the insert
        # skipped (keys that exist) takes no place; a refusal undoes the call.
        added = Counter(item.schedule.host_id for item in prepared if item.created)
        quotas.check_added(added)
        note_late_items(prepared)
        return result


def note_late_items(prepared: list[Prepared]) -> None:
    """Set ``late`` on each created one-shot (:func:`.creates.lateness`); log one line for
    the call's late ones."""
    late = 0
    for item in prepared:
        if item.created:
            item.schedule.late = found = lateness(item.schedule)  # type: ignore[attr-defined]
            late += found is not None
    if late:
        log.warning("%d one-shot(s) created after their time (see each one's late)", late)


def _settle(items: list[Any], prepared: list[Prepared]) -> list[Schedule]:
    """The schedules of ``prepared`` once inserted: an item the insert skipped is the
    existing schedule with its key, or an error (its id or its name is taken)."""
    skipped = [item for item in prepared if not item.created]
    if not skipped:
        return [item.schedule for item in prepared]
    errors: list[tuple[int, str, str]] = []
    positions = {id(item): n for n, item in enumerate(prepared)}
    found = existing_by_key(skipped)
    result = [item.schedule for item in prepared]
    refused = [
        item
        for item in skipped
        if item.schedule.idempotency_key is None
        or (item.schedule.host_id, item.schedule.idempotency_key) not in found
    ]
    taken_ids = set(
        Schedule.objects.using(app_settings.DATABASE)
        .filter(pk__in=[item.schedule.schedule_id for item in refused])
        .values_list("pk", flat=True)
        if refused
        else ()
    )
    for item in skipped:
        schedule = item.schedule
        existing = (
            found.get((schedule.host_id, schedule.idempotency_key))
            if schedule.idempotency_key is not None
            else None
        )
        if existing is None and schedule.schedule_id in taken_ids:
            index = positions[id(item)]
            field = spec_field("schedule_id", items[index])
            errors.append((index, field, _("A schedule with this id already exists.")))
        elif existing is None:
            index = positions[id(item)]
            field = spec_field("schedule_name", items[index])
            errors += [(index, field, message) for message in unique_name_error(schedule).messages]
        else:
            result[positions[id(item)]] = existing
    if errors:
        raise BulkValidationError(errors)
    return result


def bulk_cancel(
    refs: Iterable[Schedule | uuid.UUID | str] = (),
    *,
    keys: Iterable[str] = (),
    host_id: uuid.UUID | str | None = None,
    actor: Any = None,
) -> ChangeCount:
    """Cancel the schedules ``refs`` (instances, ids or names) and ``keys`` (idempotency
    keys) name, within ``host_id``. Already cancelled or completed ones count as skipped.

    All or nothing: a reference that names no schedule, or one given twice (the same
    schedule named by two references, of one kind or not), raises
    :class:`BulkValidationError` (index into ``refs``, then into ``keys``, counted on from
    the end of ``refs``) and nothing is cancelled. Two statements per call: one resolves
    the references, one locks and cancels the schedules and writes their audit events
    (whole or absent).
    """
    count, _rows = cancel_items(refs, keys=keys, host_id=host_id, actor=actor, with_rows=False)
    return count


@_no_cycle_collection()
def cancel_items(
    refs: Iterable[Schedule | uuid.UUID | str] = (),
    *,
    keys: Iterable[str] = (),
    host_id: uuid.UUID | str | None = None,
    actor: Any = None,
    with_rows: bool = True,
) -> tuple[ChangeCount, list[cancels.Locked]]:
    """:func:`bulk_cancel`, also giving each item's schedule as the cancel locked it (the
    items of ``refs``, then of ``keys``): what the REST API reports per item (``with_rows=False``:
    only the count, for the Python API). A schedule resolved but gone (or moved to another
    host) when the cancel locks it is refused as "No such schedule." and the call undone, so
    the rows given are exactly the items."""
    if isinstance(refs, str) or isinstance(keys, str):  # a string is an iterable of letters
        raise ValidationError(
            _("Give the references and the keys as lists, not as one string."),
            code="not_a_list",
        )
    ref_list = _bounded(refs, _("items"))
    key_list = _bounded(keys, _("items"))
    if len(ref_list) + len(key_list) > app_settings.BULK_MAX_ITEMS:
        _bounded(itertools.chain(ref_list, key_list), _("items"))
    host = resolve_host(host_id)
    ids, names, by_key = _references(ref_list, key_list)
    with transaction.atomic(using=app_settings.DATABASE):
        resolved = _item_schedules(host, ids, names, by_key)
        # Each schedule once, in id order (the order the cancel locks them).
        schedule_ids = sorted({pk for _field, pk in resolved.values()})
        if not with_rows:
            return _cancel_counted(schedule_ids, resolved, host=host, actor=actor), []
        locked = {row.schedule_id: row for row in cancels.cancel_ids(schedule_ids, actor=actor)}
        gone = [
            (index, field, _("No such schedule."))
            for index, (field, pk) in resolved.items()
            if pk not in locked or locked[pk].host_id != host
        ]
        if gone:  # deleted between the two statements: undo the cancel
            raise BulkValidationError(gone)
    result = [locked[pk] for _field, pk in resolved.values()]
    changed = sum(1 for row in result if row.cancelled)
    return ChangeCount(changed=changed, skipped=len(result) - changed), result


def _references(
    ref_list: list[Any], key_list: list[Any]
) -> tuple[dict[uuid.UUID, int], dict[str, int], dict[str, int]]:
    """The items' ids, names and keys, each with its index (the keys' counted on from the
    end of ``ref_list``); :class:`BulkValidationError` for an item that is none of them or
    is given twice."""
    ids: dict[uuid.UUID, int] = {}
    names: dict[str, int] = {}
    errors: list[tuple[int, str, str]] = []
    for index, ref in enumerate(ref_list):
        if isinstance(ref, Schedule):
            ref = ref.pk
        if isinstance(ref, str):
            try:
                ref = uuid.UUID(ref)
            except ValueError:
                if names.setdefault(ref, index) != index:
                    errors.append((index, "ref", _("Given twice in this call.")))
                continue
        if not isinstance(ref, uuid.UUID):
            errors.append((index, "ref", _("Give a schedule, its id or its name.")))
        elif ids.setdefault(ref, index) != index:
            errors.append((index, "ref", _("Given twice in this call.")))
    by_key: dict[str, int] = {}
    for offset, key in enumerate(key_list):
        index = len(ref_list) + offset
        if not isinstance(key, str):
            errors.append((index, "key", _("Give the key as a string.")))
        elif by_key.setdefault(key, index) != index:
            errors.append((index, "key", _("Given twice in this call.")))
    if errors:
        raise BulkValidationError(errors)
    return ids, names, by_key


def _item_schedules(
    host: uuid.UUID, ids: dict[uuid.UUID, int], names: dict[str, int], by_key: dict[str, int]
) -> dict[int, tuple[str, uuid.UUID]]:
    """Each item's field (``ref`` or ``key``) and schedule id, by index in order:
    :class:`BulkValidationError` for an item that names no schedule of ``host``, or one an
    earlier item names."""
    # A name or key PostgreSQL cannot hold (NUL, a lone surrogate) matches nothing.
    clean_names = [name for name in names if storable_text(name)]
    clean_keys = [key for key in by_key if storable_text(key)]
    rows = _resolve(host, list(ids), clean_names, clean_keys)
    by_name = {name: pk for pk, name, _key in rows}
    by_found_key = {key: pk for pk, _name, key in rows if key is not None}
    seen_ids = {pk for pk, _name, _key in rows}
    # Each item's schedule id (None: no such schedule), in the items' order.
    items: dict[int, tuple[str, uuid.UUID | None]] = {}
    for ref, index in ids.items():
        items[index] = ("ref", ref if ref in seen_ids else None)
    for name, index in names.items():
        items[index] = ("ref", by_name.get(name))
    for key, index in by_key.items():
        items[index] = ("key", by_found_key.get(key))
    missing = [(index, field) for index, (field, pk) in items.items() if pk is None]
    if missing:
        raise BulkValidationError(
            [(index, field, _("No such schedule.")) for index, field in sorted(missing)]
        )
    resolved: dict[int, tuple[str, uuid.UUID]] = {}
    for index in sorted(items):  # none is None (missing raised)
        field, pk = items[index]
        if pk is not None:
            resolved[index] = (field, pk)
    first: dict[uuid.UUID, int] = {}
    errors = [
        (index, field, _("Given twice in this call."))
        for index, (field, pk) in resolved.items()
        if first.setdefault(pk, index) != index  # by an id and a name or a key, say
    ]
    if errors:
        raise BulkValidationError(errors)
    return resolved


def _cancel_counted(
    ids: list[uuid.UUID], resolved: dict[int, tuple[str, uuid.UUID]], *, host: uuid.UUID, actor: Any
) -> ChangeCount:
    """Cancel ``ids`` (sorted), counting only; an item whose schedule the cancel did not
    find (deleted since, or moved to another host) is :class:`BulkValidationError`, and
    undoes the call."""
    found, changed = cancels.cancel_ids_counted(ids, host=host, actor=actor)
    if found != len(ids):  # deleted between the two statements: undo the cancel
        present = set(
            Schedule.objects.filter(pk__in=ids, host_id=host).values_list("pk", flat=True)
        )
        raise BulkValidationError(
            [
                (index, field, _("No such schedule."))
                for index, (field, pk) in resolved.items()
                if pk not in present
            ]
        )
    return ChangeCount(changed=changed, skipped=found - changed)


__all__ = ["bulk_cancel", "bulk_create", "cancel_items"]
