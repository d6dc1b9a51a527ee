"""Stop signals (SIGINT, SIGTERM) in one place, for the scripts and the training loop alike:
`stop_signals_raise` turns them into exceptions whose unwinding removes the temp files of
unfinished writes (a script then ends in one `interrupted` line, minimt.cli), and `StopRequest`
lets the training loop finish its step and save before it stops. A sweep's plumbing (a launcher
sending a stop on to its runs) is minimt.sweep_signals, built on this."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


class Terminated(BaseException):
    """SIGTERM, raised like KeyboardInterrupt is for SIGINT: the `finally` blocks that remove
    temp files run, where Python's default for SIGTERM ends the process without them."""


# The exception each stop signal raises inside one_line_errors.
STOP_SIGNALS = {signal.SIGINT: KeyboardInterrupt, signal.SIGTERM: Terminated}


class StopRequest:
    """While entered, the first SIGINT/SIGTERM sets `.signal` (the loop saves and exits) instead
    of killing the process; a second SIGINT interrupts at once, and so does any signal after
    `at_once()`. No-op off the main thread."""

    def __init__(self, stopped_before: signal.Signals | None = None) -> None:
        """`stopped_before`: a stop signal that came before this request was entered (a sweep's
        run stopped while it set up): the first step boundary stops."""
        self.signal: str | None = None if stopped_before is None else stopped_before.name
        self._at_once = False
        self._previous: dict[int, object] = {}

    def at_once(self) -> None:
        """From now on a signal raises (KeyboardInterrupt, Terminated) where it lands: the loop is
        over, no step boundary will read `.signal`. One that came since the last read raises now."""
        self._at_once = True
        if self.signal is not None:
            raise STOP_SIGNALS[signal.Signals[self.signal]]

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._handle) for s in STOP_SIGNALS}
        return self

    def __exit__(self, *exc_info: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self._at_once or (self.signal is not None and signum == signal.SIGINT):
            raise STOP_SIGNALS[signal.Signals(signum)]
        self.signal = signal.Signals(signum).name


def interrupted_line(signum: signal.Signals) -> str:
    """What a script stopped by `signum` prints."""
    return (
        f"interrupted ({signum.name}): stopped before finishing, no file left half-written; "
        "run it again to finish"
    )


@contextmanager
def stop_signals_raise() -> Iterator[None]:
    """While entered, SIGINT raises KeyboardInterrupt and SIGTERM Terminated; a second signal is
    ignored while the first one's exception unwinds, so that cleanup runs to its end. A signal
    the process was started ignoring (SIGINT in a shell's background job) stays ignored; off the
    main thread, which alone may set handlers, nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    for signum, handler in previous.items():
        if handler is not signal.SIG_IGN:
            signal.signal(signum, _raise_stop)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            if handler is not None:  # None: a handler not set from Python, which cannot be put back
                signal.signal(signum, handler)


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    """The handler of stop_signals_raise: ignore further stop signals, raise this one's."""
    for other in STOP_SIGNALS:
        if signal.getsignal(other) is _raise_stop:
            signal.signal(other, signal.SIG_IGN)
    raise STOP_SIGNALS[signal.Signals(signum)]


def signal_of(stop: BaseException) -> signal.Signals:
    """The stop signal whose exception (STOP_SIGNALS) `stop` is."""
    return next(signum for signum, raised in STOP_SIGNALS.items() if isinstance(stop, raised))
