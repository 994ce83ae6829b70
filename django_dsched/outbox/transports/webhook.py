"""HTTP webhooks: POST the CloudEvent, structured mode (``pip install django-dsched[webhooks]``).

Options: ``URL`` (required; ``{topic}`` and ``{type}`` are filled in), ``TIMEOUT`` (seconds
for the whole exchange including redirects, default 10), ``HEADERS`` (extra request headers),
``SECRET`` (if set, ``X-Dsched-Signature: sha256=<hex HMAC-SHA256 of the body>``),
``MAX_REDIRECTS`` (default 3), ``MAX_RESPONSE_BYTES`` (default 65536).

Bounds: the URL's host and every redirect target must be in ``DSCHED_WEBHOOK_ALLOWED_HOSTS``;
only 307/308 redirects are followed (they keep the method and body); proxies from the
environment are ignored; at most ``MAX_RESPONSE_BYTES`` of a response are read.

Outcome: 2xx delivered; 408, 425, 429, 5xx, timeouts and connection errors are retried;
other statuses and refused redirects dead-letter the message at once.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urljoin, urlsplit

from django_dsched import __version__
from django_dsched.conf import app_settings
from django_dsched.exceptions import DeliveryError, PermanentDeliveryError
from django_dsched.outbox.claims import Message
from django_dsched.outbox.transports.base import Transport, encode, render

CONTENT_TYPE = "application/cloudevents+json; charset=utf-8"
RETRYABLE_STATUSES = frozenset({408, 425, 429})
FOLLOWED_REDIRECTS = frozenset({307, 308})


def _split_entry(entry: str) -> tuple[str, int | None]:
    """``host``, ``host:port``, ``.domain``, ``[v6]:port`` → (host, port or None)."""
    entry = entry.strip().lower()
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif entry.count(":") == 1:
        host, port = entry.split(":")
    else:
        host, port = entry, ""
    return host.rstrip("."), (int(port) if port.isdigit() else None)


def host_allowed(url: str, allowed: Sequence[str]) -> bool:
    """Whether ``url``'s host and port match an entry of ``allowed``.

    An entry is ``host`` (any port), ``host:port``, or ``.domain`` (the domain and its
    subdomains, any port; ``.domain:port`` for one port).
    """
    parts = urlsplit(url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return False
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return False
    host = parts.hostname.lower().rstrip(".")
    for entry in allowed:
        entry_host, entry_port = _split_entry(entry)
        if entry_port is not None and entry_port != port:
            continue
        if entry_host.startswith("."):
            if host == entry_host[1:] or host.endswith(entry_host):
                return True
        elif entry_host and host == entry_host:
            return True
    return False


class WebhookTransport(Transport):
    alias = "webhook"
    options = frozenset(
        {"URL", "TIMEOUT", "HEADERS", "SECRET", "MAX_REDIRECTS", "MAX_RESPONSE_BYTES"}
    )

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        import httpx

        self.httpx = httpx
        self.url: str = options["URL"]
        self.timeout = float(options.get("TIMEOUT", 10.0))
        self.headers = dict(options.get("HEADERS", {}))
        secret = options.get("SECRET")
        self.secret = secret.encode() if isinstance(secret, str) else secret
        self.max_redirects = int(options.get("MAX_REDIRECTS", 3))
        self.max_response_bytes = int(options.get("MAX_RESPONSE_BYTES", 64 * 1024))
        self.client = httpx.Client(
            timeout=httpx.Timeout(self.timeout), follow_redirects=False, trust_env=False
        )

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> list[str]:
        problems = super().check_options(options)
        try:
            import httpx  # noqa: F401
        except ImportError:
            problems.append("needs httpx: pip install 'django-dsched[webhooks]'")
        url = options.get("URL")
        if not isinstance(url, str) or urlsplit(url).scheme not in ("http", "https"):
            problems.append("URL must be an http:// or https:// URL")
        else:
            probe = url.replace("{topic}", "t").replace("{type}", "t")
            if not host_allowed(probe, app_settings.WEBHOOK_ALLOWED_HOSTS):
                problems.append(
                    f"the host of {url} is not in DSCHED_WEBHOOK_ALLOWED_HOSTS "
                    f"({list(app_settings.WEBHOOK_ALLOWED_HOSTS)})"
                )
        timeout = options.get("TIMEOUT", 10.0)
        visibility = app_settings.RELAY_VISIBILITY_TIMEOUT
        if not (isinstance(timeout, int | float) and timeout > 0):
            problems.append("TIMEOUT must be a positive number of seconds")
        elif isinstance(visibility, int | float) and timeout * 2 >= visibility:
            problems.append(
                f"TIMEOUT ({timeout}s) must be less than half of "
                f"DSCHED_RELAY_VISIBILITY_TIMEOUT ({visibility}s), or a slow endpoint would "
                "let another relay claim the message while it is being sent"
            )
        headers = options.get("HEADERS", {})
        if not isinstance(headers, Mapping):
            problems.append("HEADERS must be a mapping of header names to values")
        return problems

    def _headers(self, message: Message, body: bytes) -> dict[str, str]:
        headers = {
            **self.headers,
            "Content-Type": CONTENT_TYPE,
            "Idempotency-Key": str(message.id),
            "User-Agent": f"django-dsched/{__version__}",
        }
        if self.secret:
            digest = hmac.new(self.secret, body, hashlib.sha256).hexdigest()
            headers["X-Dsched-Signature"] = f"sha256={digest}"
        return headers

    def send(self, message: Message) -> None:
        body = encode(message)
        headers = self._headers(message, body)
        deadline = time.monotonic() + self.timeout
        url = render(self.url, message)
        allowed = app_settings.WEBHOOK_ALLOWED_HOSTS
        for _hop in range(self.max_redirects + 1):
            if not host_allowed(url, allowed):
                raise PermanentDeliveryError(f"{url} is not in DSCHED_WEBHOOK_ALLOWED_HOSTS")
            status, location, excerpt = self._post(url, body, headers, deadline)
            if 200 <= status < 300:
                return
            if status in FOLLOWED_REDIRECTS and location:
                url = urljoin(url, location)
                continue
            if 300 <= status < 400:
                raise PermanentDeliveryError(f"HTTP {status} redirect not followed")
            error = f"HTTP {status} from {url}" + (f": {excerpt}" if excerpt else "")
            if status >= 500 or status in RETRYABLE_STATUSES:
                raise DeliveryError(error)
            raise PermanentDeliveryError(error)
        raise PermanentDeliveryError(f"more than {self.max_redirects} redirects")

    def _post(
        self, url: str, body: bytes, headers: dict[str, str], deadline: float
    ) -> tuple[int, str | None, str]:
        """One POST within the deadline; returns (status, Location, start of the body)."""
        httpx = self.httpx
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise DeliveryError(f"timed out after {self.timeout}s")
        try:
            with self.client.stream(
                "POST", url, content=body, headers=headers, timeout=httpx.Timeout(remaining)
            ) as response:
                received = bytearray()
                for chunk in response.iter_raw():
                    received += chunk
                    if len(received) >= self.max_response_bytes or time.monotonic() > deadline:
                        break
                excerpt = bytes(received[: self.max_response_bytes])
                excerpt_text = excerpt[:500].decode("utf-8", "replace").strip()
                return response.status_code, response.headers.get("location"), excerpt_text
        except httpx.TimeoutException:
            raise DeliveryError(f"timed out after {self.timeout}s") from None
        except httpx.HTTPError as exc:
            raise DeliveryError(f"{type(exc).__name__}: {exc}") from None

    def close(self) -> None:
        self.client.close()
