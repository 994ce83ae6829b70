from __future__ import annotations

from tests.outbox.conftest import handle, relay_settings

__all__ = ["handle", "relay_settings"]
