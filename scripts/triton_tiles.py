"""Sweep the tiles of kernel="triton" on a GPU: each candidate checked against a float32
reference, then timed (forward alone, with a table read everywhere and with T5's flat tails,
chosen on both; forward + backward for the dQ and the dK/dV kernel's tiles) as a ratio to
bias-free flash SDPA in the same process; then dK/dV as it ran before its
tile was split (query-major at dQ's 64 x 32), and at the best tiles the table's loads cached
in L1 or not (POSATTN_TRITON_TABLE_CACHE), where the table's gradient
is added (one shared table or one per batch element) and how dQ skews its tiles for it
(zero-padded or rotated in place); then a table flat past offset +-128 (T5's buckets at its
default max_distance) and ALiBi's lines with their tails handled without the table and read
from it (POSATTN_TRITON_TABLE_TAILS on / off); then a padded batch (its rows' real lengths
n/8, 2n/8 ... n) with its key mask and without, whose blocks of padding the kernels skip
and whose blocks inside each row's real keys they run unmasked (POSATTN_TRITON_KEY_RUNS on /
off); last, without a table, the forward and the training call, and the training call with
the backward in one kernel (POSATTN_TRITON_BACKWARD=fused, checked against the split one)
without a table and with the learned one, at the chosen dK/dV tile and at 32 x 64.
Writes tiles.env (the fastest correct tiles and
choices, as the POSATTN_TRITON_* variables `posattn.kernels.triton_settings` reads) and
tiles.json.

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

from posattn.encodings.alibi import alibi_slopes
from posattn.kernels.triton_bias import table_bias_attention
from posattn.kernels.triton_settings import (
    DK_DV_ORDERS,
    GPU_TILES,
    SKEWS,
    TABLE_CACHES,
    TABLE_GRAD_MODES,
)

# Candidates per kernel (the earlier sweeps' losers by 10% or more left out: forward 128 x 64
# and 64 x 64 with 4 warps, 128 x 16; dQ 32 x 32, 32 x 16, 64 x 32 with 8 warps). The
# forward's wider key blocks with 8 warps, never timed: fewer loop instructions per 1000
# scores (sm_90, T5-like table, scripts/triton_resources.py: 541 at 128 x 32, 396 at 128 x 64
# with 2 stages, 350 at 128 x 128), no spills; at 128 x 64 capped to 128 registers, 16 warps
# per SM with flat tails too (uncapped they take 164: 8). The forward's are timed with a
# table read everywhere and with T5's flat tails, and chosen on both. dK/dV's: key-major
# tiles that compile to warpgroup MMA only, without spills.
CANDIDATES = {
    "forward": ["128,32,8,3", "128,64,8,3", "128,64,8,2", "128,64,8,2,128", "128,128,8,2",
                "64,32,4,3"],
    "dq": ["64,32,4,3", "64,32,4,2", "64,64,4,3", "128,32,8,2"],
    "dk_dv": ["32,128,8,3", "32,128,8,2", "32,128,8,4", "16,128,8,3", "64,128,8,2",
              "32,64,4,3", "64,64,8,3"],
}  # fmt: skip
# dK/dV before its own tile: query-major at dQ's tile.
DK_DV_BEFORE = "64,32,4,3"
BATCH, HEADS, HEAD_DIM = 8, 8, 64
# T5's default max_distance: its bias is one bucket per direction past it.
FLAT_DISTANCE = 128


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

    # T5's table past max_distance: the forward's candidates are also timed there, where T5
    # and TUPE-R run nine tiles in ten at n=4096 (a register cap pays there alone).
    offsets = torch.arange(2 * n - 1, device=q.device) - (n - 1)
    flat_table = table.detach()[:, offsets.clamp(-FLAT_DISTANCE, FLAT_DISTANCE) + n - 1]
    flat_tails = (n - 1 - FLAT_DISTANCE, n - 1 + FLAT_DISTANCE)

    def flat(train: bool):
        with torch.no_grad():
            return table_bias_attention(q, k, v, scale=scale, table=flat_table, tails=flat_tails)

    def flat_measured(floor: float) -> dict:
        """The flat table's forward at the current tile: its tails against the table read
        everywhere (POSATTN_TRITON_TABLE_TAILS off), then timed."""
        os.environ["POSATTN_TRITON_TABLE_TAILS"] = "off"
        try:
            read = flat(False)
        finally:  # a tile that fails here leaves the tails on for what follows
            del os.environ["POSATTN_TRITON_TABLE_TAILS"]
        error = relative_error(flat(False), read.float())
        return dict(flat_error=error, flat_ok=error < 2e-2, flat_ratio=time(flat, False) / floor)

    def time(fn, train):
        return triton.testing.do_bench(lambda: fn(train), warmup=25, rep=200, return_mode="median")

    def measured(kind: str, tile: str, train: bool) -> dict:
        """The current settings checked against the reference, then timed."""
        try:
            error = errors_of(reference)
            floor, ms = time(flash, train), time(ours, train)
            row = dict(kind=kind, tile=tile, error=error, ok=error < 2e-2, ms=ms,
                       ratio=ms / floor)  # fmt: skip
            if kind == "forward":  # chosen on both tables (`best_of`)
                row.update(flat_measured(floor))
                row["ok"] = row["ok"] and row["flat_ok"]
            return row
        except Exception as failure:  # a tile that does not compile or does not fit
            failed = f"{type(failure).__name__}: {failure}"[:300]
            return dict(kind=kind, tile=tile, ok=False, error=float("nan"), ms=float("nan"),
                        ratio=float("nan"), failure=failed)  # fmt: skip

    rows = []
    # The variables tiles.env sets, each once the sweep has chosen it.
    names = [kind.upper() for kind in CANDIDATES] + ["TABLE_CACHE", "DK_DV_ORDER", "TABLE_GRAD",
                                                      "SKEW", "KEY_RUNS"]  # fmt: skip

    def save() -> list[str]:
        """tiles.json and tiles.env as they stand: written after each choice, so that a
        sweep cut short (`offline-gpu.sh check` bounds it) still hands on what it chose."""
        best = {kind: best_of(kind) for kind in CANDIDATES}
        best = {kind: r for kind, r in best.items() if r is not None}
        (args.out / "tiles.json").write_text(json.dumps(dict(n=n, rows=rows, best=best), indent=2))
        lines = [
            f"export POSATTN_TRITON_{name}={os.environ[f'POSATTN_TRITON_{name}']}"
            for name in names
            if f"POSATTN_TRITON_{name}" in os.environ
        ]
        (args.out / "tiles.env").write_text("\n".join(lines) + "\n")
        return lines

    def best_of(kind: str) -> dict | None:
        """The fastest correct candidate; the forward's by its ratios with the table read
        everywhere and with T5's flat tails together."""
        return min(
            (r for r in rows if r["kind"] == kind and r["ok"]),
            key=lambda r: r["ratio"] + r.get("flat_ratio", 0.0),
            default=None,
        )

    for kind, candidates in CANDIDATES.items():
        for tile in candidates:
            os.environ[f"POSATTN_TRITON_{kind.upper()}"] = tile
            row = measured(kind, tile, kind != "forward")
            rows.append(row)
            print(json.dumps(row), flush=True)
        # The kernels after this one are timed at this one's best tile.
        best = best_of(kind)
        default = GPU_TILES[kind].as_text()
        os.environ[f"POSATTN_TRITON_{kind.upper()}"] = best["tile"] if best else default
        save()

    def keep_fastest(name: str, label: str, values: tuple[str, ...], tiles=None) -> None:
        """POSATTN_TRITON_<name> set to the value whose forward + backward is fastest
        (`tiles`: per value, the dK/dV tile to time it at)."""
        ratios = {}
        kept = os.environ["POSATTN_TRITON_DK_DV"]
        for value in values:
            os.environ[f"POSATTN_TRITON_{name}"] = value
            tile = (tiles or {}).get(value, kept)
            os.environ["POSATTN_TRITON_DK_DV"] = tile
            row = measured(f"backward {label} {value}", tile, True)
            rows.append(row)
            print(json.dumps(row), flush=True)
            if row["ok"]:
                ratios[value] = (row["ratio"], tile)
        chosen = min(ratios, key=lambda value: ratios[value][0])
        os.environ[f"POSATTN_TRITON_{name}"] = chosen
        os.environ["POSATTN_TRITON_DK_DV"] = ratios[chosen][1]
        save()

    # The table's loads through L1 or L2 alone (every kernel reads the table: training).
    keep_fastest("TABLE_CACHE", "table cache", TABLE_CACHES)
    # dK/dV key-major at its best tile against the kernel as it was (query-major at 64 x 32).
    keep_fastest("DK_DV_ORDER", "dK/dV", DK_DV_ORDERS, tiles={"query-major": DK_DV_BEFORE})
    # Where the table's gradient is added (one shared table or one per batch element), then
    # how dQ skews each half tile for its diagonal sums (zero-padded or rotated in place).
    keep_fastest("TABLE_GRAD", "dT", TABLE_GRAD_MODES)
    keep_fastest("SKEW", "skew", SKEWS)
    rows.extend(tail_rows(n, time, flash))
    save()
    rows.extend(padded_rows(n, time, flash))
    save()
    tiles_used = ";".join(os.environ[f"POSATTN_TRITON_{k.upper()}"] for k in CANDIDATES)
    for kind in ("forward", "training"):
        train = kind == "training"
        floor, ms = time(flash, train), time(bias_free, train)
        row = dict(kind=f"{kind} no table", tile=tiles_used, error=float("nan"),
                   ok=True, ms=ms, ratio=ms / floor)  # fmt: skip
        rows.append(row)
        print(json.dumps(row), flush=True)
    # The backward in one kernel (POSATTN_TRITON_BACKWARD=fused), without a table and with
    # the learned T5-like one (split: the sweep's rows above), at the chosen dK/dV tile and
    # at 32 x 64 (spill-free there with flat tails too): checked, then timed.
    kept_dk_dv = os.environ["POSATTN_TRITON_DK_DV"]
    try:
        for dk_dv in dict.fromkeys((kept_dk_dv, FUSED_DK_DV)):
            os.environ["POSATTN_TRITON_DK_DV"] = dk_dv
            for label, call, with_table in (("no table", bias_free, False), ("table", ours, True)):
                error = fused_error(q, k, v, grad, scale, table if with_table else None)
                os.environ["POSATTN_TRITON_BACKWARD"] = "fused"
                floor, ms = time(flash, True), time(call, True)
                row = dict(kind=f"training {label} fused", tile=dk_dv, error=error,
                           ok=error < 2e-2, ms=ms, ratio=ms / floor)  # fmt: skip
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        os.environ.pop("POSATTN_TRITON_BACKWARD", None)
        os.environ["POSATTN_TRITON_DK_DV"] = kept_dk_dv
    lines = save()
    print(f"n={n} bf16 B={BATCH} H={HEADS} d={HEAD_DIM}; T5-like table, ratio to flash SDPA")
    for r in rows:
        cells = f"err {r['error']:.1e} {r['ms']:8.3f} ms {r['ratio']:5.2f}x"
        if "flat_ratio" in r:
            cells += f", flat tails {r['flat_ratio']:5.2f}x"
        print(f"{r['kind']:17} {r['tile']:12} {cells}")
    print("\n".join(lines))


def fused_error(q, k, v, grad, scale: float, table=None) -> float:
    """The largest relative error of the fused backward's gradients (dq, dk, dv, the
    table's) against the split one's, bf16."""
    grads = []
    for backward in ("split", "fused"):
        os.environ["POSATTN_TRITON_BACKWARD"] = backward
        leaves = [x.detach().requires_grad_() for x in (q, k, v, table) if x is not None]
        table_bias_attention(*leaves[:3], scale=scale, table=leaves[3] if table is not None
                             else None).backward(grad)  # fmt: skip
        grads.append([leaf.grad.float() for leaf in leaves])
    return max(relative_error(a, b) for a, b in zip(*grads, strict=True))


# dK/dV's tile the fused backward is also timed at: spill-free with the table's sums and T5's
# flat tails on sm_90 (the default 64 x 128 spills 60 bytes per thread with the tails).
FUSED_DK_DV = "32,64,4,2"


def tail_rows(n: int, time, flash) -> list[dict]:
    """Forward and forward + backward with a table's tails handled without reading it
    (`tails`) and, POSATTN_TRITON_TABLE_TAILS=off, read from the table: a T5-like table flat
    past +-FLAT_DISTANCE (its parameter takes a gradient), then ALiBi's fixed table, lines on
    either side of offset 0 (`tail_slopes`). (The forward's candidate tiles are timed on the
    flat table with the others.)"""
    q, k, v, parameter = inputs(BATCH, n, torch.bfloat16)
    offsets = torch.arange(2 * n - 1, device=q.device) - (n - 1)
    index = offsets.clamp(-FLAT_DISTANCE, FLAT_DISTANCE) + n - 1
    slopes = alibi_slopes(HEADS).to(q.device)
    alibi = (-slopes[:, None] * offsets.abs()).float()
    grad = torch.randn_like(q)
    flat = tail_call(q, k, v, grad, lambda: parameter[:, index],
                     dict(tails=(n - 1 - FLAT_DISTANCE, n - 1 + FLAT_DISTANCE)))  # fmt: skip
    lines = tail_call(q, k, v, grad, lambda: alibi,
                      dict(tails=(n - 1, n - 1), tail_slopes=(slopes, -slopes)))  # fmt: skip
    rows = on_and_off("flat", flat, (q, k, v, parameter), time, flash)
    rows += on_and_off("lines", lines, (q, k, v), time, flash)
    del os.environ["POSATTN_TRITON_TABLE_TAILS"]
    return rows


def padded_rows(n: int, time, flash) -> list[dict]:
    """Forward and forward + backward of a batch whose rows hold n/8, 2n/8 ... n real keys
    (right padding), with its key mask (the kernels skip the blocks of padding; the blocks
    inside the real keys unmasked, and masked) and without (every key read, as if the batch
    were full), each against bias-free flash over the full batch; error: `padded_error`,
    the larger of runs off and on."""
    q, k, v, table = inputs(BATCH, n, torch.bfloat16)
    grad = torch.randn_like(q)
    lengths = torch.arange(1, BATCH + 1, device=q.device) * n // BATCH
    keys = (torch.arange(n, device=q.device) < lengths[:, None]).to(torch.int8)
    errors = []
    for runs in ("off", "on"):
        os.environ["POSATTN_TRITON_KEY_RUNS"] = runs
        errors.append(padded_error())
    error = max(errors)

    def call(masked: bool):
        def run(train: bool):
            with torch.set_grad_enabled(train):
                out = table_bias_attention(q, k, v, scale=HEAD_DIM**-0.5, table=table,
                                           keys=keys if masked else None)  # fmt: skip
                if train:
                    out.backward(grad)

        return run

    rows = []
    for train in (False, True):
        # Every key read; the key mask with every block masked (POSATTN_TRITON_KEY_RUNS off,
        # the default), then with the blocks inside each row's run of real keys unmasked (on).
        for masked, runs in ((False, "off"), (True, "off"), (True, "on")):
            os.environ["POSATTN_TRITON_KEY_RUNS"] = runs
            floor, ms = time(flash, train), time(call(masked), train)
            name = f"mask runs {runs}" if masked else "full"
            kind = f"{'training' if train else 'forward'} padded {name}"
            rows.append(dict(kind=kind, tile="", error=error, ok=error < 2e-2, ms=ms,
                             ratio=ms / floor))  # fmt: skip
            print(json.dumps(rows[-1]), flush=True)
    # Kept for what follows (tiles.env): the faster in training, where both were correct.
    training = {row["kind"].rsplit(" ", 1)[1]: row["ratio"] for row in rows[3:] if row["ok"]}
    if "runs" in rows[4]["kind"] and {"on", "off"} <= set(training):
        os.environ["POSATTN_TRITON_KEY_RUNS"] = min(("off", "on"), key=training.get)
    else:
        os.environ["POSATTN_TRITON_KEY_RUNS"] = "off"
    return rows


def padded_error(n: int = 512) -> float:
    """The largest relative error of a right-padded call (real lengths n/8 ... n), bf16
    against float32 eager, over the real rows' outputs."""
    q, k, v, table = inputs(BATCH, n, torch.bfloat16)
    lengths = torch.arange(1, BATCH + 1, device=q.device) * n // BATCH
    real = torch.arange(n, device=q.device) < lengths[:, None]
    with torch.no_grad():
        ours = table_bias_attention(q, k, v, scale=HEAD_DIM**-0.5, table=table,
                                    keys=real.to(torch.int8))  # fmt: skip
        offsets = torch.arange(n, device=q.device)
        bias = table[:, offsets[None, :] - offsets[:, None] + n - 1]
        scores = (q.float() @ k.float().transpose(-1, -2)) * HEAD_DIM**-0.5 + bias
        scores = scores.masked_fill(~real[:, None, None, :], float("-inf"))
        reference = scores.softmax(-1) @ v.float()
    rows = real[:, None, :, None].expand_as(reference)
    return relative_error(ours.float()[rows], reference[rows])


def tail_call(q, k, v, grad, table_of, tail_options: dict):
    """run(train): one call with the table `table_of()` and its tails, backward if train."""

    def run(train: bool):
        with torch.set_grad_enabled(train):
            out = table_bias_attention(q, k, v, scale=HEAD_DIM**-0.5, table=table_of(),
                                       **tail_options)  # fmt: skip
            if train:
                out.backward(grad)
            return out

    return run


def on_and_off(label: str, run, leaves: tuple, time, flash) -> list[dict]:
    """`run`'s forward and training, tails off then on, timed against flash; error: the
    largest relative difference of the output and the leaves' gradients between the two (off
    is the kernel the reference check above covers)."""
    results = {}
    for value in ("off", "on"):
        os.environ["POSATTN_TRITON_TABLE_TAILS"] = value
        for tensor in leaves:
            tensor.grad = None
        out = run(True)
        results[value] = [out.detach()] + [t.grad.clone() for t in leaves]
    error = max(relative_error(a, b.float()) for a, b in zip(*results.values(), strict=True))
    rows = []
    for train in (False, True):
        for value in ("off", "on"):
            os.environ["POSATTN_TRITON_TABLE_TAILS"] = value
            floor, ms = time(flash, train), time(run, train)
            kind = f"{'training' if train else 'forward'} {label} {value}"
            rows.append(dict(kind=kind, tile="", error=error, ok=error < 2e-2, ms=ms,
                             ratio=ms / floor))  # fmt: skip
            print(json.dumps(rows[-1]), flush=True)
    return rows


if __name__ == "__main__":
    main()
