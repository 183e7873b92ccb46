"""What a step asks of the host, seen on the CPU: on a GPU, reading a device value on the host
(`.item()`, `bool(t)`, `nonzero`, ...) or copying host data to the device without pinned
memory (`torch.tensor([...], device=...)`, `.to(device)` of a CPU tensor) makes the host wait
for the GPU's queued work - the host can no longer run ahead, and at short lengths, where
calls wait on the host, every such wait is paid in full. torch flags them only on a GPU
(`torch.cuda.set_sync_debug_mode`); the ops that cause them are dispatched on any device, so
a dispatch mode records them here."""

from __future__ import annotations

import collections
import traceback

from torch.utils._python_dispatch import TorchDispatchMode

# Ops whose result the host needs before it can go on (torch's sync debug mode warns of each).
DEVICE_READS = frozenset(
    {
        "_local_scalar_dense",  # .item(), bool(t), float(t), int(t)
        "is_nonzero",
        "equal",
        "nonzero",
        "masked_select",
        "repeat_interleave",
        "_unique2",
        "unique_dim",
        "unique_consecutive",
    }
)


class HostReads(TorchDispatchMode):
    """Records, while active, each device read (`DEVICE_READS`) and each tensor made from a
    host list (`lift_fresh`: `torch.tensor([...])`, which is then copied to the device; a
    Python scalar stays a scalar on any device, and an empty list copies nothing). `found`:
    Counter of (op, the innermost posattn frame that asked). On the CPU it cannot see a read
    that dispatches nothing there (`.tolist()`, `.cpu()` of a CPU tensor)."""

    def __init__(self) -> None:
        super().__init__()
        self.found: collections.Counter = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        name = func._schema.name.split("::")[-1]
        host_data = name in ("lift_fresh", "lift_fresh_copy") and result.dim() and result.numel()
        if name in DEVICE_READS or host_data:
            self.found[(name, _asker())] += 1
        return result


# Helpers that read on behalf of their caller, who is named instead.
READS_FOR_CALLER = ("tracing.py",)


def _asker() -> str:
    """file:function of the innermost frame in posattn's package (past `READS_FOR_CALLER`),
    or '?'."""
    for frame in reversed(traceback.extract_stack()):
        if "/posattn/" in frame.filename and "/tests/" not in frame.filename:
            where = frame.filename.rsplit("/posattn/", 1)[-1]
            if where not in READS_FOR_CALLER:
                return f"{where}:{frame.name}"
    return "?"
