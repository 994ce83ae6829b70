"""``GET cluster/``: the leader, the instances, the backlog (the admin's cluster page)."""

from __future__ import annotations

from typing import Any

from rest_framework.request import Request
from rest_framework.response import Response

from django_dsched.cluster.status import cluster_status
from django_dsched.rest import permissions
from django_dsched.rest.base import APIMixin
from django_dsched.rest.responses import READ, described, errors
from django_dsched.rest.serializers.cluster import ClusterSerializer


class ClusterView(APIMixin):
    permission_table = permissions.CLUSTER
    action = "retrieve"

    @described(
        operation_id="cluster_retrieve",
        summary="The cluster: leader, instances, backlog",
        description=(
            "Cluster-wide (all hosts), for operators: needs the permission to view "
            "scheduler instances, as the admin's cluster page."
        ),
        responses={200: ClusterSerializer, **errors(*READ)},
    )
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return Response(ClusterSerializer(cluster_status()).data)
