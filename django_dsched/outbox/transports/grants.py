"""Which hosts (tenants) a route or a handler serves: its grant.

Tenancy is a boundary for delivery: a schedule of one host reaches only the routes and the
handlers granted to that host. A grant is written ``"HOSTS": [...]`` on an entry of
``DSCHED_TRANSPORTS`` (and ``hosts=[...]`` on ``@handler``): a list of host ids, or ``"*"``
for every host. Without one, an entry of ``DSCHED_TRANSPORTS`` and a handler serve the
operator's host alone (``DSCHED_DEFAULT_HOST_ID``, where every schedule created without a
host goes), so a project with one host needs none; a host's own table in
``DSCHED_TRANSPORTS_BY_HOST`` serves that host.

A malformed grant serves no host (system check ``dsched.E050`` says why): delivery fails
closed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django_dsched.conf import app_settings
from django_dsched.outbox.transports.base import host_key

# Every host, in a grant.
ANY = "*"


def operator_host() -> str:
    """The operator's host: ``DSCHED_DEFAULT_HOST_ID``, as grants key hosts."""
    return host_key(app_settings.DEFAULT_HOST_ID)


@dataclass(frozen=True, slots=True)
class Hosts:
    """The hosts a grant serves: every host (``every``), or those ``listed``."""

    every: bool
    listed: frozenset[str]

    def serves(self, host: str) -> bool:
        return self.every or host in self.listed

    def shared(self, operator: str) -> bool:
        """Whether it serves a host besides ``operator``'s."""
        return self.every or bool(self.listed - {operator})


NOBODY = Hosts(False, frozenset())


def hosts_problem(value: Any) -> str | None:
    """Why ``value`` is not a grant (``"*"`` or a non-empty list of host ids); None if it is."""
    if value == ANY:
        return None
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        return f'HOSTS must be "*" or a list of host ids, not {value!r}'
    items = list(value)
    if not items:
        return 'HOSTS must not be empty (it would serve no host): list host ids, or "*"'
    bad = []
    for item in items:
        try:
            host_key(item)
        except (TypeError, ValueError, AttributeError):
            bad.append(item)
    if bad:
        return f"HOSTS: {', '.join(map(repr, bad))} is not a host id (a UUID)"
    return None


def parse_hosts(value: Any, default: str) -> Hosts:
    """The grant ``value`` (None: ``default``'s host alone); a malformed one serves nobody."""
    if value is None:
        return Hosts(False, frozenset({default}))
    if hosts_problem(value) is not None:
        return NOBODY
    if value == ANY:
        return Hosts(True, frozenset())
    return Hosts(False, frozenset(host_key(item) for item in value))
