"""How posattn runs, in one place: which attention kernel a module gets by default, whether
low-rank biases are folded into q and k, whether content x position terms use offset windows,
and when `auto` leaves SDPA for the Triton kernel or FlexAttention. None of these changes a
result beyond rounding; each default is the measured faster choice (docs/cost.md, "Cost,
measured").

    import posattn.execution as execution

    execution.current()                    # the choices in force here
    execution.set(fold=False)              # process-wide, until changed again
    with execution.choose(skew=True):      # this thread / task only, restored on exit
        ...

`choose` keeps its choices in a `contextvars.ContextVar`: a choice made in one thread (or
asyncio task) is not seen by another, and nested `choose` blocks restore in order, also when
the block raises. `set` changes the process-wide defaults that every thread sees where it has
not chosen otherwise.

Choices:
  kernel: the attention kernel of a `MultiHeadAttention` built with kernel=None (a name from
      `posattn.kernels.KERNELS`, user kernels included); `PosAttnConfig.kernel` names its
      kernel explicitly and is not affected.
  fold: fold a layer's low-rank bias factors (DIET-ABS, TUPE-A) into q and k for the fused
      kernels (True), add them as a [H, n, n] bias (False), or None: the measured default,
      folding in GPU training only. H100, bf16, B=8, H=8, forward + backward: DIET-ABS at
      n=4096 4.8 ms / 1154 MiB folded against 14.4 ms / 3010 MiB as a bias, at n=1024 1.38
      against 1.45 ms; forward alone and on the 2-core CPU (where the fold doubles the head size
      of both products) the bias measured as fast or faster. The default does not fold where
      a learned bias stays beside the factors as a tensor (TUPE-R's T5 table through SDPA,
      DIET's segments inside attention: `MultiHeadAttention.learned_rest`): its [B, H, n, n]
      gradient stays either way, and the fold would only double q's and k's width (H100,
      SDPA, training over bias-free flash at n = 1024 / 4096 / 8192: TUPE-R folded 7.17 /
      10.53 / 12.10x against T5's bias alone 2.86 / 6.63 / 7.64x; BERT-small at n=512, +45.9%
      over `learned` against T5's -0.4%). Not yet measured unfolded on a GPU. kernel="flex"
      reads such a table itself (no such gradient) and keeps the fold; kernel="triton" folds
      where it serves the layer, whatever this says.
  skew: content x position terms (Shaw, DeBERTa) by offset windows (`skew`, True) or by index
      gather/scatter (False); None: the measured default, gather on CPU (2 cores, Shaw, n=1024,
      B=8, H=8, train: 2.98x against 4.02x of bias-free SDPA) and in GPU inference, skew for
      GPU training, where the gather's backward scatters with atomics (H100, bf16, Shaw train:
      3.0 ms against 16.9 ms at n=1024, 33 ms against 619 ms at n=4096).
  triton_threshold_bytes: above this many bytes of a [B, H, n, n] bias gradient, kernel "auto"
      hands a learned Toeplitz bias on GPU to kernel "triton" where it serves it (T5, DIET-REL,
      KERPLE; TUPE-R with its absolute part folded into q and k and its [CLS] untie). H100,
      bf16, B=8, H=8, forward + backward over bias-free flash SDPA, n=4096: T5 triton 3.30x /
      132 MiB against SDPA's 6.63x / 3010 MiB, TUPE-R 5.69x against 10.53x; at n=1024 (128 MiB
      of gradient, not above) SDPA 2.86x and 3.41x, triton 3.28x and 3.14x in two runs: a tie.
      BERT-small training steps over `learned`, n=2048 (512 MiB per layer): T5 +21% through
      triton against +54% through SDPA, TUPE-R +50% against +113%, DIET-REL +25% against
      +74%; at n=512 SDPA is faster (T5 -0.4% against +25.5%: the kernel's host-side
      launches dominate there).
  triton_inference_threshold_bytes: without gradients (inference), above this many bytes of
      a Toeplitz bias written out ([H, n, n] in float32), kernel "auto" hands its table on GPU
      to kernel "triton" where it serves it (not TUPE-R, whose folded forward is the slower).
      H100, bf16, B=8, H=8, forward over bias-free flash SDPA, n=8192 (2 GiB of bias): T5
      triton 2.55x / 70 MiB against SDPA's 2.88x / 3137 MiB, DIET-REL 2.51x against 2.93x,
      KERPLE 2.65x against 3.02x, ALiBi 2.61x / 69 MiB against 2.50x / 1088 MiB; at n=4096
      (512 MiB, not above) a tie (T5 2.77x against 2.71x, ALiBi 3.00x against 2.51x).
  flex_threshold_bytes: above this many bytes of a [B, H, n, n] bias gradient, kernel "auto"
      leaves SDPA on GPU for any other learned bias: FlexAttention, which trades SDPA's speed
      for memory (H100, bf16, B=8, H=8, T5 bias,
      forward + backward: at n=1024 flex 6.00x / 121 MiB vs SDPA 5.90x / 1112 MiB of the
      bias-free time and memory; at n=4096 flex 23.5x / 1.6 GiB vs SDPA 21.0x / 16.7 GiB;
      low-rank biases (TUPE-A, DIET-ABS) ran about twice as long in flex at n=4096).
  recompute_threshold_bytes: above this many bytes of a [B, H, n, n] bias gradient, kernel
      "auto" trains a learned bias on CPU with the recomputing backward (`kernels.fused_bias`:
      the table's gradient by diagonal sums where the bias is Toeplitz) instead of SDPA's math
      path. 2-core CPU, one thread, float32, forward + backward over bias-free SDPA: B=8, H=8,
      d_h=64, T5 at n=512 / 1024 1.29 / 1.27 against 1.76 / 2.03 (`posattn bench --kernels
      auto,sdpa-lowmem`), at n=256 1.32 against 1.59; below 8 MiB the math path's fewer calls
      win (n=128: 1.86 against 1.33; B=32, H=4, d_h=32, n=128: 1.41 against 1.38).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, fields, replace
from typing import Any

import torch

from .errors import invalid, require, require_choice


@dataclass(frozen=True)
class Choices:
    """The execution choices in force (see the module docstring for each)."""

    kernel: str = "auto"
    fold: bool | None = None
    skew: bool | None = None
    triton_threshold_bytes: int = 2**28
    triton_inference_threshold_bytes: int = 2**30
    flex_threshold_bytes: int = 2**30
    recompute_threshold_bytes: int = 2**23


NAMES = tuple(field.name for field in fields(Choices))

# Process-wide choices (`set`) and this context's overrides (`choose`): a dict of the names
# chosen, so that `set` inside a `choose` block still changes the names the block left alone.
_process = Choices()
_chosen: ContextVar[dict[str, Any] | None] = ContextVar("posattn_execution", default=None)


def _check_measured_or_forced(name: str, value: Any) -> None:
    require(
        value is None or isinstance(value, bool),
        name,
        value,
        "None (the measured default), True or False",
    )


def validate(choices: dict[str, Any]) -> None:
    """Raise PosAttnConfigError naming the first unknown choice or bad value."""
    for name, value in choices.items():
        if name not in NAMES:
            raise invalid(name, value, f"not an execution choice; expected one of {NAMES}")
        if name == "kernel":
            from .kernels.registry import KERNELS  # the live registry, user kernels included

            require_choice("kernel", value, tuple(KERNELS))
        elif name in ("fold", "skew"):
            _check_measured_or_forced(name, value)
        elif name.endswith("_threshold_bytes"):
            require(
                isinstance(value, int) and not isinstance(value, bool) and value >= 0,
                name,
                value,
                "an integer number of bytes >= 0",
            )


def parse(text: str) -> dict[str, Any]:
    """Choices from the command line's "name=value" (fold=true, skew=none, kernel=sdpa,
    triton_threshold_bytes=268435456), validated: true / false / none for fold and skew,
    integers for the thresholds."""
    name, separator, value = text.partition("=")
    name = name.strip()
    require(bool(separator) and bool(name), "--choose", text, "NAME=VALUE")
    value = value.strip()
    if name in ("fold", "skew"):
        words = {"true": True, "false": False, "none": None}
        require(value.lower() in words, name, value, "true, false or none (the measured default)")
        parsed: Any = words[value.lower()]
    elif name.endswith("_threshold_bytes"):
        require(value.isdigit(), name, value, "an integer number of bytes >= 0")
        parsed = int(value)
    else:
        parsed = value
    validate({name: parsed})
    return {name: parsed}


def current() -> Choices:
    """The choices in force in this context: the process-wide ones with this context's
    `choose` overrides on top."""
    chosen = _chosen.get()
    return replace(_process, **chosen) if chosen else _process


def set(**choices: Any) -> Choices:
    """Change choices process-wide; returns the new process-wide choices."""
    global _process
    validate(choices)
    _process = replace(_process, **choices)
    return _process


@contextmanager
def choose(**choices: Any) -> Iterator[Choices]:
    """Within the block (this thread or task only): these choices; the previous ones on exit,
    also when the block raises. Yields the choices in force inside the block."""
    validate(choices)
    token = _chosen.set({**(_chosen.get() or {}), **choices})
    try:
        yield current()
    finally:
        _chosen.reset(token)


@torch.compiler.assume_constant_result
def _choice(name: str) -> Any:
    """One choice in force. torch.compile reads it once, when it traces: dynamo cannot trace a
    ContextVar, so a compiled graph keeps the choices in force at its tracing (choose them
    before compiling)."""
    return getattr(current(), name)


def _measured(forced: bool | None, device: torch.device) -> bool:
    if forced is not None:
        return forced
    return device.type == "cuda" and torch.is_grad_enabled()


def use_fold(device: torch.device, learned_rest: bool = False) -> bool:
    """Fold low-rank bias factors into q and k on this device now (`fold`); `learned_rest`:
    a bias that takes a gradient stays beside them (`fold`'s default does not fold then)."""
    forced = _choice("fold")
    return _measured(forced, device) and (forced is not None or not learned_rest)


def use_skew(device: torch.device) -> bool:
    """Content x position terms by offset windows on this device now (`skew`)."""
    return _measured(_choice("skew"), device)


def triton_threshold_bytes() -> int:
    return _choice("triton_threshold_bytes")


def triton_inference_threshold_bytes() -> int:
    return _choice("triton_inference_threshold_bytes")


def flex_threshold_bytes() -> int:
    return _choice("flex_threshold_bytes")


def recompute_threshold_bytes() -> int:
    return _choice("recompute_threshold_bytes")


__all__ = [
    "NAMES",
    "Choices",
    "choose",
    "current",
    "flex_threshold_bytes",
    "parse",
    "recompute_threshold_bytes",
    "set",
    "triton_inference_threshold_bytes",
    "triton_threshold_bytes",
    "use_fold",
    "use_skew",
    "validate",
]
