"""The run's resident memory sampled over time: its peak, and when and in which phase it came."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field

PAGE_MB = os.sysconf("SC_PAGE_SIZE") / 2**20


def rss_mb() -> float:
    """This process's resident set size now, in MB (Linux /proc/self/statm)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * PAGE_MB


@dataclass
class PeakMemory:
    """A background thread sampling rss_mb() every `interval` seconds while in a `with` block.
    The loop names its `phase` ("training", "test decoding"); the peak keeps the phase and the
    seconds from the start at which it came, and each phase its own peak (read pages of
    memory-mapped files count, as in any RSS figure)."""

    interval: float = 1.0
    phase: str = "setup"
    peak_mb: float = 0.0
    peak_seconds: float = 0.0
    peak_phase: str = "setup"
    peak_by_phase: dict[str, float] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)
    _start: float = field(default_factory=time.monotonic, repr=False)

    def sample(self) -> None:
        found = rss_mb()
        self.peak_by_phase[self.phase] = max(self.peak_by_phase.get(self.phase, 0.0), found)
        if found > self.peak_mb:
            self.peak_mb, self.peak_phase = found, self.phase
            self.peak_seconds = time.monotonic() - self._start

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def __enter__(self) -> PeakMemory:
        self._start = time.monotonic()
        self.sample()
        self._thread = threading.Thread(target=self._run, name="peak-memory", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def summary(self) -> dict:
        """metrics.json's "memory": the peak RSS in MB, when (seconds from the start) and where,
        and each phase's peak."""
        self.sample()
        return {
            "peak_rss_mb": round(self.peak_mb, 1),
            "peak_at_seconds": round(self.peak_seconds, 1),
            "peak_phase": self.peak_phase,
            "peak_rss_mb_by_phase": {
                phase: round(peak, 1) for phase, peak in self.peak_by_phase.items()
            },
            "sampled_every_seconds": self.interval,
        }
