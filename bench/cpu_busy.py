"""The machine's busy CPU time over a span of wall-clock time, from ``/proc/stat``.

A benchmark that runs several processes on one machine (a scheduler, a relay, the database
server) is bound by the machine once its work needs more CPU time than the cores give in the
time it takes. ``Sampler`` records the machine's busy CPU seconds (all but idle and iowait,
summed over the cores) every few milliseconds on a thread; ``busy(t0, t1)`` is how much of it
fell between two ``time.time()`` instants (the database's clock is the same clock on the same
machine, so a span read from ``event_ts`` or ``delivered_ts`` can be passed as it is).
"""

from __future__ import annotations

import bisect
import os
import threading
import time

TICK = os.sysconf("SC_CLK_TCK")
CORES = os.cpu_count() or 1


def busy_seconds() -> float:
    """The machine's busy CPU seconds since boot (every core's, summed)."""
    with open("/proc/stat") as stat:
        fields = [int(v) for v in stat.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / TICK


class Sampler:
    """``with Sampler() as cpu: ...`` then ``cpu.busy(t0, t1)``."""

    def __init__(self, every: float = 0.005) -> None:
        self.every = every
        self.times: list[float] = []
        self.values: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while True:
            self.times.append(time.time())
            self.values.append(busy_seconds())
            if self._stop.wait(self.every):
                break

    def _at(self, when: float) -> float:
        i = bisect.bisect_left(self.times, when)
        if i <= 0:
            return self.values[0]
        if i >= len(self.times):
            return self.values[-1]
        t0, t1 = self.times[i - 1], self.times[i]
        v0, v1 = self.values[i - 1], self.values[i]
        return v0 + (v1 - v0) * (when - t0) / (t1 - t0) if t1 > t0 else v1

    def busy(self, start: float, end: float) -> float:
        """Busy CPU seconds between two ``time.time()`` instants."""
        return self._at(end) - self._at(start)
