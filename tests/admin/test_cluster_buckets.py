"""With buckets, the cluster page and `dsched cluster` show each bucket's holder, owner,
standby, epoch and heartbeat age."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connection
from django.urls import reverse

from django_dsched.cluster.bucket_count import agree_bucket_count
from django_dsched.cluster.buckets import ranking
from django_dsched.cluster.lease import BucketLeases
from django_dsched.models import SchedulerInstance
from django_dsched.runtime.clock import database_now

pytestmark = pytest.mark.django_db

CLUSTER = "admin:dsched_schedulerinstance_changelist"
COUNT = 4


@pytest.fixture
def two_owners(settings):
    settings.DSCHED_BUCKETS = COUNT
    now = database_now()
    for name in ("sched-a", "sched-b"):
        SchedulerInstance.objects.create(
            instance_id=name, role="owner", hostname="h", pid=1, started_ts=now,
            last_seen_ts=now - timedelta(seconds=1),
        )  # fmt: skip
    agree_bucket_count(connection, base=1, count=COUNT, lease_seconds=30)
    a = BucketLeases(
        connection, base=1, count=COUNT, replicas=2, instance_id="sched-a", lease_seconds=30,
        fast_failover=True,
    )  # fmt: skip
    # sched-a holds every bucket; those sched-b owns are due to be handed off.
    assert sorted(a.acquire(list(range(COUNT)), [])) == list(range(COUNT))
    return a


def test_the_cluster_page_shows_each_buckets_holder_owner_standby_and_epoch(client, two_owners):
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    response = client.get(reverse(CLUSTER))
    assert response.status_code == 200
    rows = response.context["buckets"]
    assert [r["bucket"] for r in rows] == list(range(COUNT))
    for row in rows:
        top, second = ranking(row["bucket"], ["sched-a", "sched-b"])
        assert (row["holder"], row["owner"], row["standbys"]) == ("sched-a", top, second)
        assert row["epoch"] == two_owners.held[row["bucket"]]
        assert row["moving"] == (top != "sched-a")
    content = response.content.decode()
    assert 'id="dsched-buckets"' in content and f"4 of {COUNT} buckets held" in content


def test_dsched_cluster_prints_the_same(two_owners):
    out = io.StringIO()
    call_command("dsched", "cluster", stdout=out)
    text = out.getvalue()
    assert f"buckets: {COUNT} of {COUNT} held" in text
    table = text.split("heartbeat\n", 1)[1].splitlines()[:COUNT]
    lines = {int(line.split()[0]): line.split() for line in table}
    for bucket in range(COUNT):
        top, second = ranking(bucket, ["sched-a", "sched-b"])
        assert lines[bucket][1:5] == ["sched-a", top, second, str(two_owners.held[bucket])]
