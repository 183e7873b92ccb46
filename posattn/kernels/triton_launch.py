"""Launching posattn's Triton kernels again without JITFunction.run's work per call.

`kernel[grid](*args, **constexprs)` binds and specialises every argument (a C++ call each),
builds a cache key from them and from the options as strings, checks the kernel's globals and
asks for launch metadata before it reaches the compiled launcher. At n <= 1024 a GPU call is
bound by the host, and that path was a third of it: about 105 of 296 microseconds of a T5
training call's host time on the 2-core AMD CPU (three launches; scripts/triton_host.py
--split). `DirectLaunch` keeps each compiled kernel under a key of its own that is at least as
fine as Triton's specialisation - the tensors' dtypes and whether each data pointer is 16-byte
aligned (what Triton specialises a pointer on), the scalar arguments' exact values (Triton
specialises an integer on being 1 and on divisibility by 16, which the values decide), the
compile-time arguments and launch options by name, the device and Triton's debug flag - and
calls the compiled kernel's launcher with the arguments Triton would pass it: the runtime
arguments, then every compile-time one in the signature's order. A key not seen yet goes
through Triton's own path, which compiles (or finds) the kernel and launches it; so does
every launch while a launch hook is set (a profiler's), which Triton's path serves; without
one, the launcher is given no hooks and no launch metadata (both launchers, Triton 3.6's and
3.9's, skip a hook that is None).
"""

from __future__ import annotations

import inspect

import triton
from torch import Tensor
from triton import knobs
from triton.runtime.driver import driver

# Keys kept per kernel: one per shape, dtype and alignment met; cleared past this many.
MAX_KEYS = 256


def _hooked(hook) -> bool:
    """Whether a launch hook would do anything. Triton keeps each as a chain, empty unless a
    profiler added to it (and passes the empty chains and launch metadata for them to every
    launch); with none, the launcher takes None for both."""
    return hook is not None and bool(getattr(hook, "calls", True))


class DirectLaunch:
    """`launch(grid, tensors, scalars, constexprs)` = `fn[grid](*tensors, *scalars,
    **constexprs)` for a kernel whose runtime parameters (tensors first, then scalars) all
    precede its compile-time ones; `constexprs` also holds the launch options (num_warps,
    num_stages). Scalars are keyed by value, so each position must always hold one type
    (1, 1.0 and True are one key; Triton compiles each differently): the caller's to ensure,
    as `table_bias_attention` does for its scale."""

    def __init__(self, fn: triton.runtime.JITFunction) -> None:
        self.fn = fn
        runtime = [not param.is_constexpr for param in fn.params]
        count = runtime.count(True)
        if runtime != [True] * count + [False] * (len(runtime) - count):
            raise ValueError(f"{fn.__name__}: runtime parameters must precede constexpr ones")
        parameters = list(inspect.signature(fn.fn).parameters.values())[count:]
        self.constexprs = [(param.name, param.default) for param in parameters]
        self.runtime_count = count
        self.kernels: dict[tuple, tuple] = {}

    def __call__(
        self, grid: tuple[int, int], tensors: tuple[Tensor, ...], scalars: tuple,
        constexprs: dict,
    ) -> None:  # fmt: skip
        active = driver.active
        device = active.get_current_device()
        key = (
            device,
            knobs.runtime.debug,
            tuple(tensor.dtype for tensor in tensors),
            tuple(tensor.data_ptr() % 16 == 0 for tensor in tensors),
            scalars,
            tuple(constexprs.items()),
        )
        found = self.kernels.get(key)
        runtime = knobs.runtime
        if found is None or _hooked(runtime.launch_enter_hook) or _hooked(runtime.launch_exit_hook):
            self._through_triton(key, grid, tensors, scalars, constexprs)
            return
        kernel, tail = found
        stream = active.get_current_stream(device)
        kernel.run(
            grid[0], grid[1], 1, stream, kernel.function, kernel.packed_metadata, None, None,
            None, *tensors, *scalars, *tail,
        )  # fmt: skip

    def _through_triton(self, key, grid, tensors, scalars, constexprs) -> None:
        """Triton's own launch, its compiled kernel kept under `key` with the compile-time
        arguments as its launcher takes them."""
        if len(tensors) + len(scalars) != self.runtime_count:
            raise TypeError(
                f"{self.fn.__name__}: {len(tensors) + len(scalars)} runtime arguments, "
                f"expected {self.runtime_count}"
            )
        kernel = self.fn[grid](*tensors, *scalars, **constexprs)
        missing = inspect.Parameter.empty
        tail = tuple(
            constexprs[name] if default is missing else constexprs.get(name, default)
            for name, default in self.constexprs
        )
        if len(self.kernels) >= MAX_KEYS:
            self.kernels.clear()
        self.kernels[key] = (kernel, tail)
