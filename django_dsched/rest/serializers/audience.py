"""Who reads an answer, and what of the operator's side it shows them.

A tenant reads its own schedules, their history and their deliveries, and nothing about the
operator's machines, code or staff: unless the caller has the cluster's permission
(:func:`django_dsched.changes.permissions.sees_operations`), an answer leaves out the
scheduler instance that fired (``leader_epoch``) and the relay holding a message
(``claimed_by``), says who made a change as ``staff``, ``api``, ``scheduler`` or ``system``
instead of a username, and keeps of an error text (``last_error``, ``set_aside_reason``, a
set-aside event's ``error``) only its class (docs/threat-model.md). Serializers get the
:class:`Audience` in their context (``"audience"``); without one they answer as to a
tenant.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from django.contrib.auth import get_user_model
from django.utils.translation import gettext as _
from rest_framework import serializers

from django_dsched.changes import permissions as rules

T = TypeVar("T")

# Who made a change, as a tenant is told.
SCHEDULER = "scheduler"  # the scheduler (a fire, a schedule set aside, a pause that ended)
STAFF = "staff"  # a user with staff status (the admin's users) or a superuser
API = "api"  # any other user: a tenant's own users of this API
SYSTEM = "system"  # the operator's code and commands, or an account that no longer exists
# An error text's class ("ConnectError: ...", "CheckViolation (23514): ...", "ValueError").
ERROR_CLASS = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?=: | \(|$)")


def withheld(text: str) -> str:
    """``text`` (an error) as a tenant reads it: its class, if it starts with one, and a
    general sentence; empty stays empty."""
    if not text:
        return text
    general = _("the details are shown to the operator only")
    found = ERROR_CLASS.match(text)
    return f"{found.group(1)}: {general}" if found else general[:1].upper() + general[1:]


class Audience:
    """The caller of one request, as the serializers ask it (one per request)."""

    def __init__(self, operations: bool) -> None:
        self.operations = operations  # sees the operator's side (the cluster's permission)
        self.kinds: dict[str, str] = {SCHEDULER: SCHEDULER}  # actor name -> what it is

    @classmethod
    def of_user(cls, user: Any) -> Audience:
        return cls(rules.sees_operations(user))

    @classmethod
    def of(cls, context: Mapping[str, Any]) -> Audience:
        found = context.get("audience")
        return found if isinstance(found, Audience) else cls(False)  # as to a tenant

    def learn(self, names: Iterable[str | None]) -> None:
        """What each of ``names`` (actors) is, read in one query for those not known yet."""
        unknown = {name for name in names if name and name not in self.kinds}
        if self.operations or not unknown:
            return
        users = get_user_model()
        field = users.USERNAME_FIELD
        for user in users._default_manager.filter(**{f"{field}__in": unknown}):
            staff = getattr(user, "is_staff", False) or getattr(user, "is_superuser", False)
            self.kinds[user.get_username()] = STAFF if staff else API
        for name in unknown:
            self.kinds.setdefault(name, SYSTEM)

    def actor(self, name: str | None) -> str | None:
        """Who ``name`` is, as this caller is told: the name itself to an operator."""
        if name is None or self.operations:
            return name
        self.learn([name])
        return self.kinds[name]

    def error(self, text: str) -> str:
        return text if self.operations else withheld(text)


class ForAudience(serializers.Serializer[T]):
    # A serializer whose answer leaves out, for a tenant, the fields in ``hidden_fields``
    # (null) and says the error texts in ``error_fields`` in general words (withheld()).
    # (No docstring: drf-spectacular would show it as its subclasses' description.)

    hidden_fields: tuple[str, ...] = ()
    error_fields: tuple[str, ...] = ()

    def to_representation(self, instance: T) -> dict[str, Any]:
        data: dict[str, Any] = dict(super().to_representation(instance))
        audience = Audience.of(self.context)
        if not audience.operations:
            for name in self.hidden_fields:
                data[name] = None
            for name in self.error_fields:
                data[name] = audience.error(data[name])
        return data
