"""The tensors a model's forward takes - token indices, padding masks, labels - checked
before use, so that a wrong one is named instead of failing inside torch or being misread."""

from __future__ import annotations

import torch
from torch import Tensor

from ..errors import invalid, require
from ..tracing import read_on_host

# What nn.Embedding indexes with.
INDEX_DTYPES = (torch.int64, torch.int32)


def require_index_dtype(name: str, indices: Tensor) -> None:
    """Token or segment indices: torch's own error ("Expected tensor for argument #1
    'indices'") named neither the argument nor a way out."""
    require(
        indices.dtype in INDEX_DTYPES,
        f"{name}.dtype",
        indices.dtype,
        "torch.int64 or torch.int32 (indices into an embedding table)",
    )


def integer_labels(name: str, labels: Tensor) -> Tensor:
    """Class indices (token ids, classes) as int64, what cross-entropy takes (-100: no label);
    an integer tensor of another width (int32 from numpy, say) is widened, a float or bool
    one refused."""
    dtype = labels.dtype
    integer = not (dtype.is_floating_point or dtype.is_complex or dtype == torch.bool)
    require(integer, f"{name}.dtype", dtype, "an integer tensor of class indices (-100: ignored)")
    return labels.long()


def require_label_shape(name: str, labels: Tensor, positions: tuple[int, ...]) -> None:
    """One label per position the logits score, [batch, positions] (a shape read, no device
    value). Without it a wrong shape was an IndexError inside the loss."""
    require(
        tuple(labels.shape) == tuple(positions),
        f"{name}.shape",
        tuple(labels.shape),
        f"one label per position of the logits, [batch, positions] {tuple(positions)}",
    )


def check_padding_mask(name: str, mask: Tensor | None, shape: tuple[int, int], what: str) -> None:
    """mask: None, or [B, n] = `shape` (`what` says what B and n count), nonzero (or True) for
    a real token. A float mask must hold 1 and 0 only: an additive mask (0 where visible, -inf
    or a large negative number where hidden), which attention functions elsewhere take, would
    be read inverted here - its 0s as padding, its negatives as real tokens - and silently
    attend to the padding alone. Only a float mask is read on the host (bool and integer
    masks cannot be additive)."""
    if mask is None:
        return
    if tuple(mask.shape) != shape:
        raise invalid(f"{name}.shape", tuple(mask.shape), f"must be {shape} ({what})")
    if not mask.is_floating_point() or not mask.numel():
        return
    binary = ((mask == 0) | (mask == 1)).all()
    allowed = (
        "1 for a real token and 0 for padding (or a bool mask, True = real token); an "
        "additive mask (0 = attend, -inf = hidden) would be read inverted: pass (mask == 0)"
    )
    if torch.compiler.is_compiling():
        # Reading the values out would break the graph: the check runs inside it.
        torch._assert_async(binary, f"{name} must hold {allowed}")
    elif read_on_host(binary) == (False,):
        low, high = float(mask.min()) + 0.0, float(mask.max()) + 0.0  # + 0.0: no '-0'
        raise invalid(name, f"a {mask.dtype} mask with values in [{low:g}, {high:g}]", allowed)
