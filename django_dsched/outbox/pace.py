"""A relay's pace, and so how many rows its next claim asks for: about as many as the byte
cap took last time, and no more than it sends in about ``BATCH_SECONDS``."""

from __future__ import annotations

from dataclasses import dataclass

# A claim locks up to its count of rows and reads their payloads to count bytes, then keeps
# the prefix within the byte cap: ask for about as many as the cap takes at the last claim's
# bytes per message, with this much to spare, not the whole batch size (10,000 rows of 64 KiB
# events to keep 128 would cost seconds a round).
CLAIM_SPARE = 1.25

# A claim asks for no more messages than the relay sent in about this many seconds at the last
# batch's pace: a fast transport gets whole batches (``RELAY_BATCH_SIZE``), a slow endpoint
# small ones, so a relay never holds more claims than it can send soon (other relays deliver
# the rest) and a message waits behind the others of its batch for about this long at most.
BATCH_SECONDS = 1.0


@dataclass
class Pace:
    """What a relay measured of its last claim and batch (0: not known yet)."""

    message_bytes: float = 0.0  # mean payload bytes per message of the last claim
    send_seconds: float = 0.0  # mean seconds to send one message of the last batch
    claim_seconds: float = 0.0  # how long the last claim took

    def claim_limit(self, batch_size: int, batch_bytes: int) -> int:
        """Rows to ask of the next claim: the batch size, or fewer when the last claim's
        messages were so large that the byte cap would keep only some of them, or when the
        last batch was sent so slowly that a whole batch would take over ``BATCH_SECONDS``."""
        limit = batch_size
        if self.message_bytes > 0:
            fits = batch_bytes / self.message_bytes
            limit = min(limit, int(fits * CLAIM_SPARE) + 1)
        if self.send_seconds > 0:
            limit = min(limit, int(BATCH_SECONDS / self.send_seconds) + 1)
        return max(1, limit)
