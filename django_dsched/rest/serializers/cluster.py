"""The cluster as the API shows it: the leader, the instances and the backlog."""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext_lazy as _
from rest_framework import serializers

from django_dsched.rest.serializers.fields import AwareDateTimeField


class LeaderSerializer(serializers.Serializer[Any]):
    instance_id = serializers.CharField()
    epoch = serializers.IntegerField()
    heartbeat_age_seconds = serializers.FloatField(source="heartbeat_seconds")
    acquired = AwareDateTimeField()
    live = serializers.BooleanField(help_text=_("Its lease has not expired."))
    released = serializers.BooleanField(help_text=_("It gave the lease up gracefully."))


class InstanceSerializer(serializers.Serializer[Any]):
    instance_id = serializers.CharField(source="row.instance_id")
    role = serializers.CharField(source="row.role")
    hostname = serializers.CharField(source="row.hostname")
    pid = serializers.IntegerField(source="row.pid")
    epoch = serializers.IntegerField(source="row.epoch", allow_null=True)
    started = AwareDateTimeField(source="row.started_ts")
    last_seen = AwareDateTimeField(source="row.last_seen_ts")
    seen_age_seconds = serializers.FloatField(source="seen_seconds")
    stale = serializers.BooleanField(help_text=_("It missed two reports."))


class BacklogSerializer(serializers.Serializer[Any]):
    due = serializers.IntegerField(help_text=_("Active schedules due now, all hosts."))
    oldest_due = AwareDateTimeField(allow_null=True)
    fires_last_minute = serializers.IntegerField(source="fires_minute")
    fires_last_hour = serializers.IntegerField(source="fires_hour")
    pending = serializers.IntegerField(help_text=_("Messages not delivered yet."))
    oldest_pending = AwareDateTimeField(source="oldest_pending.event_ts", allow_null=True)
    dead_letters = serializers.IntegerField()


class ClusterSerializer(serializers.Serializer[Any]):
    now = AwareDateTimeField(help_text=_("The database's clock."))
    lease_seconds = serializers.FloatField()
    leader = LeaderSerializer(allow_null=True)
    instances = InstanceSerializer(many=True)
    backlog = BacklogSerializer(source="*")
