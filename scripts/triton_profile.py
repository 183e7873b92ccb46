"""Where one training call of kernel="triton" spends its GPU time, kernel by kernel: the
forward, dQ with D = rowsum(dO * O) and the table's diagonal sums, dK/dV, and the small torch
ops around them (the table's log2(e) copies, zero fills, the gradient casts), beside the same
call without a table and bias-free flash SDPA, from torch.profiler's CUDA activity. The
benchmark says how far the kernel is from flash attention; this says which part to work on.

    PYTHONPATH=. python scripts/triton_profile.py OUT_DIR [--length 4096] [--steps 10] [--host]

Writes profile-LENGTH.json and prints a table per case (GPU and wall ms per call; per kernel,
ms per call and share of the call). With --host (and a small --length, where the GPU's time
does not matter): wall time per call, launched directly and through Triton's own path
(POSATTN_TRITON_LAUNCH), and Python's profile of the host side, host-LENGTH.txt.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import torch
from torch.nn import functional as F
from torch.profiler import ProfilerActivity, profile

from posattn.kernels.triton_bias import table_bias_attention

BATCH, HEADS = 8, 8


def per_call(events: Iterable, calls: int) -> list[dict]:
    """profiler key averages -> [{"kernel", "ms", "launches"}] per call, GPU time only,
    the costliest first."""
    rows = []
    for event in events:
        microseconds = getattr(event, "device_time_total", 0) or 0
        if microseconds > 0:
            rows.append(
                dict(kernel=event.key, ms=microseconds / 1e3 / calls, launches=event.count / calls)
            )
    return sorted(rows, key=lambda row: -row["ms"])


def case_inputs(n: int, head: int, value_head: int, untie: bool):
    torch.manual_seed(0)
    shape = (BATCH, HEADS, n)
    q, k = (torch.randn(*shape, head, device="cuda", dtype=torch.bfloat16) for _ in "qk")
    v = torch.randn(*shape, value_head, device="cuda", dtype=torch.bfloat16)
    table = torch.randn(HEADS, 2 * n - 1, device="cuda")
    column = torch.randn(HEADS, device="cuda") if untie else None
    leaves = [t.requires_grad_() for t in (q, k, v, table) + ((column,) if untie else ())]
    return leaves, torch.randn(*shape, value_head, device="cuda", dtype=torch.bfloat16)


def cases(n: int) -> dict[str, Callable[[], None]]:
    """One training call each: T5-like (a learned table, d_h = 64), the kernel without a
    table, TUPE-R-like (q and k 128 wide, values 64, the [CLS] untie) and flash SDPA."""
    built = {}
    for name, head, value_head, with_table, untie in (
        ("t5", 64, 64, True, False),
        ("no table", 64, 64, False, False),
        ("tupe-r", 128, 64, True, True),
    ):
        (q, k, v, table, *column), grad = case_inputs(n, head, value_head, untie)

        def call(q=q, k=k, v=v, table=table, column=column, grad=grad, with_table=with_table):
            out = table_bias_attention(
                q, k, v, scale=64**-0.5, table=table if with_table else None,
                untie=(0, 0, column[0]) if column else None,
            )  # fmt: skip
            out.backward(grad)

        built[name] = call
    (q, k, v, _), grad = case_inputs(n, 64, 64, False)
    built["flash sdpa"] = lambda: F.scaled_dot_product_attention(q, k, v).backward(grad)
    return built


def wall_ms(call: Callable[[], None], steps: int) -> float:
    """Wall time per call over `steps` calls, the GPU drained before and after."""
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(steps):
        call()
    torch.cuda.synchronize()
    return (time.perf_counter() - started) * 1e3 / steps


def host_profile(out: Path, n: int, steps: int) -> None:
    """Where the host's time goes in a call too small for the GPU to matter: wall time per
    training call, then Python's profile of `steps` calls (the functions with the most time of
    their own: Triton's launch path, torch's ops, autograd), written to host-N.txt."""
    report = io.StringIO()
    for name, call in cases(n).items():
        for _ in range(3):
            call()
        # Triton's own launch path beside the direct one (the default), alternated.
        walls = {"direct": [], "triton": []}
        chosen = os.environ.get("POSATTN_TRITON_LAUNCH")
        for _ in range(5):
            for mode, times in walls.items():
                os.environ["POSATTN_TRITON_LAUNCH"] = mode
                call()
                times.append(wall_ms(call, steps))
        os.environ.pop("POSATTN_TRITON_LAUNCH")
        if chosen is not None:  # the caller's choice for the rest of the profile
            os.environ["POSATTN_TRITON_LAUNCH"] = chosen
        print(
            f"== {name}: launched directly {statistics.median(walls['direct']):.3f} ms, "
            f"through Triton's path {statistics.median(walls['triton']):.3f} ms per call",
            file=report,
        )
        wall = wall_ms(call, steps)
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(steps):
            call()
        torch.cuda.synchronize()
        profiler.disable()
        print(f"== {name}: {wall:.3f} ms of wall time per training call (n={n})", file=report)
        stats = pstats.Stats(profiler, stream=report)
        stats.sort_stats("tottime").print_stats(14)
    (out / f"host-{n}.txt").write_text(report.getvalue())
    for line in report.getvalue().splitlines():
        if line.startswith("==") or "function calls" in line:
            print(line)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--length", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument(
        "--host", action="store_true", help="the host's time instead (use a small --length)"
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.host:
        host_profile(args.out, args.length, max(args.steps, 100))
        return
    results = {}
    for name, call in cases(args.length).items():
        for _ in range(3):  # compile and warm up outside the profile
            call()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(args.steps):
                call()
            torch.cuda.synchronize()
        rows = per_call(prof.key_averages(), args.steps)
        # Wall time per call beside the GPU's: where it is larger, the call waits on the host
        # (launches, the small torch ops around the kernels), not on the kernels.
        wall = wall_ms(call, args.steps)
        results[name] = dict(wall_ms=wall, kernels=rows)
        total = sum(row["ms"] for row in rows)
        print(
            f"== {name}: {total:.3f} ms of GPU time, {wall:.3f} ms of wall time per call "
            f"(n={args.length}, bf16, B=8, H=8)"
        )
        for row in rows[:12]:
            share = row["ms"] / total if total else 0.0
            print(f"  {row['ms']:8.3f} ms {share:6.1%} x{row['launches']:<4g} {row['kernel'][:90]}")
    written = args.out / f"profile-{args.length}.json"
    written.write_text(json.dumps(dict(n=args.length, cases=results), indent=2))


if __name__ == "__main__":
    main()
