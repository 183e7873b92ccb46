"""Position probes: synthetic tasks that isolate one positional skill each, a small model per
(task, encoding, seed), accuracy against length (`posattn probe`)."""

from .settings import ProbeSettings
from .tasks import TASKS, ProbeTask, probe_task

__all__ = ["TASKS", "ProbeSettings", "ProbeTask", "probe_task"]
