from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _


class Circuit(models.Model):
    """A destination (a route, for one host) a relay holds back: its circuit is open or
    half-open (:mod:`django_dsched.outbox.breaker`).

    Written only by relays (:mod:`django_dsched.outbox.circuits`): a row when a circuit opens,
    updated as it goes half-open or opens again, deleted when it closes and when its relay
    stops. The admin's cluster page and ``dsched cluster`` read it; a row whose relay died
    stays until a relay of the same id starts, shown as stale once ``until_ts`` has passed
    for longer than a circuit's time.
    """

    relay_id = models.CharField(_("relay"), max_length=255)
    route = models.CharField(
        _("route"), max_length=512, help_text=_("The route's table and key in the settings.")
    )
    # The host (tenant) the route serves here, as text; empty when the message named none.
    host = models.CharField(_("host id"), max_length=36, blank=True, db_default="")
    transport = models.CharField(_("transport"), max_length=64, blank=True, db_default="")
    state = models.CharField(_("state"), max_length=16)
    failures = models.IntegerField(_("failures in a row"), db_default=0)
    last_error = models.TextField(_("last error"), blank=True, db_default="")
    opened_ts = models.DateTimeField(_("opened"))
    until_ts = models.DateTimeField(_("held back until"))

    class Meta:
        db_table = "relay_circuit_t"
        verbose_name = _("open circuit")
        verbose_name_plural = _("open circuits")
        ordering = ["relay_id", "route"]
        constraints = [
            models.UniqueConstraint(
                fields=["relay_id", "route", "host"], name="dsched_circuit_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.route} ({self.state}) at {self.relay_id}"
