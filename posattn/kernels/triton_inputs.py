"""The small tensors a call of kernel="triton" hands its kernels: the offset table's aligned
copies, stand-ins for absent arguments, each kept per device and shape where a call would
otherwise make it anew on every launch (at n = 1024 a GPU call waits on the host)."""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from ..kept_tensors import outside_inference_mode
from .triton_settings import rounded_up


def kept_per_device(make):
    """`make(device, *key)` made once per arguments and kept, outside inference mode (so that a
    training call may save it for backward); inside a CUDA graph's capture made fresh, since
    memory allocated there belongs to the graph's pool. For the small tensors a call would
    otherwise make on every launch (at n=1024 a GPU call waits on the host). Made in the
    graph while torch.compile traces, as `t5.cached_buckets` is (dynamo ignores the cache and
    warns of "silent incorrectness" at every model compiled with the kernel)."""
    kept = functools.lru_cache(maxsize=64)(outside_inference_mode(make))

    @functools.wraps(make)
    def once(device: torch.device, *key):
        if torch.compiler.is_compiling() or (
            device.type == "cuda" and torch.cuda.is_current_stream_capturing()
        ):
            return make(device, *key)
        return kept(device, *key)

    once.cache_clear = kept.cache_clear
    return once


def kept_in(kept: dict | None, sources: tuple, key: tuple, make):
    """make(), kept in `kept` (a dict that lives as long as one forward's terms:
    `LayerTerms.kernel_inputs`, which every layer of the forward shares) under `key`, whose
    first entry names the value, and handed out again while a layer asks with the same key
    and the same `sources` (the tensors it is made from, the very objects, unchanged since:
    their versions are part of the key; None entries allowed):
    what a call derives from the terms alone (the table's copies, the factors scaled) is made
    once per forward instead of once per layer (at n <= 1024 a GPU call waits on the host;
    BERT-small's step: tests/test_triton_stand_in.py counts the ops). The key holds the grad
    and inference modes, so that a value made without gradients or as an inference tensor
    never stands in for one made otherwise. Made afresh without a dict, while torch.compile
    traces (the ops belong in its graph), inside a CUDA graph's capture (its memory is the
    graph's) and from inference tensors (no version counter: as `masks.derived_once`'s
    callers do)."""
    if kept is None or torch.compiler.is_compiling() or _unkeepable(sources):
        return make()
    versions = tuple(None if t is None else t._version for t in sources)
    key = (*key, versions, torch.is_grad_enabled(), torch.is_inference_mode_enabled())
    found = kept.get(key[0])
    if found is not None and found[0] == key and _same(found[1], sources):
        return found[2]
    value = make()
    kept[key[0]] = (key, sources, value)
    return value


def _same(kept: tuple, sources: tuple) -> bool:
    return len(kept) == len(sources) and all(a is b for a, b in zip(kept, sources, strict=True))


def _unkeepable(sources: tuple) -> bool:
    """Whether a value made from `sources` is made afresh: an inference tensor among them
    (it keeps no version counter, so a write in place would go unseen), or a capture on
    their device."""
    present = [t for t in sources if t is not None]
    if any(t.is_inference() for t in present):
        return True
    # Asked once, not per source: a call of its own on the host path.
    return any(t.is_cuda for t in present) and torch.cuda.is_current_stream_capturing()


def table_copies(
    table: Tensor, longest_run: int, scale: float = 1.0, with_reversed: bool = False
) -> Tensor:  # fmt: skip
    """[H, L] -> [H, C, W] float32, C = 4, or 8 `with_reversed`: copy c < 4 holds
    scale * table[:, c:], copy 4 + c the same of the table reversed (R[x] = table[:, L-1-x],
    which dK/dV reads key-major), each zero past its end and W (a multiple of 16) at least
    L + longest_run, so that a run of either starting at any index s begins on a 16-byte
    boundary in copy s % 4 (at s - s % 4) and a run of up to `longest_run` values past the end
    stays inside (its scores are hidden anyway). One gather from the table followed by a zero,
    by an index kept per shape, then the scale in place: three ops a call, where a pad, a
    scaling copy of four windows and a second gather for the reversed copies took five (at
    n=1024 a GPU call is bound by the host, not by these bytes)."""
    heads, length = table.shape
    width = rounded_up(length + longest_run, 16)
    index = copies_index(table.device, length, width, with_reversed)
    extended = torch.cat((table.float(), zero_column(table.device, heads)), dim=1)
    return torch.index_select(extended, 1, index).mul_(scale).view(heads, -1, width)


@kept_per_device
def copies_index(device: torch.device, length: int, width: int, with_reversed: bool) -> Tensor:
    """[C * width] int64 into the table followed by one zero (index `length`): copy c's entry x
    is table[c + x], copy 4 + c's is table[length - 1 - c - x], or the zero past either's end.
    Made on the device itself: a copy from the host could not run inside a capture."""
    shifts = torch.arange(4, device=device)[:, None]
    position = shifts + torch.arange(width, device=device)[None, :]
    if with_reversed:
        position = torch.cat((position, length - 1 - position))
    inside = (position >= 0) & (position < length)
    return torch.where(inside, position, length).flatten()


@kept_per_device
def zero_column(device: torch.device, heads: int) -> Tensor:
    """[heads, 1] float32 zeros: the entry past the table's end that `table_copies` reads."""
    return torch.zeros(heads, 1, dtype=torch.float32, device=device)


@kept_per_device
def absent(device: torch.device, dtype: torch.dtype, dims: int = 1) -> Tensor:
    """A one-element stand-in for a tensor argument whose flag is off (the kernels neither read
    nor write it), made once per device and dtype: made per call, each was a fill kernel
    launched from the host (10 of a training call without a table, on the H100 profile)."""
    return torch.zeros((1,) * dims, dtype=dtype, device=device)


def last_dim_contiguous(x: Tensor) -> Tensor:
    return x if x.stride(-1) == 1 else x.contiguous()


def empty_in_layout_of(x: Tensor, last: int) -> Tensor:
    """An empty [B, H, n, last] in x's order of heads and rows (x [B, H, n, d]): where x's heads
    lie inside its rows, as the heads a model splits off its projections do ([B, n, H, d] read
    as [B, H, n, d]), the same, so that merging the heads back into [B, n, H * d] (the output)
    or splitting them off again (q's and k's gradients) is a view. Allocated [B, H, n, last]
    instead, each of those was a copy of the whole tensor: three per layer in training, one
    in inference (counted on BERT-small's step: tests/test_triton_stand_in.py). The kernels take
    every stride as given."""
    batch, heads, rows, _ = x.shape
    shape, options = (batch, heads, rows, last), dict(dtype=x.dtype, device=x.device)
    if x.stride(1) < x.stride(2):
        strides = (rows * heads * last, last, heads * last, 1)  # one op, not empty + transpose
        return torch.empty_strided(shape, strides, **options)
    return torch.empty(shape, **options)
