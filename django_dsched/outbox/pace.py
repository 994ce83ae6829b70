"""How many rows a relay's next claim asks for: no more than the relay has room for, and
about as many as the byte cap took last time."""

from __future__ import annotations

from dataclasses import dataclass

# A claim locks up to its count of rows and reads their payloads to count bytes, then keeps
# the prefix within the byte cap: ask for about as many as the cap takes at the last claim's
# bytes per message, with this much to spare, not the whole batch size (10,000 rows of 64 KiB
# events to keep 128 would cost seconds a round).
CLAIM_SPARE = 1.25


@dataclass
class Pace:
    """What a relay measured of its last claim (0: not known yet)."""

    message_bytes: float = 0.0  # mean payload bytes per message of the last claim

    def claim_limit(self, batch_size: int, batch_bytes: int) -> int:
        """Rows to ask of the next claim: the batch size, or fewer when the last claim's
        messages were so large that the byte cap would keep only some of them."""
        limit = batch_size
        if self.message_bytes > 0:
            fits = batch_bytes / self.message_bytes
            limit = min(limit, int(fits * CLAIM_SPARE) + 1)
        return max(1, limit)
