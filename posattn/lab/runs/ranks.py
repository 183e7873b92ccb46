"""The ranks of a torchrun / accelerate launch, and independent runs spread over them.

Many small runs (fine-tuning's task x seed x learning rate) train faster side by side, one
per rank, than one after the other as tiny data-parallel jobs: `share` gives each rank its
runs, `alone` makes the Trainer inside treat its rank as a single process, and `gather`
brings every rank's results together so that the main process alone writes them."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist

# What torchrun / accelerate launch tell a process about the others.
LAUNCH_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK")


def rank() -> int:
    return int(os.environ.get("RANK", "0"))


def world_size() -> int:
    """Processes of this run (torchrun sets WORLD_SIZE); 1 without torchrun."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0"))


def join_process_group() -> None:
    """Under a launcher: the process group (gloo on CPU; NCCL for tensors on GPUs, gloo for
    objects), each rank on its own GPU. One process: nothing."""
    if world_size() == 1 or dist.is_initialized():
        return
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank())
        dist.init_process_group(backend="cuda:nccl,cpu:gloo")
    else:
        dist.init_process_group(backend="gloo")


def barrier() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def share(items: list) -> list:
    """This rank's part of `items`: every world_size-th one from its rank on."""
    return list(items)[rank() :: world_size()]


def gather(local: list) -> list:
    """Every rank's `local` items, concatenated in rank order, on every rank."""
    if world_size() == 1:
        return list(local)
    join_process_group()
    parts: list[Any] = [None] * world_size()
    dist.all_gather_object(parts, list(local))
    return [item for part in parts for item in part]


def rank_device() -> torch.device:
    """The device a one-process run on this rank trains on: its own GPU, or the CPU."""
    return torch.device("cuda", local_rank()) if torch.cuda.is_available() else torch.device("cpu")


@contextmanager
def alone() -> Iterator[torch.device]:
    """A Trainer built and trained inside sees one process: the launch variables are hidden
    and accelerate's shared state is reset on the way in and out (the next Trainer of the
    launch, a data-parallel pretraining, sets it up for every rank again). Yields the device
    of this rank (rank_device, read before the variables are hidden)."""
    from accelerate.state import AcceleratorState

    device = rank_device()
    saved = {name: os.environ.pop(name) for name in LAUNCH_VARIABLES if name in os.environ}
    AcceleratorState._reset_state(reset_partial_state=True)
    try:
        yield device
    finally:
        os.environ.update(saved)
        AcceleratorState._reset_state(reset_partial_state=True)


def place_on_device(args, device: torch.device) -> None:
    """Train a one-process run (built inside `alone`) on this rank's GPU: transformers puts
    every single-process run on cuda:0. `TrainingArguments.device` is a cached property, set
    here before the Trainer reads it."""
    if device.type == "cuda":
        torch.cuda.set_device(device)
        args.__dict__["_setup_devices"] = device
