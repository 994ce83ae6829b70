"""``check --database``: what the database's standbys promise across a failover
(a real primary with standbys: tests/integration/test_failover.py)."""

from __future__ import annotations

import pytest

from django_dsched.checks.replication import check_replication, replication_messages


def ids(*row) -> list[str]:
    return [message.id for message in replication_messages(*row)]


def test_no_standby_or_a_standby_itself_says_nothing():
    assert ids(False, 0, 0, 0, "on") == []
    assert ids(True, 0, 0, 0, "on") == []


def test_asynchronous_standbys_only_warn():
    assert ids(False, 2, 0, 0, "on") == ["dsched.W030"]


def test_a_synchronous_standby_is_enough_unless_commits_do_not_wait_for_it():
    assert ids(False, 2, 1, 0, "on") == []
    assert ids(False, 1, 1, 0, "remote_apply") == []
    assert ids(False, 1, 1, 0, "local") == ["dsched.W031"]
    assert ids(False, 1, 1, 0, "off") == ["dsched.W031"]


def test_a_role_that_cannot_see_the_modes_is_told_so():
    assert ids(False, 1, 0, 1, "on") == ["dsched.W032"]


@pytest.mark.django_db
def test_the_test_database_has_no_standby():
    assert check_replication(databases=["default"]) == []
    assert check_replication(databases=None) == []
