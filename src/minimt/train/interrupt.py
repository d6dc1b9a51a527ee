"""Ctrl-C and SIGTERM as a request to stop cleanly at the next training step boundary."""

from __future__ import annotations

import signal
import threading
from types import FrameType


class StopRequest:
    """While entered, the first SIGINT/SIGTERM sets `.signal` instead of killing the process.

    The training loop checks it between steps, saves a checkpoint and exits. A second SIGINT
    (Ctrl-C pressed again) interrupts at once. Outside the main thread it does nothing.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.signal: str | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._handle) for s in self.SIGNALS}
        return self

    def __exit__(self, *exc_info: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signal is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signal = signal.Signals(signum).name
