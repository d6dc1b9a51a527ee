"""Handing freed heap memory back to the operating system (glibc's malloc_trim).

Training allocates activations of a different size at every step (batches differ in shape), and
glibc keeps the freed chunks in its heaps, so resident memory creeps up to several times what
the step needs. malloc_trim(0) releases every free page of every heap (madvise), at the cost of
page faults when the memory is touched again.
"""

import ctypes
import ctypes.util
import functools


@functools.cache
def _malloc_trim():
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    return getattr(libc, "malloc_trim", None)


def trim_heap() -> bool:
    """Return free heap pages to the OS; False where the C library has no malloc_trim."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
