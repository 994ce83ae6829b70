"""The settings object: typed attributes with defaults, read at access time, all documented."""

from __future__ import annotations

import re
from pathlib import Path

from django.test import override_settings

from django_dsched.conf import AppSettings, app_settings

REFERENCE = Path(__file__).resolve().parent.parent / "docs" / "reference.md"


def test_every_setting_reads_the_project_setting_at_access_time(settings):
    assert app_settings.BATCH_SIZE == 1000
    settings.DSCHED_BATCH_SIZE = 7
    assert app_settings.BATCH_SIZE == 7


def test_an_unknown_name_is_an_attribute_error():
    try:
        app_settings.NO_SUCH_SETTING  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError:
        pass
    else:  # pragma: no cover
        raise AssertionError("an unknown setting must not read as a default")


def test_the_reference_lists_every_setting_with_its_default():
    rows = dict(
        re.findall(r"^\| `(DSCHED_[A-Z_]+)` \| `(.*?)` \|", REFERENCE.read_text(), re.MULTILINE)
    )
    documented = {s.setting_name: s.shown for s in AppSettings.all()}
    assert rows == documented, "docs/reference.md's settings table is out of step with conf.py"


def test_every_setting_has_a_doc():
    assert all(s.doc.strip() for s in AppSettings.all())


def test_a_setting_read_before_is_read_again_when_it_changes(settings):
    def current() -> int:
        return app_settings.EVENT_DATA_MAX_BYTES

    before = current()  # read (and kept) once
    with override_settings(DSCHED_EVENT_DATA_MAX_BYTES=before + 1):
        assert current() == before + 1
    assert current() == before
    settings.DSCHED_EVENT_DATA_MAX_BYTES = 123
    assert current() == 123
