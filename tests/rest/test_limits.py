"""Hostile bodies: too large (413, before reading), too deep, not JSON, text PostgreSQL
cannot store. Each is a 4xx in the documented shape, never a 500, and writes nothing."""

from __future__ import annotations

import io
import json

import pytest

from django_dsched.models import Schedule
from django_dsched.rest.errors import PayloadTooLarge
from django_dsched.rest.parsers import JSONBodyParser
from tests.rest.conftest import INTERVAL

pytestmark = pytest.mark.django_db


def post_raw(root, raw: bytes | str, content_type: str = "application/json", **meta):
    response = root.client.generic(
        "POST",
        "/api/dsched/schedules/",
        raw,
        content_type=content_type,
        headers=root.headers,
        **meta,
    )
    response.body = json.loads(response.content) if response.content else None
    return response


def test_a_body_over_the_limit_is_413_before_it_is_read(root, settings):
    settings.DSCHED_API_MAX_BODY_BYTES = 1000
    body = json.dumps({**INTERVAL, "data": {"pad": "x" * 2000}})
    response = post_raw(root, body)
    assert response.status_code == 413
    assert response.body["code"] == "too_large"
    assert not Schedule.objects.exists()
    # The check is on the announced length: a request announcing too much is refused even
    # if the body is not there to read.
    response = post_raw(root, "{}", CONTENT_LENGTH="5000")
    assert response.status_code == 413


def test_a_body_at_the_limit_is_read(root, settings):
    body = json.dumps(INTERVAL)
    settings.DSCHED_API_MAX_BODY_BYTES = len(body)
    assert post_raw(root, body).status_code == 201


def test_the_parser_never_reads_past_the_limit(settings):
    settings.DSCHED_API_MAX_BODY_BYTES = 10

    class Endless(io.RawIOBase):
        read_sizes: list[int] = []

        def read(self, size: int = -1) -> bytes:
            self.read_sizes.append(size)
            return b" " * (size if size >= 0 else 10**9)

    stream = Endless()
    with pytest.raises(PayloadTooLarge):
        JSONBodyParser().parse(stream, "application/json", {})
    assert stream.read_sizes == [11]


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ('{"name": ' + "[" * 5_000 + "]" * 5_000 + "}", "nested too deeply"),
        ('{"every": NaN}', "not allowed"),
        ('{"every": Infinity}', "not allowed"),
        ('{"priority": 1e999}', "out of range"),
        ('{"name": "x"', "not valid JSON"),
        (b'{"name": "\xff"}', "not valid utf-8"),
        ("", "This field is required"),
        ("[]", "Expected a dictionary"),
        ('"a string"', "Expected a dictionary"),
    ],
)
def test_bodies_that_are_not_usable_json_are_400(root, raw, fragment):
    response = post_raw(root, raw)
    assert response.status_code == 400
    assert fragment in json.dumps(response.body), response.body
    assert not Schedule.objects.exists()


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"name": "a\ud800b"}, "name"),
        ({"name": "a\x00b"}, "name"),
        ({"cron": "\x00", "kind": "CRON"}, "cron"),
        ({"time_zone": "Europe/\ud800"}, "time_zone"),
        ({"data": {"k\x00": 1}}, "data"),
        ({"data": {"k": "\udfff"}}, "data"),
        ({"data": {"deep": json.loads("[" * 40 + "]" * 40)}}, "data"),
        ({"data": {"big": "x" * 70_000}}, "data"),
    ],
)
def test_text_the_database_cannot_hold_is_400_by_field(root, fields, field):
    raw = json.dumps({**INTERVAL, **fields})  # escapes lone surrogates as \\udXXX
    response = post_raw(root, raw)
    assert response.status_code == 400, response.body
    assert field in response.body["errors"]
    response.content.decode("ascii")  # every answer is ASCII JSON, whatever it echoes
    assert not Schedule.objects.exists()


def test_a_body_that_is_not_json_is_415(root):
    response = post_raw(root, "name=x", content_type="application/x-www-form-urlencoded")
    assert response.status_code == 415
    assert response.body["code"] == "unsupported_media_type"


def test_an_echoed_lone_surrogate_still_renders(root):
    response = post_raw(root, json.dumps({**INTERVAL, "kind": "\ud800"}))
    assert response.status_code == 400
    assert "\\ud800" in response.content.decode("ascii")


EXTREME_TIMES = [
    "9999-12-31T23:59:59.999999Z",
    "9999-12-31T23:59:59-12:00",
    "0001-01-01T00:00:00Z",
    "0001-01-01T00:00:00+01:00",
    "0001-01-01T00:00:00-12:00",
]


@pytest.mark.parametrize("when", EXTREME_TIMES)
def test_times_at_the_ends_of_the_calendar_are_400_at_every_endpoint(root, when):
    kinds = [
        {"kind": "INTERVAL", "every": 1, "unit": "SECONDS", "jitter_seconds": 86_400},
        {"kind": "CRON", "cron": "* * * * * 59", "every": None},
        {"kind": "ONCE", "every": None},
    ]
    for index, kind in enumerate(kinds):
        time = "at" if kind["kind"] == "ONCE" else "start"  # a one-shot's time is at
        response = root.post("schedules/", {**INTERVAL, **kind, "name": f"x{index}", time: when})
        assert response.status_code == 400, response.body
        assert time in response.body["errors"]
    sid = root.post(
        "schedules/", {**INTERVAL, "kind": "CRON", "cron": "* * * * *", "every": None}
    ).body["id"]
    ok = "2026-01-01T00:00:00Z"
    for method, path, body in [
        ("GET", f"schedules/{sid}/dry-run/?start={when}&end={ok}".replace("+", "%2B"), None),
        ("GET", f"schedules/{sid}/dry-run/?start={ok}&end={when}".replace("+", "%2B"), None),
        ("POST", f"schedules/{sid}/backfill/", {"start": when, "end": ok}),
        ("POST", f"schedules/{sid}/pause/", {"until": when}),
        ("PATCH", f"schedules/{sid}/", {"end": when}),
    ]:
        response = root.request(method, path, body, **{"If-Match": "*"})
        assert response.status_code == 400, (path, response.body)
    assert Schedule.objects.get().aggregate_version == 1
