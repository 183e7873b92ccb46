"""The attention level of `posattn bench`: one attention call of each encoding and kernel,
forward and forward + backward, against SDPA without a bias in the same process; and
DIET-ABS inside Linformer against full attention at long lengths."""

from __future__ import annotations

import gc
from contextlib import nullcontext

import torch
from torch.nn import functional as F
from torch.nn.attention import sdpa_kernel

from ...attention import MultiHeadAttention
from ...encodings import ModelDims, build_encoding
from ...errors import PosAttnConfigError
from .memory import call_peak_mib
from .settings import CAUSAL_ONLY, SDPA_BACKENDS, BenchSettings
from .timing import collections_of_new_objects_only, free_memory, measure, paired, timed_fields


def attention_call(
    name: str | None,
    s: BenchSettings,
    n: int,
    train: bool,
    device,
    batch: int | None = None,
    kernel: str = "auto",
    sdpa_backend: str | None = None,
):
    """A closure running one attention call of encoding `name` (None: SDPA without bias,
    at `sdpa_backend`, one of SDPA_BACKENDS, or SDPA's choice)."""
    d_model = s.heads * s.head_dim
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(batch or s.batch, n, d_model, generator=generator).to(device)
    attention = MultiHeadAttention(d_model, s.heads, kernel=kernel).to(device)
    dtype = s.torch_dtype(torch.device(device))
    q, k, v = (
        heads.to(dtype).detach().requires_grad_(train) for heads in attention.queries_keys_values(x)
    )
    grad = torch.randn_like(q)
    if name is None:

        def pinned():
            return sdpa_kernel(SDPA_BACKENDS[sdpa_backend]) if sdpa_backend else nullcontext()

        def call() -> None:
            with torch.set_grad_enabled(train), pinned():
                out = F.scaled_dot_product_attention(q, k, v)
                if train:
                    out.backward(grad)

        return call
    dims = ModelDims(d_model, s.heads, 1, n, causal=name in CAUSAL_ONLY)
    encoding = build_encoding(name, dims, s.options_of(name)).to(device)
    encoding.requires_grad_(train)

    def call() -> None:
        with torch.set_grad_enabled(train):
            terms = encoding.layer_terms(n, device, q.dtype)[0]
            out = attention.attend(q, k, v, terms)
            if train:
                out.backward(grad)

    return call


def refusal_of(call) -> str | None:
    """The message of a kernel's refusal of this call (kernel="triton" on CPU, or for an
    encoding it cannot serve), or None once the call has run (it doubles as a warm-up)."""
    try:
        call()
    except PosAttnConfigError as error:
        return str(error)
    return None


@collections_of_new_objects_only()
def attention_level(s: BenchSettings, device) -> tuple[list[dict], list[dict]]:
    """(measured rows, skipped (encoding, kernel) pairs with the kernel's reason)."""
    rows, skipped = [], []
    backends = s.sdpa_backends(device)  # checked before anything is measured
    for n in s.lengths:
        for train in (False, True):
            floor = attention_call(None, s, n, train, device)
            floor_ms, floor_mib = measure(floor, s.repeats)
            rows.append(dict(encoding="sdpa (no bias)", n=n, train=train, ms=floor_ms,
                             ratio=1.0, extra_mib=floor_mib,
                             scores_mib=scores_mib(s, n, device)))  # fmt: skip
            rows += pinned_floors(s, backends, n, train, device, floor, skipped)
            for name in s.encodings:
                for kernel in s.kernels:
                    try:
                        call = attention_call(name, s, n, train, device, kernel=kernel)
                        reason = refusal_of(call)
                        if reason is None:
                            timed = paired(floor, call, s.repeats)
                            mib = call_peak_mib(call)
                    except torch.OutOfMemoryError:
                        # A materialised [B, H, n, n] bias and its gradient outgrow the GPU
                        # at large n: the row says so instead of ending the benchmark.
                        reason = f"out of memory at n={n} (batch {s.batch}, {s.heads} heads)"
                    call = None
                    free_memory()
                    if reason is not None:
                        print(f"skipped {name} [{kernel}] n={n} train={train}: {reason}")
                        skipped.append(dict(encoding=name, kernel=kernel, n=n, train=train,
                                            reason=reason))  # fmt: skip
                        continue
                    rows.append(dict(encoding=name, kernel=kernel, n=n, train=train,
                                     **timed_fields(timed), extra_mib=mib))  # fmt: skip
            gc.collect()
    return rows, skipped


def pinned_floors(
    s: BenchSettings, backends: list[str], n: int, train: bool, device, floor, skipped: list
) -> list:
    """Rows of SDPA without a bias pinned to each of `backends` (`s.sdpa_backends`), as
    ratios to the floor (SDPA's own choice: the one near 1.00 is it); one that cannot run
    this call (not built for this device or dtype) is a skipped row with torch's reason."""
    rows = []
    for backend in backends:
        name = f"sdpa {backend} (no bias)"
        call = attention_call(None, s, n, train, device, sdpa_backend=backend)
        try:
            timed = paired(floor, call, s.repeats)
            mib = call_peak_mib(call)
        except RuntimeError as error:  # "No viable backend" (its warnings say why)
            reason = str(error).splitlines()[0][:200]
            print(f"skipped {name} n={n} train={train}: {reason}")
            skipped.append(dict(encoding=name, kernel="sdpa", n=n, train=train, reason=reason))
            continue
        rows.append(dict(encoding=name, n=n, train=train, **timed_fields(timed), extra_mib=mib))
    return rows


def scores_mib(s: BenchSettings, n: int, device) -> float:
    """MiB of one [B, H, n, n] tensor in the call's dtype: the unit of the CPU memory target."""
    itemsize = s.torch_dtype(torch.device(device)).itemsize
    return s.batch * s.heads * n * n * itemsize / 2**20


@collections_of_new_objects_only()
def long_sequences(s: BenchSettings, device) -> list[dict]:
    """DIET-ABS inside Linformer (k=32) against full attention with DIET-ABS, forward +
    backward of one attention call: the time and memory curves of DIET Eq. 4's point."""
    rows = []
    for n in s.long_lengths:
        for name in ("diet-abs", "diet-abs-lin"):
            ms, mib = measure(attention_call(name, s, n, True, device, s.long_batch), s.repeats)
            rows.append(dict(encoding=name, n=n, ms=ms, extra_mib=mib))
            gc.collect()
    return rows
