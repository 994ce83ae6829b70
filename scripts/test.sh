#!/usr/bin/env bash
# Sets everything up and runs the tests, on real PostgreSQL (embedded unless DATABASE_URL
# is set): lint, then the suite on Python 3.11 + Django 5.2 LTS, then on Python 3.12+ +
# Django 6. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/bootstrap.sh

# The tests start many Python processes (schedulers, relays, manage.py), each
# importing the package: with its byte-code kept (outside the checkout), each start reads it
# instead of compiling the package again (0.7 s a start on two cores).
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX="${PYTHONPYCACHEPREFIX:-${TMPDIR:-/tmp}/django-dsched-pycache}"

python311="$(find_python 11)" || { echo "Python 3.11 or newer is needed." >&2; exit 1; }
BOOTSTRAP_GROUPS=dev bootstrap .venv "$python311" "django>=5.2,<6"
trap '.venv/bin/python -c "from example_project.embedded_db import stop; stop(\"pg-test\")" || true' EXIT

# Redis and RabbitMQ for the transport tests, from Debian packages when missing (the tests
# start their own servers on free localhost ports; they skip loudly without them, but fail
# under CI=true). The SQS transport's server, moto's, comes with the test group (pip).
missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
[ -x /usr/lib/rabbitmq/bin/rabbitmq-server ] || missing+=(rabbitmq-server)
# Chromium and its driver for the admin's browser tests (tests/browser).
{ command -v chromium && command -v chromedriver; } >/dev/null 2>&1 || missing+=(chromium chromium-driver)
# PgBouncer for the transaction-pooling tests (tests/integration/test_pgbouncer.py).
[ -x /usr/sbin/pgbouncer ] || command -v pgbouncer >/dev/null 2>&1 || missing+=(pgbouncer)
# curl and jq for docs/api.md's examples, which the tests run (tests/rest/test_docs.py).
command -v curl >/dev/null 2>&1 || missing+=(curl)
command -v jq >/dev/null 2>&1 || missing+=(jq)
# Prometheus, which scrapes real run_scheduler / run_relay processes in
# tests/integration/test_observability.py.
command -v prometheus >/dev/null 2>&1 || missing+=(prometheus)
# Patroni, etcd and PostgreSQL 15 for the failover tests (tests/integration/test_failover.py:
# a two-node cluster whose primary they kill).
command -v patroni >/dev/null 2>&1 || missing+=(patroni)
command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
[ -x /usr/lib/postgresql/15/bin/postgres ] || missing+=(postgresql-15)
if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "== installing ${missing[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    else
        echo "!! cannot install ${missing[*]} (needs root and apt-get): their tests will skip" >&2
    fi
fi

# The checks .pre-commit-config.yaml runs for contributors, on every tracked Python file.
echo "== ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "== django-upgrade"
git ls-files -z '*.py' | xargs -0 .venv/bin/django-upgrade --target-version 5.2
echo "== mypy (strict)"
.venv/bin/mypy
echo "== layers"
# pyproject.toml's [tool.importlinter]: no module imports one of a layer above it, and no
# import of the package hides in a function unless listed with its reason.
.venv/bin/lint-imports --no-cache
.venv/bin/python scripts/deferred_imports.py
echo "== docs site"
# mkdocs.yml makes every broken link or anchor, link out of the site and page left out of
# the nav a warning, and --strict makes a warning fail the build.
site_dir="$(mktemp -d)"
.venv/bin/mkdocs build --strict --site-dir "$site_dir"
rm -rf "$site_dir"
echo "== migrations match the models"
DJANGO_SETTINGS_MODULE=tests.settings .venv/bin/python -m django migrate --noinput -v 0
DJANGO_SETTINGS_MODULE=tests.settings .venv/bin/python -m django makemigrations --check --dry-run -v 1

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
