"""Two writable primaries in one URL (split brain): seen, and never fired on.

With a multi-host URL (``host=a,b target_session_attrs=read-write``) libpq connects to the
first host that accepts writes. If an old primary comes back writable next to the promoted
one (a failover manager that did not fence it), new sessions may land on either: two
histories, each firing the same slots. The database cannot fence that (each side's lease
rows are its own), so each loop watches for it: :class:`HostWatch` asks every host of
the URL, from a thread of its own every lease period, whether it accepts writes and which
server it is, and reports a split while two *different* servers do. Two hosts that are one
server (two poolers in front of the same primary) are one: a server is its system
identifier, timeline and postmaster start time. While a split lasts a scheduler fires nothing
and a relay claims nothing (docs/high-availability.md).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg

from django_dsched.runtime.logs import get_logger

logger = get_logger("django_dsched")

IDENTITY = """
SELECT NOT pg_is_in_recovery(), (SELECT system_identifier FROM pg_control_system()),
       ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint,
       pg_postmaster_start_time()::text
"""
# Run only where pg_is_in_recovery() is false (pg_walfile_name refuses to on a standby).
STANDBY = "SELECT NOT pg_is_in_recovery()"

# How long a round waits for a host's answer: past it, the host counts as not accepting
# writes this round (a frozen server; one that comes back is seen the next round).
PROBE_SECONDS = 2.0

# The port of a host listed without one (libpq's default).
DEFAULT_PORT = "5432"

# Connection parameters that are not libpq's (psycopg's own, Django's).
NOT_LIBPQ = {"cursor_factory", "context", "prepare_threshold", "autocommit", "row_factory"}


@dataclass(frozen=True, slots=True)
class Server:
    """A writable server: what tells two apart."""

    system_identifier: int
    timeline: int
    started: str


# A probe: (connection parameters, host, port, timeout) -> the writable server there, or None.
Prober = Callable[[dict[str, Any], str, str, float], Server | None]


def listed_hosts(params: dict[str, Any]) -> list[tuple[str, str]]:
    """(host, port) of each host a libpq parameter set lists (one port for all, or one each)."""
    hosts = str(params.get("host") or "").split(",")
    ports = str(params.get("port") or "").split(",")
    if len(ports) == 1:
        ports = ports * len(hosts)
    if len(ports) != len(hosts):
        return []
    return [(h, p) for h, p in zip(hosts, ports, strict=True) if h]


def probe(params: dict[str, Any], host: str, port: str, timeout: float) -> Server | None:
    """The server at (host, port) if it accepts writes now; None if it is a standby or
    unreachable. Blocking: :class:`HostWatch` runs it on a thread of its own and waits at
    most :data:`PROBE_SECONDS` for it."""
    single = {k: v for k, v in params.items() if k not in NOT_LIBPQ}
    single.update(host=host, target_session_attrs="any")
    if port:
        single["port"] = port
    single["connect_timeout"] = max(2, int(timeout))
    single.pop("hostaddr", None)
    try:
        with psycopg.connect(**single, autocommit=True) as connection:
            if not connection.execute(STANDBY).fetchone()[0]:  # type: ignore[index]
                return None
            row = connection.execute(IDENTITY).fetchone()
    except psycopg.Error:
        return None
    return server_of_row(row)


def server_of_row(row: Any) -> Server | None:
    """The :class:`Server` an :data:`IDENTITY` row describes (None: it does not accept
    writes)."""
    if row is None or not row[0]:
        return None
    return Server(int(row[1]), int(row[2]), str(row[3]))


def address(host: str, port: str) -> str:
    """``host:port`` as the watch names a host of the URL (libpq's default port when none is
    listed)."""
    return f"{host}:{port or DEFAULT_PORT}"


class _Probe(threading.Thread):
    """One host's probe, on a daemon thread: waited for at most :data:`PROBE_SECONDS` (a
    frozen server accepts connections and answers nothing, and no socket timeout covers
    that), and left to end on its own past it."""

    def __init__(self, prober: Prober, params: dict[str, Any], host: str, port: str) -> None:
        super().__init__(name=f"dsched-probe:{host}:{port}", daemon=True)
        self.prober, self.params, self.host, self.port = prober, params, host, port
        self.where = address(host, port)
        self.server: Server | None = None

    def run(self) -> None:
        try:
            self.server = self.prober(self.params, self.host, self.port, PROBE_SECONDS)
        except Exception:  # a probe must never take the process down
            logger.exception("could not probe %s:%s", self.host, self.port)


def split_of(writable: dict[str, Server]) -> str | None:
    """A description of the split when two different servers accept writes, else None."""
    servers: dict[Server, list[str]] = {}
    for where, server in writable.items():
        servers.setdefault(server, []).append(where)
    if len(servers) < 2:
        return None
    return "; ".join(
        f"{', '.join(wheres)} (timeline {server.timeline}, up since {server.started})"
        for server, wheres in servers.items()
    )


class HostWatch:
    """Probes every host of ``params`` every ``interval`` seconds on a daemon thread;
    :attr:`split` describes two writable servers while there are (None otherwise)."""

    def __init__(
        self,
        params: dict[str, Any],
        interval: float,
        name: str,
        prober: Prober = probe,
    ) -> None:
        self.params = params
        self.hosts = listed_hosts(params)
        self.interval = interval
        self.name = name
        self.prober = prober
        self.split: str | None = None
        self.rounds = 0
        self._lock = threading.Lock()  # one round at a time: the loop's and the thread's
        # Each host's probe still running past its round (a frozen server): not started again
        # while it runs, so a host that never answers holds one thread, not one a round.
        self._probes: dict[str, _Probe] = {}
        # The writable hosts of the last round.
        self._writable: dict[str, Server] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"dsched-hosts:{name}", daemon=True)

    @property
    def needed(self) -> bool:
        """Whether there is anything to watch (the URL lists more than one host)."""
        return len(self.hosts) > 1

    def start(self) -> HostWatch:
        """Watch from the thread (started once), a round every :attr:`interval` seconds, the
        first one ``interval`` from now (the caller has just looked: :meth:`check`)."""
        if self._thread.ident is None:
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def check(self, own: tuple[str, Server] | None = None) -> str | None:
        """One round: probe every host (at once, waiting at most :data:`PROBE_SECONDS`),
        update :attr:`split`, log a change. ``own``: where the loop's new session is and its
        server, which accepts writes (it was just asked): that host (when the URL lists it
        so) is not probed this round, and never missed because a probe of it failed. The
        watch thread's rounds probe every host: a loop standing by may not notice its own
        session's server go.

        A host that does not answer in time counts as not accepting writes, unless a split
        is on: then it keeps its last answer, so a split ends on an answer (a standby, or no
        server there), never on a slow or hung probe."""
        with self._lock:
            return self._check(own)

    def _check(self, own: tuple[str, Server] | None) -> str | None:
        writable: dict[str, Server] = {}
        probes = []
        unanswered = []
        for host, port in self.hosts:
            where = address(host, port)
            if own is not None and where == own[0]:
                writable[where] = own[1]
                continue
            running = self._probes.get(where)
            if running is not None and running.is_alive():
                unanswered.append(where)
                continue
            probes.append(_Probe(self.prober, self.params, host, port))
            self._probes[where] = probes[-1]
            probes[-1].start()
        deadline = time.monotonic() + PROBE_SECONDS
        for found in probes:
            found.join(max(0.0, deadline - time.monotonic()))
            if found.is_alive():
                unanswered.append(found.where)
            elif found.server is not None:
                writable[found.where] = found.server
        if self.split:
            for where in unanswered:
                if where in self._writable:
                    writable[where] = self._writable[where]
        self._writable = writable
        split = split_of(writable)
        if split and split != self.split:
            logger.error(
                "two hosts of the database URL accept writes (split brain): %s; %s stands by "
                "until only one does (the failover manager must fence the old "
                "primary: docs/high-availability.md)",
                split,
                self.name,
            )
        elif self.split and not split:
            logger.warning("only one host of the database URL accepts writes again: %s", self.name)
        self.split = split
        self.rounds += 1
        return split

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.check()
            except Exception:  # a probe must never take the process down
                logger.exception("could not check the hosts of the database URL")
