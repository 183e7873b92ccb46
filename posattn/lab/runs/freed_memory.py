"""Large CPU tensors reused instead of mapped anew: in posattn's commands glibc's malloc keeps
freed blocks for the next allocation, unless asked otherwise.

glibc maps every allocation above its mmap threshold (which it raises as blocks are freed, to
at most 32 MiB) from the system and returns it when freed, so each new large tensor is paid
again in page faults: on the 2-core development CPU a fresh 256 MiB float32 tensor took 87-91
ms to fill, against 9-10 ms in kept memory. An attention call that makes [B, H, n, n] tensors
(256 MiB at B=8, H=8, n=1024) pays that on each one: Shaw's relative keys and values trained
at 2.28-2.32x bias-free SDPA at n=1024 with the defaults and 1.62-1.63x with freed blocks kept,
DeBERTa at 4.53x against 3.08-3.16x, and a BERT-small training step at n=512 with Shaw at
+21.8% over `learned` against +11.8% (docs/cost.md). Kept, blocks below 1 GiB come
from the heap (M_MMAP_THRESHOLD) and up to 2 GiB of its free top stays mapped
(M_TRIM_THRESHOLD): the process's resident memory then stays near its peak until it exits,
as the GPU's caching allocator keeps its blocks.

The choice travels in the environment so that the worker processes a command spawns apply it
too. A library user gets the same by setting glibc's variables before Python starts:
`MALLOC_MMAP_THRESHOLD_=1073741824 MALLOC_TRIM_THRESHOLD_=2147483648`.
"""

from __future__ import annotations

import ctypes
import os
import platform

RELEASE_FREED_MEMORY = "POSATTN_RELEASE_FREED_MEMORY"

# mallopt's parameters (glibc's malloc.h) and the values posattn sets.
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
KEPT_THRESHOLDS = (1 << 30, (1 << 31) - 1)  # mmap, trim: 1 GiB, 2 GiB (mallopt takes an int)
DEFAULT_THRESHOLD_BYTES = 128 * 1024  # both of glibc's, before it raises them

# Whether this process's allocator was told to keep freed blocks (`apply_freed_memory_choice`).
kept_here = False


def choose_freed_memory(release: bool) -> None:
    """This process and the workers it spawns: return freed blocks to the system (True, glibc's
    default) or keep them for reuse."""
    os.environ[RELEASE_FREED_MEMORY] = "1" if release else "0"
    apply_freed_memory_choice()


def apply_freed_memory_choice() -> bool:
    """The choice in the environment (keep when none was made), in this process: whether the
    allocator now keeps freed blocks. Where the C library is not glibc it is left as it is.
    Released after being kept, both thresholds go back to glibc's starting values (128 KiB;
    its dynamic raising of them does not come back)."""
    global kept_here
    release = os.environ.get(RELEASE_FREED_MEMORY) == "1"
    if kept_here == (not release):  # already as asked
        return kept_here
    mallopt = glibc_mallopt()
    if mallopt is not None:
        mmap, trim = (DEFAULT_THRESHOLD_BYTES,) * 2 if release else KEPT_THRESHOLDS
        told = mallopt(M_MMAP_THRESHOLD, mmap) and mallopt(M_TRIM_THRESHOLD, trim)
        kept_here = bool(told) and not release
    return kept_here


def glibc_mallopt():
    """glibc's `mallopt(int, int) -> int`, or None where the C library is another."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is not None:
        mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return mallopt
