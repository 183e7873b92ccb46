"""The extra peak memory of one call: the most tensor memory it holds at once beyond what it
started with, in MiB. On a GPU torch's allocator counts it (`max_memory_allocated`); on the
CPU torch.profiler's memory events do. The CPU figure had been the process's resident set
(VmHWM after a reset), which said more of glibc than of the call: a freed block reused in
place counted 0 and a fresh mapping counted whole (bias-free SDPA read 0 MiB extra at
n=1024, so TUPE-R's 32 MiB there "failed" a memory target by 32x)."""

from __future__ import annotations

import os

import torch


def extra_peak_mib(call) -> float:
    """The most memory `call` holds at once beyond what it started with (MiB), as torch's
    CPU allocator counts it: every allocation and release of the call in the order they
    happened (torch.profiler's allocation events, the ones its memory timeline reads).
    Through `posattn.kernels.triton_aot.stand_in_gpu` a call allocates what it would on a
    GPU and its kernels write nothing, so this is `posattn bench`'s GPU figure without a
    GPU (for one attention call at n = 8192, bf16, B = H = 8: T5's 265 MiB and TUPE-R's 745
    with q and k folded, as an H200 measured them). Call it once first (what a first call
    builds and keeps is not the call's)."""
    from torch._C._profiler import _EventType
    from torch.profiler import ProfilerActivity, profile

    # Kineto prints two lines per profile ("profiler_start", "profiler_stop") below level 6.
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as profiled:
        call()
    # Each op's own figure nets what it allocates and frees inside, counted at its start or
    # end: a backward written in Python (an autograd Function freeing block after block)
    # read as if it held every block at once. The allocation events carry their own times.
    changes, nodes = [], list(profiled.profiler.kineto_results.experimental_event_tree())
    while nodes:
        node = nodes.pop()
        if node.typed[0] == _EventType.Allocation:
            changes.append((node.start_time_ns, node.typed[1].alloc_size))
        nodes.extend(node.children)
    held = peak = 0
    for _, size in sorted(changes):
        held += size
        peak = max(peak, held)
    return peak / 2**20


def call_peak_mib(call) -> float:
    """`call`'s extra peak memory on the device it runs on: the GPU's allocated bytes where
    torch has a GPU, else the CPU allocator's through the profiler (`extra_peak_mib`). The
    call runs once more for it, outside any timing."""
    if not torch.cuda.is_available():
        return extra_peak_mib(call)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    call()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**20
