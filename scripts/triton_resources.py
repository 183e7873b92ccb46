"""What each tile of kernel="triton" asks of a Hopper GPU, read on any machine: the kernels
compiled for sm_90 (`posattn.kernels.triton_aot`) and ptxas's report of registers per thread,
spills and shared memory per block - the questions to answer before spending GPU minutes.

    PYTHONPATH=. python scripts/triton_resources.py [--dtype bfloat16] [--head 64]
"""

from __future__ import annotations

import argparse

import torch

from posattn.kernels.triton_aot import call_flags, compile_launch, launches, resources
from posattn.kernels.triton_bias import Tiles

# The candidates of scripts/triton_tiles.py's sweep.
CANDIDATES = ["128,32,4,3", "128,64,4,3", "64,64,4,3", "64,32,4,3", "64,32,4,2", "32,32,4,2"]
RULES = {"full": {}, "padding": {"has_keys": True}, "causal": {"has_keys": True, "causal": True}}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--head", type=int, default=64)
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    print("rules    tile          kernel     registers  spill st/ld  stack  shared")
    for rule, options in RULES.items():
        flags = call_flags(dtype, args.head, **options)
        for text in CANDIDATES:
            tile = Tiles(*(int(part) for part in text.split(",")))
            for launch in launches(flags, tile, tile, table_grad=True):
                used = resources(compile_launch(launch, dtype))
                print(
                    f"{rule:8} {text:13} {launch.name:10} {used['registers']:9} "
                    f"{used['spill_stores']:6}/{used['spill_loads']:<6} {used['stack']:5} "
                    f"{used['shared']:7}"
                )


if __name__ == "__main__":
    main()
