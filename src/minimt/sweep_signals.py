"""A sweep that runs several runs at once, stopped by a signal: its launcher process sends the
stop on to the processes it started (`forward_stops`) and waits for them; each of those remembers
it (`remember_stops`, `record`, `stopped`), so that after the run it was training has saved and
returned it starts no further run of the sweep. Used by scripts/train.py's sweeps only; the stop
protocol itself (what a run does on a signal) is minimt.signals."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from multiprocessing import resource_tracker
from pathlib import Path

from minimt.signals import STOP_SIGNALS

_stopped: list[signal.Signals] = []  # the stop signals this process received, first first
# Set by a sweep's launcher that was stopped, for the worker processes it starts after that
SWEEP_STOPPED = "MINIMT_SWEEP_STOPPED"


def stopped() -> signal.Signals | None:
    """The first stop signal this process received (or, in a sweep's worker started after the
    sweep was stopped, the launcher's), or None."""
    if _stopped:
        return _stopped[0]
    return signal.Signals[os.environ[SWEEP_STOPPED]] if SWEEP_STOPPED in os.environ else None


def record(signum: int) -> None:
    """Remember a stop signal this process received (`stopped`)."""
    _stopped.append(signal.Signals(signum))


def remember_stops() -> None:
    """From now on, for the life of this process, a stop signal outside the handlers below is
    only remembered (`stopped`): a sweep's worker between two runs lives on and starts no more,
    and a run stopped while it set up stops at its first step (`StopRequest`). A sweep's worker
    starts with the stop signals blocked (`forward_stops`): one sent to it before this call is
    delivered now."""
    if threading.current_thread() is threading.main_thread():
        for signum in STOP_SIGNALS:
            signal.signal(signum, lambda signum, frame: record(signum))
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


@contextmanager
def forward_stops() -> Iterator[None]:
    """While entered (a sweep's launcher process): a stop signal is remembered and sent on as
    SIGTERM to every process this one started that runs a job (not Python's resource trackers),
    so that each run saves its checkpoint and returns; this process lives on to wait for them.

    The stop signals stay blocked in this process (`hold_stops`), and so in every process it
    starts (a blocked signal waits, and the mask is inherited): a worker gets a Ctrl-C to the
    process group, or the SIGTERM sent on, only once its run has set its handlers
    (`remember_stops`), never while it is still importing or unpickling its job, where the signal
    would kill it. A thread of this process takes them (sigwait). SIGTERM, not SIGINT: a Ctrl-C
    to the process group already gave the runs one SIGINT, and a second SIGINT would stop a run
    at once, mid-save."""
    done = threading.Event()

    def forward(signum: int) -> None:
        record(signum)
        os.environ[SWEEP_STOPPED] = signal.Signals(signum).name  # for workers not started yet
        for pid in job_processes(os.getpid()):
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    def take_signals() -> None:
        while not done.is_set():
            info = signal.sigtimedwait(STOP_SIGNALS, 0.2)
            if info is not None:
                forward(info.si_signo)

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    hold_stops()
    taker = threading.Thread(target=take_signals, name="minimt-stop-signals", daemon=True)
    taker.start()
    try:
        yield
    finally:
        done.set()
        taker.join()
        while (info := signal.sigtimedwait(STOP_SIGNALS, 0)) is not None:
            record(info.si_signo)  # came as the sweep ended: its runs are done
        os.environ.pop(SWEEP_STOPPED, None)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def hold_stops() -> None:
    """Block the stop signals in this thread, and so in every thread and process it starts from
    now on: a sweep's launcher calls it before torch loads (torch's OpenMP runtime starts a
    thread then), since a stop signal that reaches a thread not blocking it takes the default
    action, which ends the launcher at once and leaves its runs training. `forward_stops` takes
    the held signals."""
    # Python's resource tracker, started on the first process a sweep spawns, unblocks the stop
    # signals after starting (whatever the mask was): start it before they are blocked.
    resource_tracker.ensure_running()
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)


def job_processes(parent: int) -> list[int]:
    """The descendants of `parent` (Linux /proc) but Python's resource trackers."""
    children: dict[int, list[int]] = {}
    commands: dict[int, bytes] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with suppress(OSError, ValueError, IndexError):
            pid = int(stat.parent.name)
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            commands[pid] = (stat.parent / "cmdline").read_bytes()
            children.setdefault(ppid, []).append(pid)
    found, queue = [], list(children.get(parent, []))
    while queue:
        pid = queue.pop()
        queue += children.get(pid, [])
        if b"resource_tracker" not in commands.get(pid, b""):
            found.append(pid)
    return found
