"""A peer process that stops itself (a real SIGSTOP) right after a chosen statement.

    python -m tests.faults.peer STOP_AFTER command NAME [ARGS...]
    python -m tests.faults.peer STOP_AFTER call DOTTED.FUNCTION

runs a management command, or calls a function with no arguments, with Django set up from
``tests.settings``; right after the first statement whose SQL matches the regular expression
``STOP_AFTER`` has run (its locks taken, its transaction still open), it prints
``frozen <backend pid>`` and sends itself SIGSTOP, as Ctrl-Z, a VM pause or a debugger would
stop it. Nothing in the package is changed for it: the stop is a Django execute wrapper on
the process's connection. After SIGCONT it goes on (and usually finds its session ended).
"""

from __future__ import annotations

import importlib
import os
import re
import signal
import sys
from typing import Any


def main(argv: list[str]) -> int:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    django.setup()
    from django.core.management import call_command
    from django.db import connection

    stop_after, kind, target, *args = argv
    wanted = re.compile(stop_after, re.IGNORECASE | re.DOTALL)
    stopped = False

    def stop(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        nonlocal stopped
        result = execute(sql, params, many, context)
        if not stopped and wanted.search(sql):
            stopped = True
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                (pid,) = cursor.fetchone()
            print(f"frozen {pid}", flush=True)
            os.kill(os.getpid(), signal.SIGSTOP)
            print("thawed", flush=True)
        return result

    with connection.execute_wrapper(stop):
        if kind == "command":
            call_command(target, *args)
        else:
            module, _, name = target.rpartition(".")
            print(getattr(importlib.import_module(module), name)(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
