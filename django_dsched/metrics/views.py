"""A Django view serving the database-wide gauges in Prometheus's text format.

For deployments that scrape the web tier: include ``django_dsched.metrics.urls`` and scrape
it with ``Authorization: Bearer <DSCHED_METRICS_TOKEN>``, or as a logged-in user who may view
the cluster (``dsched.view_schedulerinstance``, as for the admin's cluster page and the REST
API's ``cluster/``): the gauges count every host's schedules and messages. Every web worker
answers the same (the gauges come from the database), so no multi-process setup is needed.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from django_dsched.changes import permissions as rules
from django_dsched.metrics import INSTALL_HINT, available
from django_dsched.metrics.database import DatabaseCollector
from django_dsched.metrics.tokens import bearer_matches

_collector = None


def _allowed(request: HttpRequest) -> bool:
    if bearer_matches(request.headers.get("Authorization", "")):
        return True
    user = getattr(request, "user", None)  # None without the authentication middleware
    return rules.allows(user, rules.VIEW_CLUSTER)


@never_cache
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """The gauges of :mod:`django_dsched.metrics.database`, in the format the scraper asks
    for (Prometheus text or OpenMetrics)."""
    global _collector
    if not _allowed(request):
        if getattr(request, "user", None) is not None and request.user.is_authenticated:
            needed = rules.VIEW_CLUSTER.permission
            return HttpResponse(
                f"metrics count every host: they need the {needed} permission\n", status=403
            )
        response = HttpResponse("metrics need a bearer token or a login\n", status=401)
        response["WWW-Authenticate"] = 'Bearer realm="dsched-metrics"'
        return response
    if not available():
        return HttpResponse(f"metrics need prometheus_client: {INSTALL_HINT}\n", status=501)
    from prometheus_client import CollectorRegistry
    from prometheus_client.exposition import choose_encoder

    if _collector is None:
        _collector = DatabaseCollector()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_collector)
    # The format the scraper asks for (OpenMetrics or the text format), as prometheus_client's
    # own server answers.
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    return HttpResponse(encoder(registry), content_type=content_type)
