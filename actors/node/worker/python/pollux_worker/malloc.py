"""Steady step times under glibc's allocator.

glibc serves large blocks (a batch's activations) with mmap and returns
them, and the top of its heap, to the kernel on free; its thresholds adapt
slowly, so a training loop that frees and reallocates the same tensors
every iteration takes fresh page faults on most of them. On a CPU slot
that made one configuration's step time up to 5x another's of the same
batch, run to run, which no throughput model can fit. steady() keeps
such blocks in the heap instead: the process holds its peak working set,
which a training job does anyway.
"""

import ctypes
import ctypes.util

# mallopt(3) parameters (malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3

# Blocks up to MMAP_THRESHOLD come from the heap; the heap is trimmed
# only when TRIM_THRESHOLD bytes at its top are free.
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 512 << 20

# The environment variables with which a user sets glibc's thresholds
# himself; steady() then leaves them alone.
ENV_OVERRIDES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_",
                 "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_")


def steady(environ, load=None):
    """Sets glibc's thresholds unless environ sets any of them or the C
    library is not glibc. Returns whether it set them."""
    if any(k in environ for k in ENV_OVERRIDES):
        return False
    try:
        libc = load() if load else ctypes.CDLL(ctypes.util.find_library("c"))
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return False
    return (mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and
            mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1)
