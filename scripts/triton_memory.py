"""The extra peak memory of kernel="triton" attention calls, counted without a GPU.

Through `posattn.kernels.triton_aot.stand_in_gpu` a call allocates what it would on a GPU
(its kernels write nothing), and `posattn.lab.bench.memory.extra_peak_mib` counts what it
holds at once beyond what it started with: `posattn bench`'s "extra MiB"
(torch.cuda.max_memory_allocated over one call), which it gave to the MiB for T5 and TUPE-R
(q and k folded) at n = 8192 where an H200 measured them. One training call per encoding and
length (bench's shapes: B = H = 8, d_h = 64, bf16), a low-rank bias's factors read beside q
and k and folded into them (POSATTN_TRITON_FACTORS).

    PYTHONPATH=. python scripts/triton_memory.py [--lengths 1024,4096,8192]
        [--encodings t5,tupe-r,tupe-a,diet-abs]
"""

from __future__ import annotations

import argparse
import os

os.environ.pop("TRITON_INTERPRET", None)  # the kernels built for the compiler

from posattn.kernels import triton_aot
from posattn.lab.bench import memory
from posattn.lab.bench.attention_rows import attention_call
from posattn.lab.bench.settings import BenchSettings


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lengths", default="1024,4096,8192")
    parser.add_argument("--encodings", default="t5,tupe-r,tupe-a,diet-abs")
    args = parser.parse_args()
    settings = BenchSettings(dtype="bfloat16")
    print(f"{'encoding':10s} {'n':>6s} {'beside MiB':>11s} {'folded MiB':>11s}")
    with triton_aot.stand_in_gpu(record=False):
        for encoding in args.encodings.split(","):
            for n in map(int, args.lengths.split(",")):
                peaks = []
                for layout in ("beside", "folded"):
                    os.environ["POSATTN_TRITON_FACTORS"] = layout
                    call = attention_call(encoding, settings, n, True, "cpu", kernel="triton")
                    call()  # what a first call builds and keeps is not the call's
                    peaks.append(memory.extra_peak_mib(call))
                    del call
                print(f"{encoding:10s} {n:6d} {peaks[0]:11.0f} {peaks[1]:11.0f}")


if __name__ == "__main__":
    main()
