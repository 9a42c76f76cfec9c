"""Freed heap given back to the system after a large load (glibc keeps it otherwise)."""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable


def _trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, or None where there is none (musl, macOS, Windows)."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        trim = libc.malloc_trim
    except (OSError, AttributeError, TypeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


_MALLOC_TRIM = _trim()


def give_back_freed_heap() -> bool:
    """Return the free pages of the C heap to the system: loading the vector copy of 1M facts
    (a bytes object per vector, 1 GB in all, passing through) left 56 MB of anonymous memory
    free inside the heap here. True if it could be asked."""
    if _MALLOC_TRIM is None:
        return False
    _MALLOC_TRIM(0)
    return True
