"""Every error class the package defines derives from DschedError."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import django_dsched
from django_dsched.exceptions import DschedError


def package_modules():
    for info in pkgutil.walk_packages(django_dsched.__path__, "django_dsched."):
        if ".migrations" in info.name or info.name.endswith("management.commands"):
            continue
        yield importlib.import_module(info.name)


def test_every_exception_the_package_defines_derives_from_the_base():
    defined = {
        cls
        for module in package_modules()
        for _, cls in inspect.getmembers(module, inspect.isclass)
        if issubclass(cls, BaseException) and cls.__module__.startswith("django_dsched")
    }
    assert len(defined) >= 8
    assert [cls for cls in defined if not issubclass(cls, DschedError)] == []


@pytest.mark.django_db
def test_validation_errors_are_djangos_too():
    from django.core.exceptions import ValidationError

    from django_dsched import api

    try:
        api.create_cron("bad", cron="99 * * * *", topic="t", event_type="e")
    except DschedError as exc:
        assert isinstance(exc, ValidationError)
        assert "cron" in exc.message_dict  # the argument the caller gave
    else:  # pragma: no cover
        raise AssertionError("a bad cron must be refused")
