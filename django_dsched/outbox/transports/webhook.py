"""HTTP webhooks: POST the CloudEvent, structured mode (``pip install django-dsched[webhooks]``).

Options: ``URL`` (required; ``{topic}``, ``{type}`` (or ``{event_type}``) and ``{host}`` are
filled in, percent-encoded, in the path and query only; on a route that serves hosts besides
the operator's, ``{host}`` must come before ``{topic}`` and ``{type}``, ``dsched.E051``),
``TIMEOUT`` (seconds: a deadline for the whole
exchange, resolution, connection, TLS, request, response and redirects; default 10),
``HEADERS`` (extra request headers), ``SECRET`` (if set,
``X-Dsched-Signature: sha256=<hex HMAC-SHA256 of the body>``), ``MAX_REDIRECTS`` (default
3), ``MAX_RESPONSE_BYTES`` (default 65536).

Bounds (docs/delivery.md, "Security"): the URL's host must be in
``DSCHED_WEBHOOK_ALLOWED_HOSTS``; the addresses it resolves to are checked when connecting
(loopback, private, link-local, metadata and other special addresses are refused unless
``DSCHED_WEBHOOK_ALLOWED_NETWORKS`` opens them); only 307/308 redirects to the same origin
(scheme, host and port) are followed, so headers and the signature never reach another
origin; proxies from the environment are ignored; at most ``MAX_RESPONSE_BYTES`` of a
response are read.

Outcome: 2xx delivered; 408, 425, 429, 5xx, timeouts and connection errors are retried (after
at least ``Retry-After``, within the relay's backoff bounds); other statuses (410 Gone among
them), refused redirects and refused addresses dead-letter the message at once.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import quote, unquote, urljoin, urlsplit

from django.utils.module_loading import import_string

from django_dsched import __version__
from django_dsched.conf import app_settings
from django_dsched.exceptions import ConfigurationError, DeliveryError, PermanentDeliveryError
from django_dsched.outbox.messages import Message
from django_dsched.outbox.transports.addresses import (
    IPNetwork,
    Resolver,
    literal,
    parse_networks,
    refusal,
    system_resolver,
)
from django_dsched.outbox.transports.base import (
    Problem,
    Transport,
    destination_problem,
    encode,
    host_of,
)

CONTENT_TYPE = "application/cloudevents+json; charset=utf-8"
RETRYABLE_STATUSES = frozenset({408, 425, 429})
FOLLOWED_REDIRECTS = frozenset({307, 308})
DEFAULT_PORTS = {"http": 80, "https": 443}
PLACEHOLDER = re.compile(r"\{(topic|type|event_type|host)\}")
# Headers the transport writes itself; HEADERS may not name them.
OWN_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "content-type",
        "idempotency-key",
        "user-agent",
        "x-dsched-signature",
    }
)
# Characters left as they are when a URL's path and query are made ASCII for the request
# line: the reserved ones and "%" (escapes already there stay escapes).
_KEEP_IN_TARGET = "!$&'()*+,/:;=?@%~"


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
        port = parts.port or DEFAULT_PORTS.get(parts.scheme, 0)
    except ValueError:
        return False
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
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


class UrlTemplate:
    """A webhook URL whose ``{topic}`` and ``{type}`` are filled in percent-encoded.

    Placeholders may stand only in the path and the query. Every character of a value that
    is not unreserved (RFC 3986: letters, digits, ``-._~``) is percent-encoded, ``/``, ``?``,
    ``#``, ``&`` and ``%`` included, so a value stays inside its placeholder; a path segment
    that a value would turn into ``.`` or ``..`` is refused.
    """

    def __init__(self, template: str) -> None:
        parts = urlsplit(template)
        if parts.scheme not in DEFAULT_PORTS or not parts.netloc:
            raise ConfigurationError("URL must be an http:// or https:// URL")
        if "@" in parts.netloc:
            raise ConfigurationError(
                "URL may not carry credentials (user:password@): send them in HEADERS or use "
                "SECRET to sign"
            )
        if "{" in parts.netloc or PLACEHOLDER.search(parts.fragment):
            raise ConfigurationError(
                "URL placeholders ({topic}, {type}, {host}) may stand only in the path and "
                "query, never in the scheme, host or port"
            )
        self.template = template
        self.origin = f"{parts.scheme}://{parts.netloc}"
        self.segments = (parts.path or "/").split("/")
        self.query = parts.query

    def render(self, message: Message) -> str:
        event_type = quote(message.event_type, safe="")
        values = {"topic": quote(message.topic, safe=""), "type": event_type}
        values["event_type"] = event_type
        values["host"] = host_of(message) or ""
        if "{host}" in self.template and not values["host"]:
            raise PermanentDeliveryError("the message names no host to fill {host} with")

        def fill(text: str) -> str:
            return PLACEHOLDER.sub(lambda match: values[match[1]], text)

        segments = []
        for segment in self.segments:
            filled = fill(segment)
            if filled != segment and unquote(filled) in (".", ".."):
                raise PermanentDeliveryError(
                    f"refused: topic {message.topic!r} / type {message.event_type!r} would make "
                    f"the URL path segment {segment!r} the dot segment {filled!r}"
                )
            segments.append(filled)
        url = self.origin + "/".join(segments)
        return f"{url}?{fill(self.query)}" if self.query else url

    def probe(self) -> str:
        """The URL with harmless values in its placeholders (for checks)."""
        return PLACEHOLDER.sub("t", self.template)


@dataclass(frozen=True, slots=True)
class Target:
    """Where one request goes: the parts httpcore needs, and the origin they belong to."""

    scheme: str
    host: str  # as written in the URL, lower case, IDNA-encoded, no brackets
    port: int
    path: str  # path and query, ASCII

    @classmethod
    def parse(cls, url: str) -> Target:
        parts = urlsplit(url)
        try:
            port = parts.port or DEFAULT_PORTS.get(parts.scheme, 0)
            host = (parts.hostname or "").rstrip(".").encode("idna").decode("ascii")
        except (ValueError, UnicodeError) as exc:
            raise PermanentDeliveryError(f"bad webhook URL ({parts.scheme}://…): {exc}") from None
        if parts.scheme not in DEFAULT_PORTS or not host:
            raise PermanentDeliveryError(
                f"bad webhook URL ({parts.scheme}://{host}…): not http(s) with a host"
            )
        path = quote(parts.path or "/", safe=_KEEP_IN_TARGET)
        if parts.query:
            path += "?" + quote(parts.query, safe=_KEEP_IN_TARGET)
        return cls(parts.scheme, host, port, path)

    @property
    def origin(self) -> tuple[str, str, int]:
        return (self.scheme, self.host, self.port)

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == DEFAULT_PORTS[self.scheme] else f"{host}:{self.port}"

    def __str__(self) -> str:
        """The origin only: paths and queries often carry secrets (tokens, hook ids), and
        what this says goes into ``last_error``, the logs and the REST API."""
        return f"{self.scheme}://{self.host_header}"


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    headers: dict[str, str]  # lower-case names
    excerpt: str  # the start of the body


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """``Retry-After`` in seconds, or None if absent or unreadable.

    An HTTP-date is measured against the response's own ``Date`` header (both are the
    server's clock; no process clock is read); without ``Date`` it is ignored.
    """
    value = headers.get("retry-after", "").strip()
    if not value:
        return None
    if re.fullmatch(r"[0-9]{1,12}", value):
        return float(value)
    try:
        when = parsedate_to_datetime(value)
        now = parsedate_to_datetime(headers.get("date", "").strip())
    except (TypeError, ValueError, IndexError):
        return None
    when, now = (d if d.tzinfo else d.replace(tzinfo=UTC) for d in (when, now))
    return max(0.0, (when - now).total_seconds())


def allowed_networks() -> tuple[IPNetwork, ...]:
    """``DSCHED_WEBHOOK_ALLOWED_NETWORKS`` as networks (``ValueError`` if malformed)."""
    entries = app_settings.WEBHOOK_ALLOWED_NETWORKS
    if isinstance(entries, str):
        raise ValueError("a list of networks is expected, not a string")
    return parse_networks(entries)


def configured_resolver() -> Resolver:
    """``DSCHED_WEBHOOK_RESOLVER``: None (the system's), a callable or its dotted path."""
    value = app_settings.WEBHOOK_RESOLVER
    if value is None:
        return system_resolver
    resolver = import_string(value) if isinstance(value, str) else value
    if not callable(resolver):
        raise ConfigurationError(f"DSCHED_WEBHOOK_RESOLVER {value!r} is not callable")
    return resolver  # type: ignore[no-any-return]


class WebhookTransport(Transport):
    alias = "webhook"
    requires = ("httpcore", "httpcore", "webhooks")
    # Requests at once to one route for one host: each on a connection of the pool, kept
    # alive between them (httpcore's pool is safe to share across threads).
    concurrency = 8
    options = frozenset(
        {"URL", "TIMEOUT", "HEADERS", "SECRET", "MAX_REDIRECTS", "MAX_RESPONSE_BYTES"}
    )

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        import httpcore

        from django_dsched.outbox.transports.webhook_connections import Connections
        from django_dsched.outbox.transports.webhook_network import CheckedBackend, Deadline

        self.httpcore = httpcore
        self.template = UrlTemplate(options["URL"])
        self.timeout = float(options.get("TIMEOUT", 10.0))
        self.headers = {
            str(name): str(value)
            for name, value in dict(options.get("HEADERS", {})).items()
            if str(name).lower() not in OWN_HEADERS
        }
        secret = options.get("SECRET")
        self.secret: bytes | None = secret.encode() if isinstance(secret, str) else secret
        self.max_redirects = int(options.get("MAX_REDIRECTS", 3))
        self.max_response_bytes = int(options.get("MAX_RESPONSE_BYTES", 64 * 1024))
        self.deadline = Deadline()
        # One connection per send under way (the relay's limits bound them), each kept
        # alive for the next; at most DSCHED_RELAY_CONCURRENCY kept idle.
        self.connections = Connections(
            CheckedBackend(self.deadline, allowed_networks(), configured_resolver()),
            keepalive_expiry=30.0,
            max_idle=max(1, int(app_settings.RELAY_CONCURRENCY)),
        )

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> list[str]:
        problems = super().check_options(options)
        problems += cls.missing_library()
        url = options.get("URL")
        try:
            template = UrlTemplate(url if isinstance(url, str) else "")
        except ConfigurationError as exc:
            problems.append(str(exc))
        else:
            problems.extend(_destination_problems(template))
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
        else:
            own = sorted(str(name) for name in headers if str(name).lower() in OWN_HEADERS)
            if own:
                problems.append(f"HEADERS may not set {', '.join(own)} (the transport does)")
        secret = options.get("SECRET")
        if secret is not None and not isinstance(secret, str | bytes):
            problems.append("SECRET must be a string or bytes")
        return problems

    @classmethod
    def tenancy_problems(cls, options: Mapping[str, Any], *, shared: bool) -> list[Problem]:
        """dsched.E051: on a shared route, a URL whose path a schedule's topic or event type
        chooses beyond its host's (the route's SECRET signs every host's requests alike: the
        receiver tells them apart by {host} and the body's source)."""
        return destination_problem("URL", options.get("URL")) if shared else []

    def _headers(self, message: Message, body: bytes) -> list[tuple[str, str]]:
        headers = {
            **self.headers,
            "Content-Type": CONTENT_TYPE,
            "Idempotency-Key": str(message.id),
            "User-Agent": f"django-dsched/{__version__}",
        }
        if self.secret:
            digest = hmac.new(self.secret, body, hashlib.sha256).hexdigest()
            headers["X-Dsched-Signature"] = f"sha256={digest}"
        return list(headers.items())

    def send(self, message: Message) -> None:
        body = encode(message)
        headers = self._headers(message, body)
        url = self.template.render(message)
        allowed = app_settings.WEBHOOK_ALLOWED_HOSTS
        self.deadline.at = time.monotonic() + self.timeout
        try:
            for _hop in range(self.max_redirects + 1):
                target = Target.parse(url)
                if not host_allowed(url, allowed):
                    raise PermanentDeliveryError(f"{target} is not in DSCHED_WEBHOOK_ALLOWED_HOSTS")
                reply = self._post(target, body, headers)
                status = reply.status
                if 200 <= status < 300:
                    return
                location = reply.headers.get("location")
                if status in FOLLOWED_REDIRECTS and location:
                    url = self._redirect(target, urljoin(url, location), status)
                    continue
                if 300 <= status < 400:
                    raise PermanentDeliveryError(f"HTTP {status} redirect not followed")
                error = f"HTTP {status} from {target}" + (
                    f": {reply.excerpt}" if reply.excerpt else ""
                )
                if status >= 500 or status in RETRYABLE_STATUSES:
                    wait = retry_after_seconds(reply.headers)
                    if wait is not None:
                        error += f" (Retry-After: {wait:g}s)"
                    raise DeliveryError(error, retry_after=wait)
                raise PermanentDeliveryError(error)
            raise PermanentDeliveryError(f"more than {self.max_redirects} redirects")
        finally:
            self.deadline.at = None

    @staticmethod
    def _redirect(origin: Target, url: str, status: int) -> str:
        """``url`` if it has ``origin``'s scheme, host and port; refused otherwise."""
        target = Target.parse(url)
        if target.origin != origin.origin:
            raise PermanentDeliveryError(
                f"HTTP {status} redirect to another origin not followed: {target} (redirects "
                "are followed only within the URL's scheme, host and port, so its headers "
                "and signature never go elsewhere; set URL to the new address)"
            )
        return url

    def _post(self, target: Target, body: bytes, headers: list[tuple[str, str]]) -> Reply:
        """One POST, ending by the deadline; the reply's status, headers and excerpt."""
        httpcore = self.httpcore
        timeouts = dict.fromkeys(("connect", "read", "write", "pool"), self.timeout)
        url = httpcore.URL(
            scheme=target.scheme, host=target.host, port=target.port, target=target.path
        )
        try:
            with (
                self.connections.connection(target.origin) as connection,
                connection.stream(
                    "POST",
                    url,
                    headers=[("Host", target.host_header), *headers],
                    content=body,
                    extensions={"timeout": timeouts},
                ) as response,
            ):
                received = bytearray()
                try:
                    for chunk in response.iter_stream():
                        received += chunk
                        if len(received) >= self.max_response_bytes:
                            break
                except (httpcore.TimeoutException, httpcore.NetworkError, httpcore.ProtocolError):
                    pass  # the status is in; a body cut short only shortens the excerpt
                excerpt = bytes(received[:500]).decode("utf-8", "replace").strip()
                reply_headers = {
                    name.decode("latin-1").lower(): value.decode("latin-1")
                    for name, value in response.headers
                }
                return Reply(response.status, reply_headers, excerpt)
        except httpcore.TimeoutException:
            raise DeliveryError(
                f"timed out after {self.timeout}s (TIMEOUT bounds the whole exchange)"
            ) from None
        except (
            httpcore.NetworkError,
            httpcore.ProtocolError,
            httpcore.UnsupportedProtocol,
            httpcore.ConnectionNotAvailable,
        ) as exc:
            raise DeliveryError(f"{type(exc).__name__}: {exc}") from None

    def close(self) -> None:
        self.connections.close()


def _destination_problems(template: UrlTemplate) -> list[str]:
    """Whether a URL's host is allowlisted and, if it is an address, allowed (checks)."""
    probe = template.probe()
    problems = []
    if not host_allowed(probe, app_settings.WEBHOOK_ALLOWED_HOSTS):
        problems.append(
            f"the host of {template.template} is not in DSCHED_WEBHOOK_ALLOWED_HOSTS "
            f"({list(app_settings.WEBHOOK_ALLOWED_HOSTS)})"
        )
    address = literal(urlsplit(probe).hostname or "")
    try:
        networks = allowed_networks()
    except (TypeError, ValueError):
        return problems  # reported by the settings check (dsched.E012)
    why = refusal(address, networks) if address is not None else None
    if why is not None:
        problems.append(
            f"{template.template} would be refused: {why}; list its network in "
            "DSCHED_WEBHOOK_ALLOWED_NETWORKS to allow it"
        )
    return problems
