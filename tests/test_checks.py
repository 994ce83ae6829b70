from __future__ import annotations

import re
from pathlib import Path

import pytest

from django_dsched.checks.database import check_database
from django_dsched.checks.settings import check_settings, check_unknown_settings


def ids(errors):
    return [e.id for e in errors]


@pytest.mark.django_db
def test_postgresql_passes():
    assert check_database() == []
    assert check_settings() == []


def test_unknown_alias(settings):
    settings.DSCHED_DATABASE = "nope"
    assert ids(check_database()) == ["dsched.E001"]


def test_sqlite_is_refused_clearly(settings):
    settings.DSCHED_DATABASE = "sqlite"
    errors = check_database()
    assert ids(errors) == ["dsched.E002"]
    assert "needs PostgreSQL" in errors[0].msg and "SKIP LOCKED" in errors[0].hint


def test_use_tz_is_required(settings):
    settings.USE_TZ = False
    assert "dsched.E003" in ids(check_settings())


@pytest.mark.parametrize(
    ("name", "value", "check_id"),
    [
        ("DSCHED_LEASE_SECONDS", 0.5, "dsched.E004"),
        ("DSCHED_HEARTBEAT_SECONDS", 0, "dsched.E004"),
        ("DSCHED_POLL_INTERVAL", -1, "dsched.E005"),
        ("DSCHED_POLL_INTERVAL", float("inf"), "dsched.E005"),
        ("DSCHED_STANDBY_INTERVAL", "fast", "dsched.E005"),
        ("DSCHED_BATCH_SIZE", 0, "dsched.E006"),
        ("DSCHED_BATCH_SIZE", 50_000, "dsched.E006"),
        ("DSCHED_OVERLAP_BUFFER_LIMIT", 0, "dsched.E040"),
        ("DSCHED_OVERLAP_BUFFER_LIMIT", 10.5, "dsched.E040"),
        ("DSCHED_OVERLAP_BUFFER_LIMIT", 1_000_000, "dsched.E040"),
        ("DSCHED_OVERLAP_WORKER_TIMEOUT", 0, "dsched.E040"),
        ("DSCHED_OVERLAP_WORKER_TIMEOUT", float("inf"), "dsched.E040"),
        ("DSCHED_OVERLAP_WORKER_TIMEOUT", "1h", "dsched.E040"),
    ],
)
def test_bad_settings(settings, name, value, check_id):
    setattr(settings, name, value)
    assert check_id in ids(check_settings())


@pytest.mark.django_db
def test_check_command_fails_on_errors(settings):
    from django.core.management import call_command
    from django.core.management.base import SystemCheckError

    settings.DSCHED_BATCH_SIZE = 0
    with pytest.raises(SystemCheckError, match=r"dsched\.E006"):
        call_command("check", databases=["default"])


def test_prepared_creates_behind_a_transaction_pooler_are_warned_about(settings):
    from django_dsched.checks.database import check_prepared_creates

    entry = settings.DATABASES["default"]
    assert check_prepared_creates() == []
    settings.DSCHED_PREPARE_CREATES = True
    assert check_prepared_creates() == []  # a direct connection
    entry["DISABLE_SERVER_SIDE_CURSORS"] = True
    try:
        (warning,) = check_prepared_creates()
    finally:
        del entry["DISABLE_SERVER_SIDE_CURSORS"]
    assert warning.id == "dsched.W002"
    assert "DSCHED_PREPARE_CREATES" in warning.msg


def test_a_host_without_tzdata_is_refused(monkeypatch):
    from zoneinfo import ZoneInfoNotFoundError

    from django_dsched.checks import time_zones

    assert time_zones.check_time_zones() == []

    def no_tzdata(key):
        raise ZoneInfoNotFoundError(key)

    monkeypatch.setattr(time_zones, "ZoneInfo", no_tzdata)
    assert ids(time_zones.check_time_zones()) == ["dsched.E014"]


def test_the_rest_api_without_rest_framework_installed_is_an_error(settings):
    from django_dsched.checks.rest import check_rest_apps

    assert check_rest_apps() == []  # tests.urls includes the API; both apps installed
    settings.INSTALLED_APPS = [
        a for a in settings.INSTALLED_APPS if a != "rest_framework.authtoken"
    ]
    assert ids(check_rest_apps()) == ["dsched.W004"]
    assert "403, not 401" in check_rest_apps()[0].msg
    settings.INSTALLED_APPS = [a for a in settings.INSTALLED_APPS if a != "rest_framework"]
    assert ids(check_rest_apps()) == ["dsched.E015", "dsched.W004"]


def test_a_urlconf_without_the_rest_api_needs_neither(settings):
    from django_dsched.checks.rest import check_rest_apps

    settings.ROOT_URLCONF = "django_dsched.metrics.urls"  # patterns, none of them the API
    settings.INSTALLED_APPS = [a for a in settings.INSTALLED_APPS if a != "rest_framework"]
    assert check_rest_apps() == []


def test_a_misspelt_setting_is_warned_about_with_the_name_meant(settings):
    settings.DSCHED_TRANSPORT = {"default": {"BACKEND": "handlers"}}
    settings.DSCHED_SOMETHING_ELSE_ENTIRELY = 1
    warnings = {warning.msg.split()[0]: warning for warning in check_unknown_settings()}
    assert set(warnings) == {"DSCHED_TRANSPORT", "DSCHED_SOMETHING_ELSE_ENTIRELY"}
    assert {warning.id for warning in warnings.values()} == {"dsched.W005"}
    assert warnings["DSCHED_TRANSPORT"].hint == "Did you mean DSCHED_TRANSPORTS?"
    assert "docs/reference.md" in warnings["DSCHED_SOMETHING_ELSE_ENTIRELY"].hint


def test_every_check_id_is_in_the_reference():
    """docs/reference.md's table of system checks lists every id the checks can give, and
    no other."""
    root = Path(__file__).resolve().parent.parent
    code = "\n".join(p.read_text() for p in (root / "django_dsched" / "checks").glob("*.py"))
    given = set(re.findall(r'"(dsched\.[EW]\d{3})"', code))
    table = (root / "docs" / "reference.md").read_text()
    documented = set(re.findall(r"^\| `(dsched\.[EW]\d{3})` \|", table, re.MULTILINE))
    assert given and given == documented
