"""The kernel contract and the live registry of kernel names (built-in and user kernels).
Kept apart from the kernels themselves so that what checks a name (`posattn.execution`, the
config) needs no kernel module."""

from __future__ import annotations

from typing import Protocol

from torch import Tensor

from ..errors import invalid, require, require_choice


class Kernel(Protocol):
    """softmax(q k^T * scale + bias, masked) v, with dropout on the probabilities.

    A kernel that sets the attribute `reads_bias_tables = True` is called with bias=None and a
    keyword `tables` (`posattn.kernels.table_bias.TableBias`) describing the bias instead."""

    def __call__(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        *,
        mask: Tensor | None,
        bias: Tensor | None,
        scale: float,
        dropout_p: float = 0.0,
    ) -> Tensor: ...


# The live registry: posattn.kernels registers the built-in kernels, `register_kernel` adds
# more, and every `kernel=` name is checked against it when used.
KERNELS: dict[str, Kernel] = {}


def register_kernel(name: str, fn: Kernel, *, overwrite: bool = False) -> None:
    """Make `fn` available as kernel=`name` (MultiHeadAttention, PosAttnConfig, set_kernel).
    An existing name is replaced only with overwrite=True."""
    require(isinstance(name, str) and name != "", "name", name, "a non-empty string")
    require(callable(fn), "fn", fn, "a callable following posattn.kernels.Kernel")
    if name in KERNELS and not overwrite:
        raise invalid(
            "name", name, "a kernel name not registered yet (pass overwrite=True to replace it)"
        )
    KERNELS[name] = fn


def kernel_names() -> tuple[str, ...]:
    """The registered kernel names, user kernels included."""
    return tuple(KERNELS)


def get_kernel(name: str) -> Kernel:
    require_choice("kernel", name, kernel_names())
    return KERNELS[name]
