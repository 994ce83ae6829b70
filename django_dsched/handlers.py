"""The public face of in-process handlers: ``from django_dsched.handlers import handler``.

The registry itself lives in :mod:`django_dsched.outbox.handlers`.
"""

from __future__ import annotations

from django_dsched.outbox.handlers import Handler, HandlerRegistry, handler, host_of, registry

__all__ = ["Handler", "HandlerRegistry", "handler", "host_of", "registry"]
