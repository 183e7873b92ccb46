"""The process settings a CPU timing depends on beyond the code, recorded beside it: torch's
thread count, whether freed memory is kept for reuse, and the environment variables that
change threading and memory allocation.

Measured on the 2-core development CPU: several torch threads on a loaded machine ran 8x
slower than one; and with glibc's malloc told to keep freed blocks
(`MALLOC_MMAP_THRESHOLD_`, `MALLOC_TRIM_THRESHOLD_`) the forward of a T5 attention call at
n=1024 took 1.12-1.13x bias-free SDPA's time instead of 1.20-1.22x (its [H, n, n] bias, a
fresh 32 MiB tensor each call, no longer page-faulted in; docs/cost.md "Learned biases on the CPU").
"""

from __future__ import annotations

import os

import torch

from ..runs import freed_memory

# Threading (OpenMP, MKL) and the allocator: glibc's tunables, or another malloc preloaded.
ENVIRONMENT_NAMES = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "MALLOC_MMAP_THRESHOLD_",
    "MALLOC_TRIM_THRESHOLD_",
    "MALLOC_ARENA_MAX",
    "GLIBC_TUNABLES",
    "LD_PRELOAD",
)


def process_settings() -> dict:
    """{"threads": torch's intra-op threads, "freed_memory": "kept" where posattn told glibc
    to keep freed blocks (`posattn.lab.runs.freed_memory`, every command's default) else
    "released", "environment": those of ENVIRONMENT_NAMES set}."""
    environment = {name: os.environ[name] for name in ENVIRONMENT_NAMES if name in os.environ}
    freed = "kept" if freed_memory.kept_here else "released"
    return {"threads": torch.get_num_threads(), "freed_memory": freed, "environment": environment}


def settings_line(context: dict) -> str:
    """The context's threads and environment as one sentence for a report ("" where the
    context predates them)."""
    if "threads" not in context:
        return ""
    threads = context["threads"]
    line = f"{threads} torch thread{'s' if threads != 1 else ''}"
    if "freed_memory" in context:
        line += f"; freed CPU memory {context['freed_memory']}"
    environment = context.get("environment") or {}
    if environment:
        line += "; " + ", ".join(f"{name}={value}" for name, value in environment.items())
    return line + "."
