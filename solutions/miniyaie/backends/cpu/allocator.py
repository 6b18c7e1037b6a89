"""Keep freed activation memory in the process instead of handing it back to the kernel (glibc only).

Why: every op of a step allocates its output, and glibc's malloc serves a
block of more than its mmap threshold (128 KiB at first) with a fresh
mmap and gives it back on free. The next step's same-sized tensor then
touches new pages: the kernel faults and zeroes each 4 KiB page again. On
the random benchmark that was about 0.9 million page faults (3.7 GB of
zeroing) per run. Raising the mmap and trim thresholds lets freed blocks
be reused, as tcmalloc (which vLLM's CPU docs ask to preload) does.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt's parameter numbers (malloc.h)
MMAP_THRESHOLD = 32 << 20  # glibc's largest accepted value: bigger blocks (the KV pool) still get their own mmap
TRIM_THRESHOLD = 256 << 20  # free memory kept at the top of the heap before it is returned
log = logging.getLogger(__name__)


@functools.cache
def keep_freed_memory() -> bool:
    """Set glibc's thresholds once per process; False (nothing changed) where there is no glibc."""
    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError, TypeError):
        return False
    done = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    if not done:
        log.warning("mallopt refused the thresholds: activations keep being mapped and unmapped")
    return done
