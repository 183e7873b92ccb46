"""Sweep the tiles of kernel="triton" on a GPU: each candidate checked against a float32
reference, then timed (forward alone, forward + backward) as a ratio to bias-free flash SDPA in
the same process, and at the best backward tile where the table's gradient is added (one
shared table or one per batch element) and how dQ skews its tiles for it (zero-padded or
rotated in place). Writes tiles.env (the fastest correct forward and backward tiles and
table-gradient choices, as the POSATTN_TRITON_* variables `posattn.kernels.triton_bias`
reads) and tiles.json.

    PYTHONPATH=. python scripts/triton_tiles.py OUT_DIR [--length 4096]
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch
import triton.testing
from torch.nn import functional as F

from posattn.kernels.triton_bias import (
    GPU_TILES,
    SKEWS,
    TABLE_GRAD_MODES,
    table_bias_attention,
)

FORWARD = ["128,32,4,3", "128,32,4,2", "128,32,8,3", "128,64,4,3", "64,32,4,3", "64,64,4,3",
           "128,16,4,3"]  # fmt: skip
BACKWARD = ["64,32,4,2", "64,32,4,3", "64,32,8,2", "64,64,4,3", "32,32,4,2", "64,16,4,2",
            "128,32,8,2", "32,16,4,2"]  # fmt: skip
BATCH, HEADS, HEAD_DIM = 8, 8, 64


def inputs(batch: int, n: int, dtype: torch.dtype):
    torch.manual_seed(0)
    q, k, v = (torch.randn(batch, HEADS, n, HEAD_DIM, device="cuda", dtype=dtype) for _ in "qkv")
    table = torch.randn(HEADS, 2 * n - 1, device="cuda")
    return [t.requires_grad_() for t in (q, k, v, table)]


def relative_error(ours: torch.Tensor, reference: torch.Tensor) -> float:
    return ((ours.float() - reference).norm() / reference.norm()).item()


def check(n: int = 512) -> dict[str, torch.Tensor]:
    """Float32 reference of output and every gradient, the bias materialised."""
    q, k, v, table = inputs(2, n, torch.float32)
    offsets = torch.arange(n)[None, :] - torch.arange(n)[:, None] + n - 1
    bias = table[:, offsets.cuda()]
    out = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), bias.double()[None])
    grad = torch.randn_like(out)
    out.backward(grad)
    return dict(out=out.float(), q=q.grad, k=k.grad, v=v.grad, table=table.grad, grad=grad.float())


def errors_of(reference: dict, n: int = 512) -> float:
    q, k, v, table = inputs(2, n, torch.bfloat16)
    out = table_bias_attention(q, k, v, scale=HEAD_DIM**-0.5, table=table)
    out.backward(reference["grad"].to(out.dtype))
    pairs = [(out, reference["out"]), (q.grad, reference["q"]), (k.grad, reference["k"]),
             (v.grad, reference["v"]), (table.grad, reference["table"])]  # fmt: skip
    return max(relative_error(ours, ref) for ours, ref in pairs)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--length", type=int, default=4096)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    n = args.length
    reference = check()
    q, k, v, table = inputs(BATCH, n, torch.bfloat16)
    grad = torch.randn_like(q)
    scale = HEAD_DIM**-0.5

    def flash(train: bool):
        with torch.set_grad_enabled(train):
            out = F.scaled_dot_product_attention(q, k, v)
            if train:
                out.backward(grad)

    def ours(train: bool, with_table: bool = True):
        with torch.set_grad_enabled(train):
            out = table_bias_attention(q, k, v, scale=scale, table=table if with_table else None)
            if train:
                out.backward(grad)

    def bias_free(train: bool):
        ours(train, with_table=False)

    def time(fn, train):
        return triton.testing.do_bench(lambda: fn(train), warmup=25, rep=200, return_mode="median")

    def measured(kind: str, tile: str, train: bool) -> dict:
        """The current settings checked against the reference, then timed."""
        try:
            error = errors_of(reference)
            floor, ms = time(flash, train), time(ours, train)
            return dict(kind=kind, tile=tile, error=error, ok=error < 2e-2, ms=ms,
                        ratio=ms / floor)  # fmt: skip
        except Exception as failure:  # a tile that does not compile or does not fit
            failed = f"{type(failure).__name__}: {failure}"[:300]
            return dict(kind=kind, tile=tile, ok=False, error=float("nan"), ms=float("nan"),
                        ratio=float("nan"), failure=failed)  # fmt: skip

    rows = []
    default_forward = ",".join(str(x) for x in vars(GPU_TILES["forward"]).values())
    for kind, candidates in (("forward", FORWARD), ("backward", BACKWARD)):
        for tile in candidates:
            os.environ[f"POSATTN_TRITON_{kind.upper()}"] = tile
            if kind == "backward":
                best_forward = min(
                    (r for r in rows if r["kind"] == "forward" and r["ok"]),
                    key=lambda r: r["ratio"],
                    default={"tile": default_forward},
                )
                os.environ["POSATTN_TRITON_FORWARD"] = best_forward["tile"]
            row = measured(kind, tile, kind == "backward")
            rows.append(row)
            print(json.dumps(row), flush=True)
    best = {
        kind: min((r for r in rows if r["kind"] == kind and r["ok"]), key=lambda r: r["ratio"])
        for kind in ("forward", "backward")
    }
    # The kernel without a table at the best tiles: how much of the gap to flash SDPA is the
    # bias, and how much the kernel itself.
    for kind, r in best.items():
        os.environ[f"POSATTN_TRITON_{kind.upper()}"] = r["tile"]

    def keep_fastest(name: str, label: str, values: tuple[str, ...]) -> None:
        """POSATTN_TRITON_<name> set to the value whose forward + backward is fastest."""
        ratios = {}
        for value in values:
            os.environ[f"POSATTN_TRITON_{name}"] = value
            row = measured(f"backward {label} {value}", best["backward"]["tile"], True)
            rows.append(row)
            print(json.dumps(row), flush=True)
            if row["ok"]:
                ratios[value] = row["ratio"]
        os.environ[f"POSATTN_TRITON_{name}"] = min(ratios, key=ratios.get)

    # Where the table's gradient is added (one shared table or one per batch element), then
    # how dQ skews each half tile for its diagonal sums (zero-padded or rotated in place).
    keep_fastest("TABLE_GRAD", "dT", TABLE_GRAD_MODES)
    keep_fastest("SKEW", "skew", SKEWS)
    for kind in ("forward", "backward"):
        train = kind == "backward"
        floor, ms = time(flash, train), time(bias_free, train)
        row = dict(kind=f"{kind} no table", tile=best[kind]["tile"], error=float("nan"),
                   ok=True, ms=ms, ratio=ms / floor)  # fmt: skip
        rows.append(row)
        print(json.dumps(row), flush=True)
    (args.out / "tiles.json").write_text(json.dumps(dict(n=n, rows=rows, best=best), indent=2))
    lines = [f"export POSATTN_TRITON_{kind.upper()}={r['tile']}" for kind, r in best.items()]
    for name in ("TABLE_GRAD", "SKEW"):
        lines.append(f"export POSATTN_TRITON_{name}={os.environ[f'POSATTN_TRITON_{name}']}")
    (args.out / "tiles.env").write_text("\n".join(lines) + "\n")
    print(f"n={n} bf16 B={BATCH} H={HEADS} d={HEAD_DIM}; T5-like table, ratio to flash SDPA")
    for r in rows:
        cells = f"err {r['error']:.1e} {r['ms']:8.3f} ms {r['ratio']:5.2f}x"
        print(f"{r['kind']:17} {r['tile']:12} {cells}")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
