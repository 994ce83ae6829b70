from __future__ import annotations

import pytest

from django_dsched.checks.delivery import check_delivery_settings


def ids(errors):
    return [e.id for e in errors]


def test_defaults_pass():
    assert check_delivery_settings() == []


@pytest.mark.parametrize(
    ("name", "value", "check_id"),
    [
        ("DSCHED_TRANSPORTS", {}, "dsched.E007"),
        ("DSCHED_TRANSPORTS", {"*": {"BACKEND": "nope"}}, "dsched.E007"),
        ("DSCHED_TRANSPORTS", {"*": {"BACKEND": "webhook", "OPTIONS": {"URL": "http://x/"}}},
         "dsched.E007"),
        ("DSCHED_RELAY_BATCH_SIZE", 0, "dsched.E008"),
        ("DSCHED_RELAY_BATCH_SIZE", "10", "dsched.E008"),
        ("DSCHED_RELAY_MAX_ATTEMPTS", 0, "dsched.E009"),
        ("DSCHED_RELAY_VISIBILITY_TIMEOUT", 0, "dsched.E010"),
        ("DSCHED_RELAY_POLL_INTERVAL", "soon", "dsched.E010"),
        ("DSCHED_RELAY_RETRY_BASE", 1000.0, "dsched.E010"),
        # Centuries: every claim or retry time would fall outside the stored range.
        ("DSCHED_RELAY_VISIBILITY_TIMEOUT", 1e12, "dsched.E010"),
        ("DSCHED_RELAY_RETRY_MAX", 1e12, "dsched.E010"),
        ("DSCHED_RELAY_HEARTBEAT_INTERVAL", 0, "dsched.E010"),
        ("DSCHED_RELAY_HEARTBEAT_INTERVAL", "often", "dsched.E010"),
        ("DSCHED_RELAY_HEARTBEAT_INTERVAL", 30.0, "dsched.E010"),  # half the 60 s timeout
        ("DSCHED_RELAY_MAX_RUN_SECONDS", 0, "dsched.E010"),
        ("DSCHED_RELAY_MAX_RUN_SECONDS", "1h", "dsched.E010"),
        ("DSCHED_RETENTION_DAYS", 0, "dsched.E011"),
        ("DSCHED_RETENTION_BATCH_SIZE", 0, "dsched.E011"),
        ("DSCHED_RETENTION_INTERVAL", -1, "dsched.E011"),
        ("DSCHED_WEBHOOK_ALLOWED_HOSTS", "hooks.example.com", "dsched.E012"),
        ("DSCHED_WEBHOOK_ALLOWED_NETWORKS", "10.0.0.0/8", "dsched.E012"),
        ("DSCHED_WEBHOOK_ALLOWED_NETWORKS", ["10.0.0.1/8"], "dsched.E012"),
        ("DSCHED_WEBHOOK_ALLOWED_NETWORKS", ["intranet"], "dsched.E012"),
        ("DSCHED_WEBHOOK_RESOLVER", "no.such.module.resolve", "dsched.E012"),
        ("DSCHED_WEBHOOK_RESOLVER", 42, "dsched.E012"),
        ("DSCHED_TRANSPORTS_BY_HOST", {"tenant-a": {"*": {"BACKEND": "handlers"}}},
         "dsched.E007"),
        ("DSCHED_TRANSPORTS_BY_HOST",
         {"aaaaaaaa-0000-4000-8000-000000000001": {"*": {"BACKEND": "nope"}}}, "dsched.E007"),
        ("DSCHED_HANDLER_MODULES", "myapp.handlers", "dsched.E013"),
    ],
)  # fmt: skip
def test_bad_delivery_settings(settings, name, value, check_id):
    setattr(settings, name, value)
    assert check_id in ids(check_delivery_settings())


def test_a_misspelt_backend_alias_is_named_with_the_one_meant(settings):
    settings.DSCHED_TRANSPORTS = {"*": {"BACKEND": "handler"}}
    [error] = check_delivery_settings()
    assert error.id == "dsched.E007"
    assert "BACKEND 'handler'" in error.msg and "(did you mean 'handlers'?)" in error.msg


def test_a_heartbeat_under_half_the_visibility_timeout_is_fine(settings):
    settings.DSCHED_RELAY_HEARTBEAT_INTERVAL = 29.0
    assert check_delivery_settings() == []
    settings.DSCHED_RELAY_HEARTBEAT_INTERVAL = None  # a quarter of it
    assert check_delivery_settings() == []
    settings.DSCHED_RELAY_MAX_RUN_SECONDS = 3600
    assert check_delivery_settings() == []


def test_retention_can_be_turned_off(settings):
    settings.DSCHED_RETENTION_DAYS = None
    assert check_delivery_settings() == []


def test_webhook_timeout_must_fit_in_the_visibility_timeout(settings):
    settings.DSCHED_WEBHOOK_ALLOWED_HOSTS = ["hooks.example.com"]
    settings.DSCHED_RELAY_VISIBILITY_TIMEOUT = 10
    settings.DSCHED_TRANSPORTS = {
        "*": {
            "BACKEND": "webhook",
            "OPTIONS": {"URL": "https://hooks.example.com/in", "TIMEOUT": 6},
        }
    }
    (error,) = check_delivery_settings()
    assert error.id == "dsched.E007" and "half of DSCHED_RELAY_VISIBILITY_TIMEOUT" in error.msg


def test_webhook_network_settings_that_pass(settings):
    settings.DSCHED_WEBHOOK_ALLOWED_NETWORKS = ["10.20.0.0/16", "fd00:1234::/32", "127.0.0.1/32"]
    settings.DSCHED_WEBHOOK_RESOLVER = "django_dsched.outbox.transports.addresses.system_resolver"
    settings.DSCHED_TRANSPORTS_BY_HOST = {
        "aaaaaaaa-0000-4000-8000-000000000001": {"billing.*": {"BACKEND": "handlers"}}
    }
    assert check_delivery_settings() == []


@pytest.mark.parametrize(
    ("name", "value", "code"),
    [
        ("DSCHED_RELAY_CONCURRENCY", 0, "dsched.E008"),
        ("DSCHED_RELAY_CONCURRENCY", "8", "dsched.E008"),
        ("DSCHED_RELAY_HOST_CONCURRENCY", 5000, "dsched.E008"),
        ("DSCHED_RELAY_CIRCUIT_FAILURES", -1, "dsched.E009"),
        ("DSCHED_RELAY_CIRCUIT_SECONDS", 0, "dsched.E010"),
    ],
)
def test_the_relay_s_limits_and_circuits_are_checked(settings, name, value, code):
    setattr(settings, name, value)
    assert code in [e.id for e in check_delivery_settings()]


@pytest.mark.parametrize("value", [0, 2000, "4", True])
def test_a_route_s_concurrency_is_checked(settings, value):
    settings.DSCHED_TRANSPORTS = {"*": {"BACKEND": "handlers", "CONCURRENCY": value}}
    errors = [e for e in check_delivery_settings() if e.id == "dsched.E007"]
    assert any("CONCURRENCY must be a whole number from 1 to 1024" in e.msg for e in errors)
