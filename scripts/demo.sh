#!/usr/bin/env bash
# Sets everything up and runs the demo: embedded PostgreSQL, demo schedules, three
# run_scheduler instances (one leads; the leader is killed after 20 s to show failover),
# a relay delivering to the demo's handlers, and the admin at
# http://127.0.0.1:8000/admin/ (login admin / admin).
# Options: --seconds N (stop after N s), --failover-after N, --port P.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/bootstrap.sh
python="$(find_python 11)" || { echo "Python 3.11 or newer is needed." >&2; exit 1; }
bootstrap .venv "$python" "django>=5.2,<6"
trap '.venv/bin/python -c "from example_project.embedded_db import stop; stop()" || true' EXIT
.venv/bin/python example_project/run_demo.py "$@"
