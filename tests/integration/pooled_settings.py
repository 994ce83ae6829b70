"""Settings for subprocesses that connect through PgBouncer in transaction mode.

What docs/pgbouncer.md asks of a project: server-side cursors off (prepared statements are
already off by default in Django's psycopg 3 backend). DATABASE_URL points at PgBouncer.
"""

from __future__ import annotations

from tests.integration.relay_settings import *  # noqa: F403

DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True  # noqa: F405
