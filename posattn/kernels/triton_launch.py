"""Launching posattn's Triton kernels again without JITFunction.run's work per call.

`kernel[grid](*args, **constexprs)` binds and specialises every argument (a C++ call each),
builds a cache key from them and from the options as strings, checks the kernel's globals and
asks for launch metadata before it reaches the compiled launcher. At n <= 1024 a GPU call is
bound by the host, and that path was a third of it: about 105 of 296 microseconds of a T5
training call's host time on the 2-core AMD CPU (three launches; scripts/triton_host.py
--split). `DirectLaunch` keeps each compiled kernel under a key of its own that is at least as
fine as Triton's specialisation - the tensors' dtypes and whether each data pointer is 16-byte
aligned (what Triton specialises a pointer on), the scalar arguments' exact values or, for a
second look, their classes as Triton specialises them (an integer on being 1, divisibility by
16 and width), the compile-time arguments and launch options by name, the device and the
Triton settings that enter its own key (debug, instrumentation) - and calls the compiled
kernel's launcher with the arguments Triton would pass it: the runtime arguments, then every
compile-time one in the signature's order. A key not seen yet goes through Triton's own path,
which compiles (or finds) the kernel and launches it; so does every launch while a launch
hook is set (a profiler's) or a pre-run hook, and nothing obtained then is kept. Without
hooks the launcher is given none and no launch metadata (both launchers, Triton 3.6's and
3.9's, skip a hook that is None).
"""

from __future__ import annotations

import inspect

import triton
from torch import Tensor
from triton import knobs
from triton.runtime.driver import driver

# Keys kept per kernel and tier: one per shape (or class of shapes), dtype and alignment met;
# cleared past this many.
MAX_KEYS = 256


def _hooked(hook) -> bool:
    """Whether a launch hook would do anything. Triton keeps each as a chain, empty unless a
    profiler added to it (and passes the empty chains and launch metadata for them to every
    launch); with none, the launcher takes None for both."""
    return hook is not None and bool(getattr(hook, "calls", True))


def _knobs() -> tuple:
    """The settings outside a launch's arguments that enter Triton's cache key: its debug
    flag, the instrumentation mode (a profiler's or a sanitizer's), 3.9's floating-point
    sanitizer casts and a custom pass pipeline. A change recompiles on Triton's path, so it
    is part of every key here."""
    compilation, runtime = knobs.compilation, knobs.runtime
    return (
        runtime.debug,
        compilation.instrumentation_mode,
        getattr(compilation, "fpsan_homomorphic_casts", None),
        getattr(runtime, "add_stages_inspection_hook", None),
    )


def scalar_class(value) -> tuple:
    """What Triton specialises a scalar argument on: an integer on being 1 (then compiled as
    a constant), on divisibility by 16 and on its width (i32, i64, u64); a float or a bool
    on nothing but its type. Finer than that (a bool by value, anything else by value too)
    is safe: it only costs a key."""
    kind = type(value)
    if kind is int:
        width = 0 if -(2**31) <= value < 2**31 else 1 if value < 2**63 else 2
        return (kind, value == 1, value % 16 == 0, width)
    if kind is float:
        return (kind,)
    return (kind, value)


class DirectLaunch:
    """`launch(grid, tensors, scalars, constexprs)` = `fn[grid](*tensors, *scalars,
    **constexprs)` for a kernel whose runtime parameters (tensors first, then scalars) all
    precede its compile-time ones; `constexprs` also holds the launch options (num_warps,
    num_stages).

    Two keys: the scalars' exact values first (a training step repeats its shapes: a tuple's
    hash), then, where that misses, their classes as Triton specialises them
    (`scalar_class`: a decoding step's new length and start find the kernel compiled for the
    last one). The scalars' exact key tells 1, 1.0 and True apart only by value, so each
    position must always hold one type: the caller's to ensure, as `table_bias_attention`
    does for its scale. Triton's path runs a kernel's pre-run hooks and checks that the
    globals it was compiled with have not changed; with a pre-run hook every launch takes
    that path, and these kernels' globals are constants."""

    def __init__(self, fn: triton.runtime.JITFunction) -> None:
        self.fn = fn
        runtime = [not param.is_constexpr for param in fn.params]
        count = runtime.count(True)
        if runtime != [True] * count + [False] * (len(runtime) - count):
            raise ValueError(f"{fn.__name__}: runtime parameters must precede constexpr ones")
        parameters = list(inspect.signature(fn.fn).parameters.values())[count:]
        self.constexprs = [(param.name, param.default) for param in parameters]
        self.runtime_count = count
        self.exact: dict[tuple, tuple] = {}
        self.by_class: dict[tuple, tuple] = {}

    def __call__(
        self, grid: tuple[int, int], tensors: tuple[Tensor, ...], scalars: tuple,
        constexprs: dict,
    ) -> None:  # fmt: skip
        runtime = knobs.runtime
        hooked = _hooked(runtime.launch_enter_hook) or _hooked(runtime.launch_exit_hook)
        if hooked or self.fn.pre_run_hooks:
            # Triton's path for every launch; nothing kept (a profiler's kernel may be
            # instrumented, and its hooks need the launch metadata).
            self.fn[grid](*tensors, *scalars, **constexprs)
            return
        active = driver.active
        device = active.get_current_device()
        # Each tensor's dtype and 16-byte alignment in one pass (two generators took 25 of a
        # launch's 60 us of host time on the 2-core AMD CPU under a line profiler).
        common = (
            device,
            _knobs(),
            tuple([(tensor.dtype, not tensor.data_ptr() & 15) for tensor in tensors]),
            tuple(constexprs.items()),
        )
        exact = (common, scalars)
        found = self.exact.get(exact)
        if found is None:
            by_class = (common, tuple(map(scalar_class, scalars)))
            found = self.by_class.get(by_class)
            if found is None:
                found = self._through_triton(grid, tensors, scalars, constexprs)
                if found is not None:
                    _keep(self.by_class, by_class, found)
                    _keep(self.exact, exact, found)
                return
            _keep(self.exact, exact, found)
        kernel, tail = found
        stream = active.get_current_stream(device)
        kernel.run(
            grid[0], grid[1], 1, stream, kernel.function, kernel.packed_metadata, None, None,
            None, *tensors, *scalars, *tail,
        )  # fmt: skip

    def _through_triton(self, grid, tensors, scalars, constexprs) -> tuple | None:
        """Triton's own launch; its compiled kernel with the compile-time arguments as its
        launcher takes them, or None where Triton launched nothing (a compile skipped by
        its cache hook)."""
        if len(tensors) + len(scalars) != self.runtime_count:
            raise TypeError(
                f"{self.fn.__name__}: {len(tensors) + len(scalars)} runtime arguments, "
                f"expected {self.runtime_count}"
            )
        kernel = self.fn[grid](*tensors, *scalars, **constexprs)
        if kernel is None:
            return None
        if hasattr(kernel, "result"):  # an asynchronous compile's future
            kernel = kernel.result()
        missing = inspect.Parameter.empty
        tail = tuple(
            constexprs[name] if default is missing else constexprs.get(name, default)
            for name, default in self.constexprs
        )
        return kernel, tail


def _keep(kept: dict, key: tuple, found: tuple) -> None:
    if len(kept) >= MAX_KEYS:
        kept.clear()
    kept[key] = found
