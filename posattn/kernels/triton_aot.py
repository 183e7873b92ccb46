"""The Triton kernels of kernel="triton" compiled ahead of time for an NVIDIA architecture, on
any machine: Triton's compiler and its bundled ptxas need no GPU. The CPU interpreter (the
tests' way to run the kernels) executes them as Python and never meets the compiler, so this is
how a machine without a GPU learns that they compile, what shared memory each launch asks for
(`SHARED_LIMIT`), and - with ptxas's report - how many registers they take and whether they
spill (scripts/triton_resources.py).
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import tempfile
from collections import Counter
from dataclasses import dataclass

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from . import table_bias, triton_bias
from .triton_settings import (
    Tiles,
    diagonal_block,
    dk_dv_flags,
    kernel_flags,
    launch_options,
    schedule,
)

# Pointer arguments of the kernels by name (q, k, v and their gradients in the inputs' dtype).
TABLES = (
    "LSE",
    "DELTA",
    "TABLE",
    "SLOPES",
    "DTABLE",
    "UNTIE",
    "DUNTIE",
    "SEGMENTS",
    "DSEGMENTS",
    "DQ_ACC",
    "DFQ",
    "DFK",
)
INDICES = {"KEYS": "*i8", "SPANS": "*i32", "SEGMENT_IDS": "*i32", "SEED": "*i64"}
TENSORS = ("Q", "K", "V", "OUT", "DO", "DK", "DV_", "DQ", "FQ", "FK")
FLOATS = ("scale", "scale2", "keep_scale")
# Shared memory one block may take (bytes): Hopper (H100, H200), Ampere (A100).
SHARED_LIMIT = {90: 232448, 80: 166912}
TRITON_TYPES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}


@dataclass(frozen=True)
class Launch:
    """One kernel of one call, as the autograd function launches it."""

    name: str
    kernel: object
    constexprs: dict
    tile: Tiles


def launches(
    flags: dict, tiles: dict[str, Tiles], table_grad: bool, skew: str = "circular",
    key_major: bool = True, mask_tail: bool = True, raw_max: bool = True,
    per_block: bool = False, fused: bool = False,
) -> list[Launch]:  # fmt: skip
    """The three kernels of a forward and backward with these flags and tiles (keyed as
    `GPU_TILES`; `skew`: the dQ kernel's, POSATTN_TRITON_SKEW; `key_major`: the dK/dV kernel's
    orientation, POSATTN_TRITON_DK_DV_ORDER; `mask_tail`: whether the length leaves a partial
    last key block, as the forward's and dQ's MASK_TAIL; `raw_max`: the forward's RAW_MAX,
    a scale >= 0; `per_block`: dQ's PER_BLOCK, the gradients' copies per query block that
    torch.use_deterministic_algorithms asks for; `fused`: dK/dV's FUSED, the backward in one
    kernel, POSATTN_TRITON_BACKWARD)."""
    forward, dq, dk_dv = tiles["forward"], tiles["dq"], tiles["dk_dv"]
    segment_grad = flags["NUM_SEGMENTS"] > 0
    # The factors' gradients summed in the kernels, except where they must be deterministic.
    factor_sums = flags["FACTOR_AT"] > 0 and not per_block
    return [
        Launch("forward", triton_bias._forward,
               {**flags, "BLOCK_M": forward.block_m, "BLOCK_N": forward.block_n,
                "MASK_TAIL": mask_tail, "RAW_MAX": raw_max}, forward),
        Launch("dk_dv", triton_bias._backward_dk_dv,
               {**dk_dv_flags(flags), "BLOCK_M": dk_dv.block_m, "BLOCK_N": dk_dv.block_n,
                "KEY_MAJOR": key_major, "FUSED": fused, "TABLE_GRAD": fused and table_grad,
                "FACTOR_SUMS": factor_sums,
                "MASK_TAIL": fused and table_grad and mask_tail}, dk_dv),
        Launch("dq_dtable", triton_bias._backward_dq_dtable,
               {**flags, "BLOCK_M": dq.block_m, "BLOCK_N": dq.block_n, "TABLE_GRAD": table_grad,
                "SEGMENT_GRAD": segment_grad, "UNTIE_GRAD": flags["HAS_UNTIE"],
                "DIAGONALS": diagonal_block(dq, skew), "MASK_TAIL": mask_tail,
                "PER_BLOCK": per_block, "FACTOR_SUMS": factor_sums},
               dq),
    ]  # fmt: skip


def compile_launch(launch: Launch, dtype: torch.dtype, arch: int = 90):
    """The launch compiled for sm_`arch` (Triton's CompiledKernel: asm, metadata)."""
    fn = launch.kernel
    signature = {}
    for name in fn.arg_names:
        if name in launch.constexprs:
            signature[name] = "constexpr"
        elif name in TENSORS:
            signature[name] = f"*{TRITON_TYPES[dtype]}"
        elif name in TABLES:
            signature[name] = "*fp32"
        elif name in INDICES:
            signature[name] = INDICES[name]
        else:
            signature[name] = "fp32" if name in FLOATS else "i32"
    constexprs = {(fn.arg_names.index(k),): v for k, v in launch.constexprs.items()}
    # What a launch specialises on: 16-byte aligned tensors and strides divisible by 16 (a
    # contiguous [B, H, n, 64] tensor, the tables' padded rows); lengths are left general.
    aligned = [
        index
        for index, name in enumerate(fn.arg_names)
        if signature[name].startswith("*") or (signature[name] == "i32" and is_stride(name))
    ]
    attrs = {(index,): [["tt.divisibility", 16]] for index in aligned}
    source = ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)
    # The options a launch on the GPU compiles it with (FP fusion on, a register cap).
    constexprs = launch.constexprs
    options = schedule(launch.tile, torch.device("cuda"))
    options = launch_options(options, constexprs, constexprs.get("MASK_TAIL", False))
    return triton.compile(source, target=GPUTarget("cuda", arch, 32), options=options)


def is_stride(name: str) -> bool:
    """Strides a launch finds divisible by 16: of q, k, v, the output and the gradients
    (sqb, skh, sdom, ...: contiguous with a head of 64) and of the tables' aligned copies
    (stride_th, stride_tk: padded to 16). Not dT's rows (n_q + n_k - 1) nor the key and segment
    rows (n_k)."""
    tensor_stride = name.startswith("s") and name.isalpha() and len(name) in (3, 4)
    return tensor_stride or name in ("stride_th", "stride_tk")


def resources(compiled, arch: int = 90) -> dict:
    """Registers, spills and stack per thread from ptxas's report, shared memory per block."""
    from triton.backends.nvidia.compiler import get_ptxas

    with tempfile.NamedTemporaryFile("w", suffix=".ptx") as ptx:
        ptx.write(compiled.asm["ptx"])
        ptx.flush()
        report = subprocess.run(
            [get_ptxas(arch).path, "-v", f"--gpu-name=sm_{arch}a", ptx.name, "-o", "/dev/null"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
    text = report.stdout + report.stderr

    def number(pattern: str) -> int:
        found = re.search(pattern, text)
        return int(found.group(1)) if found else 0

    return dict(
        registers=number(r"Used (\d+) registers"),
        spill_stores=number(r"(\d+) bytes spill stores"),
        spill_loads=number(r"(\d+) bytes spill loads"),
        stack=number(r"(\d+) bytes stack frame"),
        shared=compiled.metadata.shared,
    )


def matrix_products(compiled) -> dict:
    """How many matrix-multiply instructions of each kind the PTX holds: Hopper's warpgroup
    MMA (wgmma.mma_async, what tl.dot should become on sm_90) and the older warp-level
    mma.sync (what it falls back to, e.g. for a product under 64 rows)."""
    ptx = compiled.asm["ptx"]
    return {"wgmma": len(re.findall(r"\bwgmma\.mma_async", ptx)),
            "mma.sync": len(re.findall(r"\bmma\.sync", ptx))}  # fmt: skip


def async_copies(compiled) -> dict:
    """How many copies into shared memory (cp.async) the PTX holds of each cache operator:
    "ca" cached in L1 as well as L2, "cg" in L2 alone (Triton's choice for a 16-byte copy
    unless the load asks: `_table_bias`'s TABLE_L1)."""
    ptx = compiled.asm["ptx"]
    return {kind: len(re.findall(rf"\bcp\.async\.{kind}\.shared", ptx)) for kind in ("ca", "cg")}


def sass(compiled) -> list[tuple[int, str]]:
    """The kernel's SASS as (address, instruction) pairs, read by Triton's bundled cuobjdump."""
    from triton import knobs

    with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
        cubin.write(compiled.asm["cubin"])
        cubin.flush()
        listing = subprocess.run(
            [knobs.nvidia.cuobjdump.path, "-sass", cubin.name],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
    return [
        (int(found.group(1), 16), found.group(2).strip())
        for found in re.finditer(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", listing)
    ]


def loop_instructions(compiled) -> int:
    """Instructions a warp issues per step of the kernel's main loop (the last backward
    branch's body) on its common path: without the regions forward branches inside the loop
    skip, which hold what only a few tiles run (TUPE's untie where a tile holds the [CLS] row
    or column, its column sum) or a predicated atomic's guard. The kernels' work per score is
    in that loop; the rest runs once per program. With a table's flat tails, the last loop is
    a tail's (`each_loop_instructions`)."""
    counts = each_loop_instructions(compiled)
    return counts[-1] if counts else 0


def each_loop_instructions(compiled) -> list[int]:
    """`loop_instructions` of every loop, in the order of the code: one per backward branch
    (a kernel with flat tails has three loops over its blocks: a tail's, the table's, the
    other tail's)."""
    return [len(body) for body in each_loop_body(compiled)]


def each_loop_body(compiled) -> list[list[str]]:
    """The SASS instructions of every loop's common path (`loop_instructions`), in the
    order of the code."""
    listing = sass(compiled)
    bodies = []
    for address, instruction in listing:
        target = _branch_target(instruction)
        if target is None or target >= address:
            continue
        start, end = target, address
        skipped = set()
        for inner, branch in listing:
            forward = _branch_target(branch)
            if start <= inner <= end and forward is not None and forward > inner:
                skipped.update(range(inner + 1, forward))
        bodies.append(
            [text for other, text in listing if start <= other <= end and other not in skipped]
        )
    return bodies


def opcodes(instructions: list[str]) -> Counter:
    """How many of each SASS opcode (FFMA, MUFU, HGMMA, ...: without its predicate and
    modifiers) the instructions hold: what a loop spends its issue slots on."""
    return Counter(
        re.sub(r"^@!?U?P\w+\s+", "", text).split()[0].split(".")[0] for text in instructions
    )


def _branch_target(instruction: str) -> int | None:
    found = re.search(r"BRA\s+(?:`\(\.L_x_\d+\)\s*)?0x([0-9a-f]+)", instruction)
    return int(found.group(1), 16) if found else None


# One Hopper SM's shared memory (bytes; each block also reserves 1 KiB), registers, warps.
SM_SHARED, SM_REGISTERS, SM_WARPS = 233472, 65536, 64


def warps_per_sm(used: dict, tile: Tiles) -> int:
    """How many warps of this launch one Hopper SM holds at once (`resources`' registers and
    shared memory; registers are allocated 8 per thread at a time): what the SM can switch
    between while one waits. The earlier forward sweep's fastest tile held 16, its slowest
    (fewest instructions per score, 255 registers, 128 KiB of shared memory) 4."""
    registers = -(-used["registers"] // 8) * 8 * 32 * tile.num_warps
    blocks = min(
        SM_REGISTERS // registers,
        SM_SHARED // (used["shared"] + 1024),
        SM_WARPS // tile.num_warps,
    )
    return blocks * tile.num_warps


def instructions_per_score(launch: Launch, loop: int) -> float:
    """Warp instructions per 1000 scores in the main loop: its `loop_instructions` times the
    program's warps, over the scores of one step's tile."""
    scores = launch.tile.block_m * launch.tile.block_n
    return loop * launch.tile.num_warps * 1000 / scores


def call_flags(dtype: torch.dtype, head: int, value_head: int | None = None, **rules) -> dict:
    """`kernel_flags` for a call with a table and these masking rules (has_keys, causal,
    num_segments, has_untie); values as wide as q and k unless value_head says otherwise."""
    defaults = dict(has_table=True, has_keys=False, causal=False, num_segments=0)
    return kernel_flags(dtype, head, value_head or head, **{**defaults, **rules})


@dataclass(frozen=True)
class RecordedLaunch:
    """One launch the stand-in GPU took: the kernel's name, its grid, the arguments given to
    its launcher, the compiled kernel (its hash: one per specialisation) and whether launch
    metadata came with it (Triton's own path gives it; `DirectLaunch` gives none)."""

    name: str
    grid: tuple[int, int, int]
    arguments: tuple
    kernel: str
    with_metadata: bool


class _StandInLauncher:
    """Takes the place of Triton's compiled CUDA launcher: records the launch, runs nothing."""

    def __init__(self, source, metadata):
        self.name, self.kernel = metadata.name, metadata.hash

    def __call__(self, grid_0, grid_1, grid_2, stream, function, packed, meta, enter, exit_, *args):
        if _STAND_IN.launches is not None:
            grid = (grid_0, grid_1, grid_2)
            launch = RecordedLaunch(self.name, grid, args, self.kernel, meta is not None)
            _STAND_IN.launches.append(launch)


class _StandInUtils:
    def load_binary(self, name, kernel, shared, device):
        # (module, function, registers, spills, threads a block may have)
        return object(), 0, 0, 0, 1024

    def unload_module(self, module):
        pass

    def get_device_properties(self, device):
        return {"max_shared_mem": SHARED_LIMIT[90], "multiprocessor_count": 132,
                "max_num_regs": SM_REGISTERS, "warpSize": 32}  # fmt: skip


class _StandInDriver:
    """Triton's active driver for an sm_90 GPU that is not there."""

    utils = _StandInUtils()
    launcher_cls = _StandInLauncher
    launches: list[RecordedLaunch] | None = None

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def get_current_target(self):
        return GPUTarget("cuda", 90, 32)

    def is_active(self):
        return True


_STAND_IN = _StandInDriver()


@contextlib.contextmanager
def stand_in_gpu(*modules, record: bool = True):
    """kernel="triton" on CPU tensors through Triton's own launch path for an sm_90 GPU:
    binding and specialising the arguments, compiling (once per specialisation) and caching
    as a launch on the GPU does, at the GPU's tiles and schedules; the launch itself runs
    nothing and is recorded in the list this yields. Outputs hold garbage. What it is for:
    the host's side of a call - the part a GPU call waits on at n <= 1024 - timed and
    profiled on a machine without a GPU (scripts/triton_host.py), and the launch path tested
    where only the interpreter runs otherwise. The kernels must be built for the compiler
    (TRITON_INTERPRET unset when posattn.kernels.triton_bias was imported). `modules`: other
    versions of triton_bias to run the same way (the script's --against). record=False: the
    list stays empty (a timing loop: a recorded launch keeps its tensors alive, so the memory
    of every call would stay taken and each call allocate anew); `recording()` records a
    stretch of it."""
    from triton.runtime.driver import driver

    if not isinstance(triton_bias._forward, triton.runtime.JITFunction):
        raise RuntimeError(
            "stand_in_gpu: the kernels were built for the interpreter (TRITON_INTERPRET=1 "
            "when posattn.kernels.triton_bias was imported); it needs them compiled"
        )
    modules = (triton_bias, *modules)
    # The tile choosers where each version's `call_settings` reads them (its own module, or
    # triton_settings).
    namespaces = [module.call_settings.__globals__ for module in modules]
    chosen = [(space, space["tiles"], space["schedule"]) for space in namespaces]
    cuda = torch.device("cuda")
    previous = driver._active  # None where no driver was made yet (a machine without a GPU)
    recorded: list[RecordedLaunch] = []
    # Triton keys its compiled kernels by device index, the stand-in's 0 as a real GPU's: a
    # real kernel found inside would be handed CPU pointers, a stand-in one found after would
    # launch nothing. Both caches are emptied on the way in and, with the stand-in still
    # active (whose unload a dropped kernel calls), on the way out.
    _forget_compiled(modules)
    driver.set_active(_STAND_IN)
    _STAND_IN.launches = recorded if record else None
    for space, tiles, choose_schedule in chosen:
        space["tiles"] = lambda device, kind, tiles=tiles: tiles(cuda, kind)
        space["schedule"] = lambda tile, device, chooser=choose_schedule: chooser(tile, cuda)
    # The kernel's own refusal of CPU tensors outside the interpreter, lifted for the stand-in.
    unavailable = table_bias.unavailable
    table_bias.unavailable = lambda device: unavailable(cuda)
    try:
        yield recorded
    finally:
        for space, tiles, choose_schedule in chosen:
            space["tiles"], space["schedule"] = tiles, choose_schedule
        table_bias.unavailable = unavailable
        _STAND_IN.launches = None
        _forget_compiled(modules)
        driver.set_active(previous)


@contextlib.contextmanager
def recording():
    """The stand-in's launches inside the block, in the list this yields (inside a
    `stand_in_gpu(record=False)`)."""
    kept = _STAND_IN.launches
    _STAND_IN.launches = recorded = []
    try:
        yield recorded
    finally:
        _STAND_IN.launches = kept


# The three kernels of a call, as triton_bias names them.
KERNEL_NAMES = ("_forward", "_backward_dq_dtable", "_backward_dk_dv")


def _forget_compiled(modules) -> None:
    """Every compiled kernel of these versions of triton_bias dropped from Triton's caches and
    from their direct launches (the next launch finds or compiles them again)."""
    for module in modules:
        for name in KERNEL_NAMES:
            getattr(module, name).device_caches.clear()
        getattr(module, "_DIRECT", {}).clear()
