"""What each tile of kernel="triton" asks of a Hopper GPU, read on any machine: the kernels
compiled for sm_90 (`posattn.kernels.triton_aot`) and ptxas's report of registers per thread,
spills and shared memory per block, how many of each kind of matrix instruction the PTX
holds (warpgroup MMA, or the older mma.sync a product under 64 rows falls back to), and the
instructions each warp issues per step of the main loop, also per 1000 scores (the loop's
body times the warps over one tile's scores: where the issue rate bounds a kernel, its time
per score), and how many warps an SM holds at once (registers and shared memory: what hides
the latency; neither count alone ordered the earlier forward sweep's timings) - the
questions to answer before spending GPU minutes. Each kernel at the
candidates of scripts/triton_tiles.py's sweep; "full" is a length that fills its key blocks
(no padding, no causality, no tail mask); "flat" the same with the table's flat tails in
loops of their own (`offset_tails`: T5's buckets), "lines" with linear ones and no table
gradient (ALiBi), "padflat" padding with flat tails: "each loop" lists every loop's count, a
tail's, the table's, the other tail's, and with padding and --key-runs on (off by default, as
POSATTN_TRITON_KEY_RUNS) each of those in three, the masked blocks before a run of real
keys, the blocks inside it, the masked ones after. With --opcodes, each kernel at its
default tile also lists what its main loop issues, opcode by opcode (`triton_aot.opcodes`).

    PYTHONPATH=. python scripts/triton_resources.py [--dtype bfloat16] [--head 64]
        [--key-runs on|off] [--opcodes]
"""

from __future__ import annotations

import argparse

import torch

from posattn.kernels.triton_aot import (
    call_flags,
    compile_launch,
    each_loop_body,
    each_loop_instructions,
    instructions_per_score,
    launches,
    loop_instructions,
    matrix_products,
    opcodes,
    resources,
    warps_per_sm,
)
from posattn.kernels.triton_settings import GPU_TILES, Tiles
from scripts.triton_tiles import CANDIDATES, DK_DV_BEFORE

RULES = {"full": {}, "padding": {"has_keys": True}, "causal": {"has_keys": True, "causal": True},
         "flat": {"tails": True}, "lines": {"tails": True, "linear_tails": True},
         "padflat": {"has_keys": True, "tails": True}}  # fmt: skip
LAUNCH_OF = {"forward": "forward", "dq": "dq_dtable", "dk_dv": "dk_dv"}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--head", type=int, default=64)
    parser.add_argument("--key-runs", default="off", choices=["off", "on"],
                        help="POSATTN_TRITON_KEY_RUNS: padded calls' blocks inside a run of "
                        "real keys unmasked (on) or every block masked (off)")  # fmt: skip
    parser.add_argument(
        "--opcodes", action="store_true", help="each default tile's main loop, opcode by opcode"
    )
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    columns = (
        "registers  spill st/ld  stack  shared  wgmma  mma.sync  loop  per 1k  warps/SM  each loop"
    )
    print(f"rules    kernel  tile          order  {columns}")
    # Each kernel's candidates, and dK/dV as it ran before its own tile (query-major).
    runs = [(kind, text, True) for kind, texts in CANDIDATES.items() for text in texts]
    runs.append(("dk_dv", DK_DV_BEFORE, False))
    for rule, options in RULES.items():
        flags = call_flags(dtype, args.head, key_runs=args.key_runs == "on", **options)
        for kind, text, key_major in runs:
            tile = Tiles(*(int(part) for part in text.split(",")))
            built = launches(
                flags,
                {**GPU_TILES, kind: tile},
                not options.get("linear_tails"),
                key_major=key_major,
                mask_tail=False,
            )
            launch = next(launch for launch in built if launch.name == LAUNCH_OF[kind])
            compiled = compile_launch(launch, dtype)
            used, products = resources(compiled), matrix_products(compiled)
            loop, each = loop_instructions(compiled), each_loop_instructions(compiled)
            order = "" if kind != "dk_dv" else "key" if key_major else "query"
            print(
                f"{rule:8} {kind:7} {text:13} {order:6} {used['registers']:9} "
                f"{used['spill_stores']:6}/{used['spill_loads']:<6} {used['stack']:5} "
                f"{used['shared']:7} {products['wgmma']:6} {products['mma.sync']:9} "
                f"{loop:5} {instructions_per_score(launch, loop):7.0f} "
                f"{warps_per_sm(used, tile):9}  {'/'.join(map(str, each))}"
            )
            if args.opcodes and key_major and text == GPU_TILES[kind].as_text():
                counts = opcodes(each_loop_body(compiled)[-1]).most_common()
                print("  main loop:", ", ".join(f"{name} {count}" for name, count in counts))


if __name__ == "__main__":
    main()
