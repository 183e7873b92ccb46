"""The host's side of a BERT-small training step per encoding and kernel, timed without a GPU.

On a GPU, BERT-small at n=512 is bound by the host (an H100 run: `learned` took 13-21 ms a
training step, far more than its arithmetic), so issue 16's model-level target there (+5% over
`learned`) is a count of what the host does per step: torch ops dispatched, Python around
them, autograd, Triton's launches. This runs the same model code - BERT-small's structure (4
layers, 8 heads, the masked-LM head, AdamW, bf16 autocast) - at tiny sizes on the CPU, so that
each op costs about its dispatch; kernel="triton" runs through
`posattn.kernels.triton_aot.stand_in_gpu` (launches recorded, nothing run).

    PYTHONPATH=. python scripts/step_host.py [--encodings t5,diet-rel,tupe-r]
        [--kernels sdpa,triton] [--repeats 15] [--steps 10] [--profile ENCODING:KERNEL]
        [--ops]

Prints, per encoding and kernel, the host time of a training step and of an inference forward
as +% over `learned` (kernel "auto"), the median of alternated pairs, with each one's least.
--ops: instead, the torch ops each dispatches (a dispatch mode counts them; exact, unlike the
times), `learned`'s first.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
from collections import Counter

os.environ.pop("TRITON_INTERPRET", None)  # the kernels built for the compiler

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from posattn.errors import PosAttnConfigError
from posattn.kernels import triton_aot
from posattn.lab.bench.settings import BENCH_OPTIONS, CAUSAL_ONLY
from posattn.lab.bench.timing import step_functions as bench_steps
from posattn.models import PosAttnForMaskedLM
from posattn.models.config import PosAttnConfig
from scripts.triton_host import run_us

# BERT-small's structure at sizes where each op costs its dispatch: d_h = 16 (the kernel's
# least), a vocabulary of 128, 16 tokens.
LAYERS, HEADS, D_MODEL, LENGTH, BATCH = 4, 8, 128, 16, 1


def model(encoding: str, kernel: str) -> PosAttnForMaskedLM:
    config = PosAttnConfig(
        vocab_size=128, d_model=D_MODEL, num_layers=LAYERS, num_heads=HEADS, ffn_dim=4 * D_MODEL,
        max_len=LENGTH, encoding=encoding, encoding_options=BENCH_OPTIONS.get(encoding, {}),
        causal=encoding in CAUSAL_ONLY, kernel=kernel, attention_dropout=0.0,
    )  # fmt: skip
    torch.manual_seed(0)
    return PosAttnForMaskedLM(config)


def step_functions(model: PosAttnForMaskedLM) -> tuple:
    """(train_step, infer) as `posattn bench` times them, with AdamW's multi-tensor update,
    which it takes on a GPU (on the CPU it would update tensor by tensor: some 700 ops a step
    that a GPU step never launches)."""
    return bench_steps(model, BATCH, LENGTH, foreach=True)


def in_bf16(fn):
    def call() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            fn()

    return call


def paired(base, fn, repeats: int, steps: int) -> tuple[float, float, float]:
    """(median ratio fn / base of alternated runs, least of base, least of fn)."""
    ours, theirs = [], []
    for _ in range(repeats):
        theirs.append(run_us(base, steps))
        ours.append(run_us(fn, steps))
    ratio = statistics.median(a / b for a, b in zip(ours, theirs, strict=True))
    return ratio, min(theirs), min(ours)


class CountedOps(TorchDispatchMode):
    """Every torch op dispatched inside the block, by name."""

    def __init__(self) -> None:
        super().__init__()
        self.found = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.found[str(func)] += 1
        return func(*args, **(kwargs or {}))


def ops_of(steps) -> list[int]:
    """Ops dispatched by each of (train_step, infer), after warm-up calls."""
    counts = []
    for fn in steps:
        for _ in range(3):
            fn()
        with CountedOps() as ops:
            fn()
        counts.append(sum(ops.found.values()))
    return counts


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--encodings", default="t5,diet-rel,tupe-r")
    parser.add_argument("--kernels", default="sdpa,triton")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--profile", help="ENCODING:KERNEL, the training step's own-time profile")
    parser.add_argument("--ops", action="store_true", help="count ops instead of timing")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.set_flush_denormal(True)
    with triton_aot.stand_in_gpu(record=False):
        baseline = [in_bf16(fn) for fn in step_functions(model("learned", "auto"))]
        if args.ops:
            print(f"{'encoding [kernel]':24s} {'train ops':>9s} {'infer ops':>9s}")
            rows = [("learned", "auto")] + [
                (encoding, kernel)
                for encoding in args.encodings.split(",")
                for kernel in args.kernels.split(",")
            ]
            for encoding, kernel in rows:
                steps = [in_bf16(fn) for fn in step_functions(model(encoding, kernel))]
                train, infer = ops_of(steps)
                print(f"{encoding + ' [' + kernel + ']':24s} {train:9d} {infer:9d}")
            return
        for fn in baseline:
            for _ in range(5):
                fn()
        print(f"{'encoding [kernel]':24s} {'train +%':>9s} {'infer +%':>9s}   least us "
              "(learned / it): train, infer")  # fmt: skip
        for encoding in args.encodings.split(","):
            for kernel in args.kernels.split(","):
                try:
                    steps = [in_bf16(fn) for fn in step_functions(model(encoding, kernel))]
                except PosAttnConfigError as error:
                    print(f"{encoding} [{kernel}]: refused ({error})")
                    continue
                for fn in steps:
                    for _ in range(5):
                        fn()  # compile (once per specialisation) and warm up
                cells, leasts = [], []
                for base, fn in zip(baseline, steps, strict=True):
                    ratio, base_us, us = paired(base, fn, args.repeats, args.steps)
                    cells.append(f"{100 * (ratio - 1):+8.1f}%")
                    leasts.append(f"{base_us:.0f} / {us:.0f}")
                print(f"{encoding + ' [' + kernel + ']':24s} {cells[0]} {cells[1]}   "
                      f"{leasts[0]}, {leasts[1]}")  # fmt: skip
                if args.profile == f"{encoding}:{kernel}":
                    profiler = cProfile.Profile()
                    profiler.enable()
                    run_us(steps[0], args.steps)
                    profiler.disable()
                    pstats.Stats(profiler).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
