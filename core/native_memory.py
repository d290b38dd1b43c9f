"""Keep a long-running process's native heap to what it holds: one malloc arena, free pages handed back.

glibc gives each thread that allocates its own arena and hands little of a thread arena's free memory back
to the system. The exporter's fetch threads decode tens of MiB of JSON and exposition text each poll, each
in its own arena, so RSS climbed poll after poll while the live heap did not: memory retained, not leaked.
One arena and malloc_trim after each poll keep it flat, polls as fast (the figures: docs/polling.md).
Where the C library is not glibc both do nothing.
"""

from __future__ import annotations

import ctypes

_M_ARENA_MAX = -8  # glibc's mallopt parameter (malloc.h)


def _glibc() -> ctypes.CDLL | None:
    libc = ctypes.CDLL(None)  # the symbols already loaded into this process
    # gnu_get_libc_version exists only in glibc: other C libraries' mallopt differs or is a stub.
    return libc if hasattr(libc, "gnu_get_libc_version") and hasattr(libc, "malloc_trim") else None


_LIBC = _glibc()


def one_arena() -> bool:
    """Threads created from now on share the main arena (those running keep theirs). Call it before the
    threads start. True if the C library took it."""
    return _LIBC is not None and _LIBC.mallopt(_M_ARENA_MAX, 1) == 1


def give_back() -> bool:
    """Return the heap's free pages to the system (malloc_trim): a few milliseconds. True if any were."""
    return _LIBC is not None and _LIBC.malloc_trim(0) == 1
