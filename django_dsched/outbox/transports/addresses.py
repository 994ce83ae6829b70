"""Which IP addresses a webhook may connect to, and name resolution that is checked.

A webhook's host name is first matched against ``DSCHED_WEBHOOK_ALLOWED_HOSTS``; then, when
the connection is opened, every address the name resolves to is checked here and the socket
is connected to one of those checked addresses (never to a second resolution, so a DNS
answer that changes between check and connect cannot redirect it).

Refused unless ``DSCHED_WEBHOOK_ALLOWED_NETWORKS`` contains the address: the IANA
special-purpose ranges that are not globally reachable (loopback, private, shared/CGNAT,
link-local and with it the cloud metadata services, unspecified, multicast, broadcast,
reserved, documentation, benchmarking, unique-local, site-local, discard) and IPv6 forms
that carry an IPv4 address (mapped, translated, NAT64, 6to4), which are judged by the IPv4
address they carry. The loopback addresses ``127.0.0.1`` and ``::1`` (both ``localhost``)
are one: a network that opens either opens both. Literal hosts in any form ``inet_aton``
accepts (``127.1``, ``0x7f000001``, ``2130706433``, ``0177.0.0.1``) are read as the address
they denote.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import threading
from collections.abc import Callable, Iterable, Sequence

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
# ``resolve(host, port) -> addresses``: how DSCHED_WEBHOOK_RESOLVER is called.
Resolver = Callable[[str, int], Iterable[str]]

# (network, what it is): refused unless opened by DSCHED_WEBHOOK_ALLOWED_NETWORKS. The most
# specific entry of an overlap comes first, so the reason given is the precise one.
REFUSED_NETWORKS: tuple[tuple[IPNetwork, str], ...] = tuple(
    (ipaddress.ip_network(network), what)
    for network, what in (
        ("0.0.0.0/8", "unspecified ('this network')"),
        ("10.0.0.0/8", "private"),
        ("100.64.0.0/10", "shared address space (carrier-grade NAT)"),
        ("127.0.0.0/8", "loopback"),
        ("169.254.169.254/32", "link-local (the cloud metadata service)"),
        ("169.254.0.0/16", "link-local"),
        ("172.16.0.0/12", "private"),
        ("192.0.0.0/24", "IETF protocol assignments"),
        ("192.0.2.0/24", "documentation"),
        ("192.88.99.0/24", "6to4 relay anycast"),
        ("192.168.0.0/16", "private"),
        ("198.18.0.0/15", "benchmarking"),
        ("198.51.100.0/24", "documentation"),
        ("203.0.113.0/24", "documentation"),
        ("224.0.0.0/4", "multicast"),
        ("255.255.255.255/32", "broadcast"),
        ("240.0.0.0/4", "reserved"),
        ("::/128", "unspecified"),
        ("::1/128", "loopback"),
        ("::/96", "IPv4-compatible (deprecated)"),
        ("64:ff9b:1::/48", "local-use NAT64"),
        ("100::/64", "discard-only"),
        ("2001:db8::/32", "documentation"),
        ("2001::/23", "IETF protocol assignments (Teredo, ...)"),
        ("3fff::/20", "documentation"),
        ("fd00:ec2::254/128", "unique-local (the AWS metadata service)"),
        ("fc00::/7", "unique-local (private)"),
        ("fe80::/10", "link-local"),
        ("fec0::/10", "site-local (deprecated)"),
        ("ff00::/8", "multicast"),
    )
)

# The two loopback addresses ``localhost`` names, one per family: one machine either way.
LOOPBACK: tuple[IPAddress, ...] = (
    ipaddress.IPv4Address("127.0.0.1"),
    ipaddress.IPv6Address("::1"),
)

# IPv6 prefixes whose last 32 bits are an IPv4 address the packet ends up at.
_IPV4_TRANSLATED = (
    ipaddress.ip_network("::ffff:0:0:0/96"),  # IPv4-translated (SIIT)
    ipaddress.ip_network("64:ff9b::/96"),  # NAT64 well-known prefix
)

# What inet_aton reads as an IPv4 address: 1 to 4 parts, decimal, octal (0...) or hex (0x...).
_LEGACY_IPV4 = re.compile(r"(?:0[xX][0-9a-fA-F]*|[0-9]+)(?:\.(?:0[xX][0-9a-fA-F]*|[0-9]+)){0,3}")


def parse_address(text: str) -> IPAddress:
    """An address as a resolver or a URL writes it (``[v6]``, ``v6%scope``, legacy IPv4)."""
    text = text.strip().removeprefix("[").removesuffix("]")
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        if not _LEGACY_IPV4.fullmatch(text):
            raise
    try:
        return ipaddress.IPv4Address(socket.inet_aton(text))
    except OSError:
        raise ValueError(f"{text!r} is not an IP address") from None


def literal(host: str) -> IPAddress | None:
    """The address ``host`` denotes if it is an IP literal in any accepted form, else None."""
    try:
        return parse_address(host)
    except ValueError:
        return None


def carried_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (mapped, translated, NAT64, 6to4), if any."""
    if address.version == 4:
        return None
    assert isinstance(address, ipaddress.IPv6Address)
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if any(address in network for network in _IPV4_TRANSLATED):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def parse_networks(entries: Iterable[str]) -> tuple[IPNetwork, ...]:
    """``DSCHED_WEBHOOK_ALLOWED_NETWORKS`` read into networks (``ValueError`` if malformed)."""
    return tuple(ipaddress.ip_network(entry) for entry in entries)


def refusal(address: IPAddress, allowed: Sequence[IPNetwork]) -> str | None:
    """Why a webhook may not connect to ``address`` (a phrase), or None if it may.

    An address carrying an IPv4 address is judged by both; an allowed network that contains
    either opens it.
    """
    if isinstance(address, ipaddress.IPv6Address) and address.scope_id:
        address = ipaddress.IPv6Address(str(address).split("%", 1)[0])
    candidates: list[IPAddress] = [address]
    carried = carried_ipv4(address)
    if carried is not None:
        candidates.append(carried)
    if address in LOOPBACK:
        # This machine by either family: a network opening one loopback opens the other
        # (``localhost`` resolves to both on a dual-stack host).
        candidates.extend(LOOPBACK)
    for candidate in candidates:
        if any(candidate.version == n.version and candidate in n for n in allowed):
            return None
    for candidate in candidates:
        for network, what in REFUSED_NETWORKS:
            if candidate.version == network.version and candidate in network:
                shown = f"{address} ({candidate})" if candidate is not address else str(address)
                return f"{shown} is {what}"
    return None


def system_resolver(host: str, port: int) -> list[str]:
    """The operating system's resolver (``getaddrinfo``), addresses in its order."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def resolve(host: str, port: int, resolver: Resolver, timeout: float | None) -> list[IPAddress]:
    """Addresses of ``host``: a literal as is, a name by ``resolver`` within ``timeout``.

    Raises ``TimeoutError`` when the resolver has not answered in time (it finishes on a
    daemon thread that nothing waits for), ``OSError`` when it fails or finds nothing.
    """
    address = literal(host)
    if address is not None:
        return [address]
    answer: list[list[str]] = []
    failure: list[BaseException] = []
    done = threading.Event()

    def run() -> None:
        try:
            answer.append(list(resolver(host, port)))
        except BaseException as exc:  # handed to the waiting thread
            failure.append(exc)
        finally:
            done.set()

    threading.Thread(target=run, name=f"dsched-resolve-{host}", daemon=True).start()
    if not done.wait(timeout):
        raise TimeoutError(f"resolving {host} took longer than the deadline")
    if failure:
        error = failure[0]
        raise error if isinstance(error, OSError) else OSError(f"resolving {host}: {error}")
    try:
        addresses = [parse_address(text) for text in answer[0]]
    except ValueError as exc:
        raise OSError(f"resolving {host}: {exc}") from None
    if not addresses:
        raise OSError(f"{host} resolves to no address")
    return addresses
