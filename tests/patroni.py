"""A real high-availability PostgreSQL for the failover tests: Patroni with etcd.

:func:`start_cluster` starts Debian's ``etcd`` (package etcd-server) and two Patroni nodes
(package patroni) on free localhost ports in a temporary directory, each running its own
PostgreSQL (Debian's 15 when installed, else the one in the ``pgserver`` wheel), the first
bootstrapping the cluster and the second cloning it with ``pg_basebackup`` and streaming
from it. Patroni runs PostgreSQL as the ``postgres`` user (as root; else as the current
user), in ``synchronous_mode`` unless told otherwise, with a short leader TTL so a failover
takes seconds. :meth:`Node.kill` kills a node's whole process groups (Patroni's and the
postmaster's, which Patroni starts in a session of its own) with SIGKILL, as a host that
dies would; :meth:`PatroniCluster.rejoin` starts its Patroni again, which rewinds it and
makes it a standby of the new primary.

When a package is missing the tests skip loudly, except under CI=true, where they fail
(scripts/test.sh installs them).
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from tests.brokers import free_port, port_open, require
from tests.helpers import wait_for

DEBIAN_BIN = Path("/usr/lib/postgresql/15/bin")
# Patroni's leader key lives this long without renewal (etcd lease, seconds): the floor of
# a failover after the primary's host dies. loop_wait and retry_timeout fit inside it.
TTL = 5
LOOP_WAIT = 1
RETRY_TIMEOUT = 2


def postgres_bin_dir() -> Path:
    if (DEBIAN_BIN / "postgres").exists():
        return DEBIAN_BIN
    import pgserver  # the embedded server's wheel ships initdb, pg_ctl, pg_rewind, ...

    return Path(pgserver.__file__).parent / "pginstall" / "bin"


def run_as() -> pwd.struct_passwd | None:
    """The user PostgreSQL runs as (None: the current one; it refuses to run as root)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    raise RuntimeError("no postgres or nobody user to run PostgreSQL as")


def query(port: int, statement: str, dbname: str = "postgres", timeout: int = 2) -> list[Any]:
    """Rows of one statement on the server at ``port`` (autocommit, superuser)."""
    with psycopg.connect(
        host="127.0.0.1",
        port=port,
        user="postgres",
        dbname=dbname,
        connect_timeout=timeout,
        autocommit=True,
    ) as connection:
        cursor = connection.execute(statement)
        return cursor.fetchall() if cursor.description else []


@dataclass
class Node:
    name: str
    pg_port: int
    api_port: int
    workdir: Path
    user: pwd.struct_passwd | None
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def data_dir(self) -> Path:
        return self.workdir / f"{self.name}-data"

    @property
    def config(self) -> Path:
        return self.workdir / f"{self.name}.yml"

    @property
    def log_path(self) -> Path:
        return self.workdir / f"{self.name}.log"

    def start(self, binary: str) -> None:
        self.starts += 1
        log = self.log_path.open("a")
        self.process = subprocess.Popen(
            [binary, str(self.config)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": str(self.workdir)},
            cwd=self.workdir,
            start_new_session=True,
            user=self.user.pw_uid if self.user else None,
            group=self.user.pw_gid if self.user else None,
        )
        log.close()

    def postmaster_pid(self) -> int | None:
        try:
            pid = int((self.data_dir / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        return pid if _alive(pid) else None

    def kill(self) -> None:
        """SIGKILL to Patroni's process group, the postmaster and every process it started
        (each backend is a process group of its own), all at once: the node is gone as with
        a dead host, nothing of it finishing what it was doing."""
        postmaster = self.postmaster_pid()
        doomed = [] if postmaster is None else [postmaster, *_children(postmaster)]
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(os.getpgid(self.process.pid), signal.SIGKILL)
        for pid in doomed:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if self.process is not None:
            self.process.wait(10)
        for pid in doomed:
            wait_for(lambda p=pid: not _alive(p), timeout=10, what=f"process {pid} to die")

    def stop(self) -> None:
        """Stop Patroni and its PostgreSQL (fast), or kill them if they hang."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()
        if self.postmaster_pid() is not None:
            self.kill()

    def api(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.api_port}{path}",
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=3) as answer:
                return json.loads(answer.read() or b"null")
        except urllib.error.HTTPError as exc:
            return json.loads(exc.read() or b"null")

    def writable(self) -> bool:
        """Whether this node's PostgreSQL accepts writes now."""
        try:
            return query(self.pg_port, "SELECT NOT pg_is_in_recovery()", timeout=2)[0][0]
        except psycopg.Error:
            return False

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""

    def walsender_pids(self) -> list[int]:
        return [row[0] for row in query(self.pg_port, "SELECT pid FROM pg_stat_replication")]

    @contextlib.contextmanager
    def standalone(self, port: int) -> Iterator[int]:
        """This (killed) node's data directory served by a plain PostgreSQL on ``port``,
        outside Patroni and outside the schedulers' URL: the old primary's history, read
        after the failover. Stopped (fast, so a later rewind finds it shut down cleanly)."""
        bin_dir = postgres_bin_dir()
        command = [
            str(bin_dir / "postgres"), "-D", str(self.data_dir),
            f"--config-file={self.data_dir / 'postgresql.conf'}",
            "-p", str(port), "-c", "listen_addresses=127.0.0.1",
            "-c", f"unix_socket_directories={self.workdir}",
            "-c", "synchronous_standby_names=", "-c", "archive_mode=off",
            "-c", "hot_standby=on",
        ]  # fmt: skip
        log = (self.workdir / f"{self.name}-standalone.log").open("a")
        process = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            user=self.user.pw_uid if self.user else None,
            group=self.user.pw_gid if self.user else None,
        )
        log.close()
        try:
            wait_for(lambda: _answers(port), timeout=30, what=f"{self.name} standalone")
            yield port
        finally:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)


def _children(parent: int) -> list[int]:
    """The processes whose parent is ``parent`` (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == parent:
            found.append(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its parent to reap it does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _answers(port: int) -> bool:
    try:
        query(port, "SELECT 1", timeout=2)
    except psycopg.Error:
        return False
    return True


@dataclass
class PatroniCluster:
    workdir: Path
    patroni: str
    etcd: subprocess.Popen[bytes]
    nodes: list[Node] = field(default_factory=list)

    def url(self, dbname: str, first: Node | None = None) -> str:
        """The libpq multi-host URL the schedulers use: every node (``first`` first), the
        writable one wins (the first listed, if two are)."""
        nodes = sorted(self.nodes, key=lambda node: node is not first)
        hosts = ",".join(f"127.0.0.1:{node.pg_port}" for node in nodes)
        return f"postgresql://postgres@{hosts}/{dbname}?target_session_attrs=read-write"

    def primary(self) -> Node:
        return wait_for(
            lambda: next((n for n in self.nodes if _running(n) and n.writable()), None),
            timeout=60,
            what="a primary",
        )

    def standby_of(self, primary: Node) -> Node:
        return next(node for node in self.nodes if node is not primary)

    def set_synchronous(self, on: bool) -> None:
        """Patroni's synchronous_mode on or off (dynamic configuration, through the REST
        API), and wait until the standby streams in that mode."""
        primary = self.primary()
        primary.api("PATCH", "/config", {"synchronous_mode": on})
        self.wait_streaming(sync=on)

    def wait_streaming(self, *, sync: bool) -> None:
        wanted = "sync" if sync else "async"

        def streaming() -> bool:
            primary = next((n for n in self.nodes if _running(n) and n.writable()), None)
            if primary is None:
                return False
            rows = query(primary.pg_port, "SELECT state, sync_state FROM pg_stat_replication")
            return rows == [("streaming", wanted)]

        wait_for(streaming, timeout=90, what=f"a standby streaming ({wanted})")

    def rejoin(self) -> None:
        """Start the Patroni of every node that is down: each rewinds and follows."""
        for node in self.nodes:
            if not _running(node):
                node.start(self.patroni)

    def logs(self) -> str:
        return "\n".join(f"--- {node.name}\n{node.log()[-6000:]}" for node in self.nodes)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
            _remove_shared_memory(node.data_dir)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.etcd.pid, signal.SIGTERM)
        try:
            self.etcd.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self.etcd.pid, signal.SIGKILL)
            self.etcd.wait(5)


def _remove_shared_memory(data_dir: Path) -> None:
    """The System V segment a killed postmaster left (its next start would remove it; a data
    directory deleted after a kill never starts again)."""
    try:
        key, shmid = (data_dir / "postmaster.pid").read_text().splitlines()[6].split()[:2]
        segments = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    except (OSError, IndexError, ValueError):
        return
    for segment in segments:
        # key shmid perms size cpid lpid nattch ...: only that segment, and only if unused.
        fields = segment.split()
        if int(fields[0]) == int(key) and fields[1] == shmid and fields[6] == "0":
            subprocess.run(["ipcrm", "-m", shmid], capture_output=True, check=False)


def _running(node: Node) -> bool:
    return node.process is not None and node.process.poll() is None


def _config(
    node: Node, scope: str, etcd_port: int, bin_dir: Path, synchronous: bool, fsync: bool
) -> str:
    return f"""\
scope: {scope}
namespace: /dsched-test/
name: {node.name}
log:
  level: INFO
restapi:
  listen: 127.0.0.1:{node.api_port}
  connect_address: 127.0.0.1:{node.api_port}
etcd3:
  hosts: 127.0.0.1:{etcd_port}
bootstrap:
  dcs:
    ttl: {TTL}
    loop_wait: {LOOP_WAIT}
    retry_timeout: {RETRY_TIMEOUT}
    # The asynchronous test promotes a standby that is behind on purpose.
    maximum_lag_on_failover: 1073741824
    synchronous_mode: {str(synchronous).lower()}
    postgresql:
      use_pg_rewind: true
      use_slots: true
      remove_data_directory_on_rewind_failure: true
      remove_data_directory_on_diverged_timelines: true
      parameters:
        max_connections: 100
        max_wal_senders: 5
        max_replication_slots: 5
        wal_log_hints: 'on'
        wal_keep_size: 256MB
        # A test kills processes, never the machine: what was written survives in the
        # page cache, so fsync buys nothing there and costs the shared disk (the benchmark
        # turns it on).
        fsync: '{"on" if fsync else "off"}'
  initdb:
    - encoding: UTF8
    - username: postgres
    - auth: trust
  pg_hba:
    - local all all trust
    - host all all 127.0.0.1/32 trust
    - host replication all 127.0.0.1/32 trust
postgresql:
  listen: 127.0.0.1:{node.pg_port}
  connect_address: 127.0.0.1:{node.pg_port}
  data_dir: {node.data_dir}
  bin_dir: {bin_dir}
  pgpass: {node.workdir}/{node.name}.pgpass
  authentication:
    superuser:
      username: postgres
    replication:
      username: replicator
    rewind:
      username: postgres
  parameters:
    unix_socket_directories: '{node.workdir}'
    shared_buffers: 64MB
watchdog:
  mode: off
"""


def start_cluster(*, synchronous: bool = True, fsync: bool = False) -> PatroniCluster:
    """etcd and two Patroni nodes, a primary and a standby streaming from it."""
    patroni = require("patroni", "patroni")
    etcd_binary = require("etcd", "etcd-server")
    bin_dir = postgres_bin_dir()
    user = run_as()
    workdir = Path(tempfile.mkdtemp(prefix="dsched-patroni-"))
    if user is not None:
        os.chown(workdir, user.pw_uid, user.pw_gid)
    client, peer = free_port(), free_port()
    etcd_log = (workdir / "etcd.log").open("w")
    etcd = subprocess.Popen(
        [
            etcd_binary, "--name", "dsched", "--data-dir", str(workdir / "etcd"),
            "--listen-client-urls", f"http://127.0.0.1:{client}",
            "--advertise-client-urls", f"http://127.0.0.1:{client}",
            "--listen-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-cluster", f"dsched=http://127.0.0.1:{peer}",
            "--logger", "zap", "--log-level", "warn",
        ],
        stdout=etcd_log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    etcd_log.close()
    cluster = PatroniCluster(workdir, patroni, etcd)
    try:
        wait_for(lambda: etcd.poll() is not None or port_open(client), timeout=30, what="etcd")
        assert etcd.poll() is None, (workdir / "etcd.log").read_text()
        scope = f"dsched-{client}"
        for name in ("node1", "node2"):
            node = Node(name, free_port(), free_port(), workdir, user)
            node.config.write_text(_config(node, scope, client, bin_dir, synchronous, fsync))
            if user is not None:
                os.chown(node.config, user.pw_uid, user.pw_gid)
            cluster.nodes.append(node)
        # The first node bootstraps; the second waits for it, then clones it.
        cluster.nodes[0].start(patroni)
        wait_for(cluster.nodes[0].writable, timeout=60, what="node1 to bootstrap")
        cluster.nodes[1].start(patroni)
        cluster.wait_streaming(sync=synchronous)
    except BaseException:
        logs = cluster.logs()
        cluster.stop()
        shutil.rmtree(workdir, ignore_errors=True)
        raise AssertionError(f"the Patroni cluster did not start:\n{logs}") from None
    return cluster
