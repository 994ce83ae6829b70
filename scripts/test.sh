#!/usr/bin/env bash
# Sets everything up and runs the tests, on real PostgreSQL (embedded unless DATABASE_URL
# is set): lint, then the suite on Python 3.11 + Django 5.2 LTS, then on Python 3.12+ +
# Django 6. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/bootstrap.sh

python311="$(find_python 11)" || { echo "Python 3.11 or newer is needed." >&2; exit 1; }
bootstrap .venv "$python311" "django>=5.2,<6" "ruff>=0.6"
trap '.venv/bin/python -c "from example_project.embedded_db import stop; stop(\"pg-test\")" || true' EXIT

echo "== ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .

echo "== Python $(.venv/bin/python -c 'import platform; print(platform.python_version())'), Django $(.venv/bin/python -c 'import django; print(django.get_version())')"
DSCHED_TEST_DB_NAME=test_dsched_dj5 .venv/bin/python -m pytest "$@"

if python312="$(find_python 12)"; then
    bootstrap .venv-django6 "$python312" "django>=6,<7"
    echo "== Python $(.venv-django6/bin/python -c 'import platform; print(platform.python_version())'), Django $(.venv-django6/bin/python -c 'import django; print(django.get_version())')"
    DSCHED_TEST_DB_NAME=test_dsched_dj6 .venv-django6/bin/python -m pytest "$@"
elif [ "${CI:-}" = "true" ]; then
    echo "CI needs Python 3.12+ for the Django 6 cell, and none was found." >&2
    exit 1
else
    echo "!! SKIPPED the Django 6 cell: no Python 3.12+ found." >&2
fi
