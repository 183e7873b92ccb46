"""The host's side of kernel="triton" calls, timed on a machine without a GPU. At n <= 1024 a
GPU call waits on the host (an H100 run: T5's training call 0.50 ms of GPU time, 1.67 ms of
wall time), so what the host does per call - posattn's Python around the kernels, Triton's
launch path (binding and specialising some fifty arguments per kernel), torch's small ops,
autograd - is what to cut there. `posattn.kernels.triton_aot.stand_in_gpu` runs that path as
on an sm_90 GPU, launching nothing; the tensors are tiny CPU tensors, so each torch op costs
about its dispatch, which on a GPU is what it costs the host too.

    PYTHONPATH=. python scripts/triton_host.py [--calls 200] [--repeats 9]
        [--against FILE] [--profile CASE] [--split] [--mask-memo]

Prints microseconds per call for each case: the least of `repeats` runs of `calls` calls (the
garbage collector held off), which on a busy 2-core machine is what repeats; the median moved
by 1.5x from one invocation to the next.
--against FILE: another version of posattn/kernels/triton_bias.py (e.g. `git show
REV:posattn/kernels/triton_bias.py > FILE`), its calls alternated with this one's in the same
process: the median ratio of alternated runs, this over that, and each version's least. Only
a version that holds its kernels itself (51b495e or earlier): a later one imports them from
this tree's modules (triton_forward, triton_backward, ...), so it would time this tree's.
--profile CASE: Python's profile of that case, the functions with the most time of their own.
--split: each case again with its launches replaced by no-ops (the difference is Triton's
launch path), beside autograd's floor, a Function that computes nothing.
--mask-memo: a forward + backward of 4 layers sharing one padded mask, through
`table_bias.triton_attention` as a model's layers call it, with what the mask derives for
the kernel kept on it (`masks.derived_once`) and derived in each layer, alternated.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import importlib.util
import os
import pstats
import statistics
import sys
import time
from pathlib import Path

os.environ.pop("TRITON_INTERPRET", None)  # the kernels built for the compiler

import torch

from posattn.kernels import triton_aot, triton_bias

BATCH, HEADS, LENGTH = 1, 8, 16


def load_version(path: Path):
    """Another triton_bias.py as a module of its own (relative imports resolved in posattn)."""
    spec = importlib.util.spec_from_file_location("posattn.kernels.triton_bias_other", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def cases(module) -> dict:
    """One call each, through `module`'s table_bias_attention: T5-like training (a learned
    table, d_h = 64), the same without a table, TUPE-R-like training (q and k 128 wide,
    values 64, the [CLS] untie) and T5-like inference."""
    torch.manual_seed(0)
    shape = (BATCH, HEADS, LENGTH)
    built = {}
    for name, head, with_table, untie, train in (
        ("t5 train", 64, True, False, True),
        ("no table train", 64, False, False, True),
        ("tupe-r train", 128, True, True, True),
        ("t5 inference", 64, True, False, False),
    ):
        q, k = (torch.randn(*shape, head, dtype=torch.bfloat16) for _ in "qk")
        v = torch.randn(*shape, 64, dtype=torch.bfloat16)
        table = torch.randn(HEADS, 2 * LENGTH - 1)
        column = torch.randn(HEADS)
        if train:
            for leaf in (q, k, v, table, column):
                leaf.requires_grad_()
        grad = torch.randn(*shape, 64, dtype=torch.bfloat16)

        def call(q=q, k=k, v=v, table=table, column=column, grad=grad, with_table=with_table,
                 untie=untie, train=train):  # fmt: skip
            out = module.table_bias_attention(
                q, k, v, scale=0.125, table=table if with_table else None,
                untie=(0, 0, column) if untie else None,
            )  # fmt: skip
            if train:
                out.backward(grad)

        built[name] = call
    return built


def run_us(call, calls: int) -> float:
    """Microseconds per call over `calls` calls, Python's garbage collector held off (as
    timeit does: a collection landing in one run would be charged to that run alone)."""
    gc.collect()
    gc.disable()
    try:
        started = time.perf_counter()
        for _ in range(calls):
            call()
        return (time.perf_counter() - started) * 1e6 / calls
    finally:
        gc.enable()


class _NoLaunch:
    """A kernel whose launch does nothing at all: not even Triton's launch path."""

    def __getitem__(self, grid):
        return lambda *args, **options: None


@contextlib.contextmanager
def without_launch_path():
    """Each kernel's launch replaced by a no-op: what is left is posattn's Python, torch's ops
    and autograd, so the difference from a stand-in call is Triton's launch path."""
    kept = {name: getattr(triton_bias, name) for name in triton_aot.KERNEL_NAMES}
    for name in triton_aot.KERNEL_NAMES:
        setattr(triton_bias, name, _NoLaunch())
    try:
        yield
    finally:
        for name, kernel in kept.items():
            setattr(triton_bias, name, kernel)


class _AutogradFloor(torch.autograd.Function):
    """What any custom attention pays the host for autograd: q, k, v saved, an output and
    three gradients allocated, nothing computed."""

    @staticmethod
    def forward(ctx, q, k, v):
        ctx.save_for_backward(q, k, v)
        return torch.empty_like(v)

    @staticmethod
    def backward(ctx, grad):
        return tuple(torch.empty_like(x) for x in ctx.saved_tensors)


def split(ours: dict, repeats: int, calls: int) -> None:
    """Each training case with and without Triton's launch path, beside autograd's floor."""
    q, k, v = (torch.randn(BATCH, HEADS, LENGTH, 64, requires_grad=True) for _ in "qkv")
    grad = torch.randn(BATCH, HEADS, LENGTH, 64)

    def floor():
        _AutogradFloor.apply(q, k, v).backward(grad)

    floor_us = min(run_us(floor, calls) for _ in range(repeats))
    print(f"autograd's floor (a Function that computes nothing): {floor_us:.1f} us per call")
    for name, call in ours.items():
        with_path = min(run_us(call, calls) for _ in range(repeats))
        with without_launch_path():
            without = min(run_us(call, calls) for _ in range(repeats))
        print(
            f"{name:16s} {with_path:7.1f} us: Triton's launch path {with_path - without:6.1f}, "
            f"the rest {without:6.1f}"
        )


def mask_memo(repeats: int, calls: int, layers: int = 4) -> None:
    """`--mask-memo`: one padded forward + backward of `layers` layers, what the mask
    derives kept on it and derived in each layer, alternated run by run."""
    from posattn.kernels import masks, table_bias

    batch = 2
    padding = torch.ones(batch, LENGTH, dtype=torch.bool)
    padding[0, LENGTH * 3 // 4 :] = False
    shape = (batch, HEADS, LENGTH, 64)
    q, k, v = (torch.randn(shape, dtype=torch.bfloat16, requires_grad=True) for _ in "qkv")
    table = torch.randn(HEADS, 2 * LENGTH - 1, requires_grad=True)
    grad = torch.randn(shape, dtype=torch.bfloat16)

    def forward() -> None:
        mask = masks.build_attention_mask(padding, LENGTH, False, torch.device("cpu"))
        tables = table_bias.TableBias(offset=table)
        for _ in range(layers):
            out = table_bias.triton_attention(
                q, k, v, mask=mask, bias=None, scale=0.125, tables=tables
            )
            out.backward(grad)

    kept = table_bias.derived_once
    each_time = {"kept": kept, "derived": lambda owner, key, make: make()}
    times = {name: [] for name in each_time}
    try:
        for _ in range(10):
            forward()
        for _ in range(repeats):
            for name, rule in each_time.items():
                table_bias.derived_once = rule
                times[name].append(run_us(forward, calls))
    finally:
        table_bias.derived_once = kept
    ratio = statistics.median(a / b for a, b in zip(*times.values(), strict=True))
    print(
        f"{layers} layers sharing a padded mask (B={batch}): kept {min(times['kept']):.0f} us, "
        f"derived in each layer {min(times['derived']):.0f} us; x{ratio:.3f} (median of pairs)"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=41)
    parser.add_argument("--against", type=Path)
    parser.add_argument("--profile", help="a case's name, e.g. 't5 train'")
    parser.add_argument(
        "--split", action="store_true", help="Triton's launch path apart from the rest"
    )
    parser.add_argument(
        "--mask-memo", action="store_true", help="a mask's derivations kept, and not"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    versions = (load_version(args.against),) if args.against else ()
    with triton_aot.stand_in_gpu(*versions, record=False):
        ours = cases(triton_bias)
        other = cases(versions[0]) if versions else {}
        for call in [*ours.values(), *other.values()]:
            for _ in range(20):
                call()  # compile (once per specialisation) and warm up
        for name, call in ours.items():
            with triton_aot.recording() as launches:
                call()
            kernels = ", ".join(launch.name.removeprefix("_") for launch in launches)
            times, others = [], []
            for _ in range(args.repeats):
                times.append(run_us(call, args.calls))
                if name in other:
                    others.append(run_us(other[name], args.calls))
            line = f"{name:16s} {min(times):7.1f} us per call  [{kernels}]"
            if others:
                ratio = statistics.median(a / b for a, b in zip(times, others, strict=True))
                line += f"  against {min(others):7.1f}: x{ratio:.3f} (median of pairs)"
            print(line)
        if args.split:
            split(ours, args.repeats, args.calls)
        if args.mask_memo:
            mask_memo(args.repeats, args.calls)
        if args.profile:
            profiler = cProfile.Profile()
            profiler.enable()
            run_us(ours[args.profile], args.calls)
            profiler.disable()
            pstats.Stats(profiler).sort_stats("tottime").print_stats(20)


if __name__ == "__main__":
    main()
