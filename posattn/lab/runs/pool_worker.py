"""What every pool worker of the lab sets up first (`compare`'s cells, the probe grid's): one
torch thread (small models on a shared CPU run fastest that way; more threads mostly wait on
each other), the run's denormal and freed-memory choices, and an exit when the command that
spawned it dies (`worker_exit`)."""

from __future__ import annotations

import torch

from .denormals import apply_denormal_choice
from .freed_memory import apply_freed_memory_choice
from .worker_exit import end_with_parent


def start_pool_worker() -> None:
    """A ProcessPoolExecutor initializer (a module-level function: workers are spawned)."""
    end_with_parent()
    torch.set_num_threads(1)
    apply_denormal_choice()
    apply_freed_memory_choice()
