"""Whether posattn's ops run under a transform that sees no concrete values.

torch.compile / torch.export trace a graph, and torch.func's transforms (grad, vmap, jvp,
jacrev, jacfwd, hessian) run the ops on wrapped tensors. Under either, posattn gives up what
only eager autograd on real tensors allows:

- its custom autograd Functions (the CPU recomputing attention backward, the pair rotation,
  the spread by offset, the transposed copy): torch.func takes an autograd.Function only with
  a `setup_context` and a vmap rule, and none of them has a forward-mode derivative, so the
  plain differentiable formula runs instead (the same values up to rounding);
- host reads of tensor values (input checks, the fast path for default positions) and
  data-dependent shapes (the masked LM's head on the labelled rows only), which vmap cannot
  batch and a graph cannot hold;
- caches keyed by storage addresses, which a wrapped tensor does not have and which would
  outlive the transform;
- where a trace takes the length as symbolic (`is_symbolic`), any op that needs it as an
  int or asks whether it equals a bound, which would fix it: one graph serves every length.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.fx.experimental.symbolic_shapes import has_static_value


def under_func_transform() -> bool:
    """Whether a torch.func transform (grad, vmap, jvp, jacrev, ...) is active: torch's own
    test for whether an autograd.Function must follow the functorch protocol."""
    return torch._C._are_functorch_transforms_active()


def under_forward_mode() -> bool:
    """Whether a torch.func transform in forward mode (jvp, jacfwd, hessian) is active: the
    fused SDPA kernels have no forward-mode derivative, where grad and vmap take them. While
    torch.compile traces a transform, yes: dynamo cannot trace the interpreter stack (a graph
    break there failed the compile of vmap(grad)), and the math path serves every mode."""
    if not under_func_transform():
        return False
    if torch.compiler.is_compiling():
        return True
    return "Jvp" in active_transforms()


def active_transforms() -> set[str]:
    """The kinds of torch.func's active transform levels ("Grad" for grad, vjp, jacrev;
    "Vmap"; "Jvp" for jvp, jacfwd; hessian has both), eagerly: functorch's interpreter stack,
    which dynamo cannot trace."""
    if not under_func_transform():
        return set()
    from torch._functorch.pyfunctorch import retrieve_all_functorch_interpreters

    return {level.key().name for level in retrieve_all_functorch_interpreters()}


def requires_grad_beneath(tensor: Tensor) -> bool:
    """Whether `tensor`, or what torch.func's wrappers hold beneath it, requires grad: under
    vmap a batched tensor says False while autograd outside the transform tracks what it
    wraps (Shaw's and DeBERTa's biases, made from the queries and keys)."""
    from torch._C._functorch import get_unwrapped, is_functorch_wrapped_tensor

    while not tensor.requires_grad and is_functorch_wrapped_tensor(tensor):
        tensor = get_unwrapped(tensor)
    return tensor.requires_grad


def traced() -> bool:
    """torch.compile / torch.export tracing, torch.jit.trace, or a torch.func transform: no
    host reads of values, no data-dependent shapes, no caches keyed by storage (a trace
    records a host read as a constant, and a custom autograd Function as an op it cannot
    replay)."""
    return torch.compiler.is_compiling() or torch.jit.is_tracing() or under_func_transform()


def read_on_host(*tensors: Tensor) -> tuple | None:
    """The values of one-element tensors as Python scalars, for an input check; None where
    torch.func's vmap batches them (a value per example, which no host read can give: the
    check is left out there, as a compiled graph leaves it to the device)."""
    sizes = [t.numel() for t in tensors]
    if any(size != 1 for size in sizes):  # else `item`'s own error would pass for vmap's
        raise ValueError(f"read_on_host reads one-element tensors, not {sizes} elements")
    try:
        return tuple(t.item() for t in tensors)
    except RuntimeError:
        if under_func_transform():
            return None
        raise


def is_symbolic(length) -> bool:
    """Whether a length is traced as symbolic, one graph for every value (torch.export's
    Dim, torch.compile's dynamic shapes). torch's own test: under dynamo a symbolic length
    passes `isinstance(length, int)` and fails `isinstance(length, torch.SymInt)`. A tensor
    (torch.jit.trace records sizes as tensors) takes the fixed-length path, as it did."""
    return not isinstance(length, Tensor) and not has_static_value(length)


def leading(tensor: Tensor, dim: int, length) -> Tensor:
    """`tensor.narrow(dim, 0, length)`: a table's first `length` entries along `dim`. Where
    the length is traced as symbolic (torch.export's Dim, compile's dynamic shapes), a copy:
    a view along an inner dimension leaves torch asking whether `length` is the whole
    dimension (is the view contiguous?), a guard that cuts that length out of the graph's
    range."""
    if is_symbolic(length):
        return tensor.index_select(dim, torch.arange(length, device=tensor.device))
    return tensor.narrow(dim, 0, length)
