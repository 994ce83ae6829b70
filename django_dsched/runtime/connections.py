"""How the long-running commands reach the database, and what they say about it.

* :func:`apply_connection_options`: libpq options for losing a server
  (``DSCHED_CONNECTION_OPTIONS``: ``connect_timeout``, TCP keepalives, ``tcp_user_timeout``),
  applied by ``run_scheduler`` and ``run_relay`` to the entry of ``DSCHED_DATABASE``
  beneath what its ``OPTIONS`` already say. Without them a connection to a server that
  vanished without a reset (a host that died, a network cut) waits for the kernel's TCP
  timeouts (minutes, and psycopg's 130 s per connection attempt) before the process
  notices and moves to the new primary.
* :func:`describe_failure`: one line for a failed connection, naming every host of a
  multi-host URL (``host=a,b``) with its own reason, not only the last one tried.
* :func:`server_of`: ``host:port`` a session reached, for the logs.
* :func:`behind_pooler`: whether a session goes through a connection pooler (the loops
  LISTEN only on a direct one; single creates prepare their statement only there).
"""

from __future__ import annotations

import re
from typing import Any

from django.db import connections

from django_dsched.conf import app_settings

# psycopg lists each failed attempt of a multi-host connection on a line of its own:
# "- host: 'a', port: '5432', hostaddr: '…': connection failed: … failed: <reason>".
_ATTEMPT = re.compile(
    r"^- host: '(?P<host>[^']*)', port: '(?P<port>[^']*)'"
    r"(?:, hostaddr: (?:'[^']*'|None))?: (?P<error>.*)$"
)
# The reason at the end of libpq's "connection to server at "a", port 1 failed: <reason>".
_REASON = re.compile(r".*failed: ")


def connection_options() -> dict[str, Any]:
    """``DSCHED_CONNECTION_OPTIONS`` without the options set to None (dropped)."""
    configured = app_settings.CONNECTION_OPTIONS or {}
    return {key: value for key, value in configured.items() if value is not None}


def apply_connection_options(alias: str) -> dict[str, Any]:
    """Add :func:`connection_options` to the ``OPTIONS`` of database ``alias`` where the entry
    does not set them itself; return the options in effect for those keys.

    The entry's dict is shared by every thread's connection of the process (Django builds
    each from it), so the scheduler's and relay's threads (retention, claim heartbeat) get
    them too. Call it once, in a process that runs the loops, before they connect.
    """
    options = connections[alias].settings_dict.setdefault("OPTIONS", {})
    applied = {}
    for key, value in connection_options().items():
        applied[key] = options.setdefault(key, value)
    return applied


def describe_failure(exc: BaseException) -> str:
    """One line for a failed connection: every host tried with its reason
    (``a:5432: Connection refused; b:5432: session is read-only``), else the error's first
    line."""
    text = str(exc).strip()
    attempts = []
    for line in text.splitlines():
        match = _ATTEMPT.match(line)
        if match:
            reason = _REASON.sub("", match["error"]).strip() or match["error"]
            attempts.append(f"{match['host']}:{match['port']}: {reason}")
    if attempts:
        return "; ".join(attempts)
    first = text.splitlines()[0] if text else type(exc).__name__
    return first.removeprefix("connection failed: ")


def server_of(connection: Any) -> str:
    """``host:port`` of the server a Django connection (connected) reached."""
    raw = connection.connection
    if raw is None:
        return "(not connected)"
    info = raw.info
    return f"{info.host}:{info.port}"


def behind_pooler(connection: Any) -> bool:
    """Whether ``connection`` (a Django wrapper, connected) goes through a connection pooler.

    True when its settings say so (``DISABLE_SERVER_SIDE_CURSORS``, which Django needs behind
    a transaction-mode pooler), or when the backend running our statements is not the one
    the login named: a pooler such as PgBouncer answers the login itself, with a cancel key
    of its own, while a plain TCP proxy passes the server's through. The question goes on
    the psycopg session itself: it stays out of Django's query log (and a test's count).
    """
    if connection.settings_dict.get("DISABLE_SERVER_SIDE_CURSORS"):
        return True
    session = connection.connection
    with connection.wrap_database_errors:
        row = session.execute("SELECT pg_backend_pid()").fetchone()
    pooled: bool = row is None or row[0] != session.info.backend_pid
    return pooled
