"""Subnormal floats on the CPU: flushed to zero in posattn's commands unless asked otherwise.

Attention whose logits span more than about 87 (ALiBi's distance penalty, peaked trained
heads) turns probabilities into float32 subnormals, and arithmetic on them is slow on some
CPUs: on a 2-core Intel Xeon, ALiBi's forward + backward (B=8, H=8, d_h=64, one thread) ran
2.15x / 2.94x bias-free SDPA at n=512 / 1024 with subnormals and 1.08x / 1.15x flushed. Their
values lie below 1.2e-38, far under any tolerance of a probability or a gradient.

The choice travels in the environment so that the worker processes a command spawns apply it
too (threads inherit the setting of the thread that starts them; processes do not).
"""

from __future__ import annotations

import os

import torch

KEEP_DENORMALS = "POSATTN_KEEP_DENORMALS"


def choose_denormals(keep: bool) -> None:
    """This process and the workers it spawns: keep subnormals (True) or flush them."""
    os.environ[KEEP_DENORMALS] = "1" if keep else "0"
    apply_denormal_choice()


def apply_denormal_choice() -> None:
    """The choice in the environment (flush when none was made), in this process."""
    torch.set_flush_denormal(os.environ.get(KEEP_DENORMALS) != "1")
