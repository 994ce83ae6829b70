"""Labels whose values come from data, bounded: a series per value would let a tenant add
series (memory, scrape size) without end, one topic name at a time.

A :class:`BoundedLabel` gives the first ``DSCHED_METRICS_LABEL_VALUES`` distinct values a
process sees their own series; any other value is counted under :data:`OTHER`. Nothing is
lost (every count lands in some series) and the series stay at most that many plus one.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable

from django_dsched.conf import app_settings

# The value the rest count under. No topic can take it (a topic starts with a letter or a
# digit), nor a transport's alias.
OTHER = "_other"


class BoundedLabel:
    """The values one label of this process has given series to (``limit`` None: the setting
    ``DSCHED_METRICS_LABEL_VALUES``, read when a new value comes)."""

    def __init__(self, limit: int | None = None) -> None:
        self._limit = limit
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    @property
    def limit(self) -> int:
        return app_settings.METRICS_LABEL_VALUES if self._limit is None else self._limit

    def __call__(self, value: str) -> str:
        """``value`` if it has (or may now have) a series of its own, else :data:`OTHER`."""
        if value in self._seen:
            return value
        with self._lock:
            if value not in self._seen and len(self._seen) < max(0, self.limit):
                self._seen.add(value)
            return value if value in self._seen else OTHER

    def fold(self, counts: Iterable[tuple[str, int]]) -> Counter[str]:
        """``counts`` by value, the values past the bound added up under :data:`OTHER`."""
        folded: Counter[str] = Counter()
        for value, count in counts:
            folded[self(value)] += count
        return folded
