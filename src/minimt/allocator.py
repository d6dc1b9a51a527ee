"""The allocator a training process runs with: mimalloc, preloaded by re-executing the process
once, before torch loads (a process picks its allocator when it starts). Imports no torch, so a
script calls it first and pays for its imports once."""

from __future__ import annotations

import os
import sys
from importlib import metadata
from pathlib import Path

ALLOCATORS = ("mimalloc", "system")


def mimalloc_library() -> Path | None:
    """libmimalloc.so of the cmeel-mimalloc wheel, if installed."""
    try:
        files = metadata.files("cmeel-mimalloc") or []
    except metadata.PackageNotFoundError:
        return None
    found = [Path(str(f.locate())) for f in files if f.name == "libmimalloc.so"]
    return found[0] if found and found[0].is_file() else None


def reexec_with_mimalloc() -> None:
    """Re-execute this process's command line with mimalloc preloaded, unless it already is,
    MINIMT_ALLOCATOR=system asks for the C library's malloc, or mimalloc is not installed: glibc's
    malloc keeps the freed activations of each new batch shape, so the resident size creeps up
    (docs/performance.md)."""
    choice = os.environ.get("MINIMT_ALLOCATOR", "mimalloc")
    if choice not in ALLOCATORS:
        sys.exit(f"MINIMT_ALLOCATOR={choice!r}: use one of {', '.join(ALLOCATORS)}")
    library = mimalloc_library()
    preload = os.environ.get("LD_PRELOAD", "")
    if choice == "system" or library is None or str(library) in preload.split(":"):
        return
    environment = os.environ | {"LD_PRELOAD": ":".join(filter(None, [str(library), preload]))}
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], environment)
