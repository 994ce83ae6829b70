"""The demo: embedded PostgreSQL, demo schedules, three schedulers, the admin.

Run through ``scripts/demo.sh`` (which sets up the virtualenv). Shows who leads and what
fires; after ``--failover-after`` seconds it kills the leader with SIGKILL so you can watch
a standby take over, and restarts the killed instance as a new standby.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MANAGE = [sys.executable, str(ROOT / "example_project" / "manage.py")]


def manage(*args: str) -> str:
    return subprocess.run([*MANAGE, *args], check=True, capture_output=True, text=True).stdout


def pump(name: str, process: subprocess.Popen[str]) -> None:
    assert process.stdout is not None
    for line in process.stdout:
        print(f"[{name:^11}] {line.rstrip()}", flush=True)


def spawn(name: str, *args: str) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [*MANAGE, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    threading.Thread(target=pump, args=(name, process), daemon=True).start()
    return process


def current_leader() -> str:
    return manage("demo_report", "--leader").strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=0, help="stop after N s (0: never)")
    parser.add_argument(
        "--failover-after",
        type=float,
        default=20,
        help="SIGKILL the leader after this long (0: never)",
    )
    parser.add_argument("--port", type=int, default=8000)
    options = parser.parse_args()

    print("Setting up the embedded PostgreSQL and the schema...", flush=True)
    manage("migrate", "--verbosity", "0")
    print(manage("seed_demo").strip(), flush=True)

    schedulers = {
        f"scheduler-{i}": spawn(f"scheduler-{i}", "run_scheduler", f"--instance-id=scheduler-{i}")
        for i in (1, 2, 3)
    }
    relay = spawn("relay-1", "run_relay", "--instance-id=relay-1")
    web = spawn("admin", "runserver", f"127.0.0.1:{options.port}", "--noreload")
    print(
        f"\n  Admin: http://127.0.0.1:{options.port}/admin/   login: admin / admin\n"
        f"  REST API: http://127.0.0.1:{options.port}/api/dsched/schedules/ (docs/api.md;"
        " the token is above)\n"
        "  Three schedulers run (one leads); a relay delivers what fires to the demo's\n"
        "  handlers. Ctrl-C stops everything.\n",
        flush=True,
    )
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    started = time.monotonic()
    failed_over = False
    try:
        while not stopping.is_set():
            elapsed = time.monotonic() - started
            if options.seconds and elapsed >= options.seconds:
                break
            if options.failover_after and not failed_over and elapsed >= options.failover_after:
                failed_over = True
                leader = current_leader()
                if leader in schedulers:
                    print(f"\n>>> demo: SIGKILL the leader {leader}\n", flush=True)
                    schedulers[leader].kill()
                    schedulers[leader].wait()
                    schedulers[leader] = spawn(leader, "run_scheduler", f"--instance-id={leader}")
            stopping.wait(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        for process in [*schedulers.values(), relay, web]:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in [*schedulers.values(), relay, web]:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
        print("\n" + manage("demo_report"), flush=True)


if __name__ == "__main__":
    main()
