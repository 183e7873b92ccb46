"""What a call of kernel="triton" chooses from its device and the environment: each kernel's
tiles and launch schedule, the backward's and the launches' choices (POSATTN_TRITON_*
variables, read once per distinct environment: `call_settings`), and the compile-time flags
the kernels of one call share."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import torch

from ..errors import PosAttnConfigError


@dataclass(frozen=True)
class Tiles:
    """One launch's tile shape and its Triton schedule (warps per program, pipeline depth,
    and optionally a cap on registers per thread: `schedule`)."""

    block_m: int
    block_n: int
    num_warps: int = 4
    num_stages: int = 2
    max_registers: int | None = None

    def as_text(self) -> str:
        """The tile as POSATTN_TRITON_FORWARD / _DQ / _DK_DV give it (`tiles`)."""
        return ",".join(str(value) for value in vars(self).values() if value is not None)


# With attention dropout, dK/dV's default tile holds 32 queries instead of 64: at 64 x 128 the
# Philox draws spilled registers (40 bytes per thread for T5, 248 for TUPE-R's 128-wide q and
# k; sm_90, bf16), at 32 x 128 none (244 and 255 registers), at 2006 and 2164 warp
# instructions per 1000 scores against 1872 and 2242. POSATTN_TRITON_DK_DV holds with dropout
# too (`_settings`).
DROPOUT_DK_DV = Tiles(32, 128, 8, 2)
# Under the CPU interpreter: small and unequal tiles, so that test lengths cross several
# blocks of each kind (warps and stages mean nothing there).
INTERPRETER_TILES = Tiles(32, 16)
# On a GPU, per kernel: "forward"; "dq", dQ and the tables' gradients (a block of queries
# held, key blocks stepped over); "dk_dv" (a block of keys held, query blocks stepped over).
# Each can be overridden with POSATTN_TRITON_FORWARD / _DQ / _DK_DV =
# "block_m,block_n,num_warps,num_stages[,max_registers]". Forward and dQ: the fastest of
# scripts/triton_tiles.py's sweeps (bf16, B=8, H=8, n=4096, d_h=64, T5's table; the forward
# 2.30x / 2.31x flash SDPA on an H100 in two runs against 2.57x / 2.61x with 4 warps, a tie on
# the H200). dK/dV ran at dQ's 64 x 32 until those tiles were split: 32 keys held, so its
# products with the keys as rows (dV += P^T dO, dK += dS^T Q) had 32 rows, fewer than Hopper's
# warpgroup MMA takes (64), and compiled to mma.sync, and each program re-read Q and dO for 32
# keys. Its tile holds 128 keys and computes the scores key-major (`_scores`), so every product
# has 128 rows: chosen from sm_90 builds (all warpgroup MMA, no spills: tests/
# test_triton_compile.py), not yet timed on a GPU - the tile sweep times it.
GPU_TILES = {
    "forward": Tiles(128, 32, 8, 3),
    "dq": Tiles(64, 32, 4, 3),
    "dk_dv": Tiles(64, 128, 8, 2),
}


def tiles(device: torch.device, kind: str) -> Tiles:
    """The tiles of the `kind` kernel (a key of `GPU_TILES`): `GPU_TILES` or the environment's
    override on a GPU, `INTERPRETER_TILES` under the CPU interpreter."""
    if device.type != "cuda":
        return INTERPRETER_TILES
    variable = f"POSATTN_TRITON_{kind.upper()}"
    text = os.environ.get(variable)
    if not text:
        return GPU_TILES[kind]
    parts = text.split(",")
    try:
        chosen = Tiles(*(int(part) for part in parts)) if len(parts) in (4, 5) else None
    except ValueError:
        chosen = None
    sizes = () if chosen is None else (chosen.block_m, chosen.block_n)
    cap = None if chosen is None else chosen.max_registers
    if (
        chosen is None
        or any(size < 16 or size & (size - 1) for size in sizes)
        or (cap is not None and not MIN_REGISTERS <= cap <= MAX_REGISTERS)
    ):
        raise PosAttnConfigError(
            f"{variable}={text!r}: expected block_m,block_n,num_warps,num_stages with "
            "block sizes powers of two >= 16, then optionally a cap on registers per thread "
            f"from {MIN_REGISTERS} to {MAX_REGISTERS}, e.g. '128,64,8,3' or '128,64,8,2,128'"
        )
    return chosen


# Where the dQ kernel adds each tile's diagonal sums: "shared", one [H, L] table for every
# batch element, or "per-batch", a table per element summed after the kernel (H100, T5 at
# n=4096, forward + backward against flash SDPA: 2.71x and 2.77x, in an earlier run 2.72x and
# 2.66x: a tie). Chosen by POSATTN_TRITON_TABLE_GRAD (scripts/triton_tiles.py times both).
# A kernel of its own over block diagonals, one skew per diagonal instead of per tile, ran
# 3.22x at its best tile: it recomputes P and dP, loads four tiles per step where dQ loads
# two, and its causal skip kept the loop from being pipelined (commit a19eddf, removed).
TABLE_GRAD_MODES = ("shared", "per-batch")


def environment_choice(variable: str, choices: tuple[str, ...]) -> str:
    """The environment's value of `variable`, one of `choices` (default: the first)."""
    text = os.environ.get(variable, choices[0])
    if text not in choices:
        raise PosAttnConfigError(
            f"{variable}={text!r}: expected one of {', '.join(map(repr, choices))}"
        )
    return text


def table_grad_mode() -> str:
    return environment_choice("POSATTN_TRITON_TABLE_GRAD", TABLE_GRAD_MODES)


# What ptxas takes as a cap on registers per thread (Triton's `maxnreg`).
MIN_REGISTERS, MAX_REGISTERS = 24, 255


def schedule(tile: Tiles, device: torch.device) -> dict:
    """The launch options of a tile on a GPU (the interpreter takes none). Multiplies and
    adds fused (FMA) by request: Triton 3.9 warns that its default turns that off in 3.10,
    and the kernels' exponents count on it (`_forward_step`'s PLAIN). A tile's register cap
    becomes Triton's `maxnreg` (`launch_options` drops it for wide heads)."""
    if device.type != "cuda":
        return {}
    options = dict(num_warps=tile.num_warps, num_stages=tile.num_stages, enable_fp_fusion=True)
    if tile.max_registers is not None:
        options["maxnreg"] = tile.max_registers
    return options


def launch_options(schedule: dict, flags: dict, mask_tail: bool = False) -> dict:
    """A kernel's `schedule` for a launch with these flags: a register cap holds where q and
    k are at most 64 wide and the keys fill whole blocks (sm_90, the forward at 128 x 64
    with 8 warps capped to 128: no spill but 8 bytes per thread with padding and flat tails,
    16 warps per SM where flat tails took 164 registers and 8); wider heads (TUPE-R's fold,
    128: the forward took 180 registers at 128 x 32) and a partial last key block (its mask:
    84 bytes spilled with flat tails) take what they need."""
    if "maxnreg" not in schedule or (flags["BLOCK_D"] <= 64 and not mask_tail):
        return schedule
    return {name: value for name, value in schedule.items() if name != "maxnreg"}


# How the dQ kernel skews each half of a dS tile for the table's diagonal sums: "circular"
# (rotated in place, 32 wide, where a half is square, its sums carried from one key block to
# the next: one atomic per diagonal per block; else wide) or "wide" (zero-padded to a power of
# two >= the diagonals it spans: 64 for 32 x 32, four atomics per diagonal per block). Chosen
# by POSATTN_TRITON_SKEW; the tile sweep times both. Circular is the default on sm_90 builds'
# counts (dQ's loop 390 instructions per warp and step against 638, T5-like table, 64 x 32),
# not yet on a GPU's clock; wide was measured (2.71x flash SDPA, T5 training at n=4096).
SKEWS = ("circular", "wide")


def skew_choice() -> str:
    return environment_choice("POSATTN_TRITON_SKEW", SKEWS)


# The orientation of the dK/dV kernel's score tiles: "key-major" ([keys, queries], every
# product with the keys as its rows; the default, see GPU_TILES) or "query-major" ([queries,
# keys] turned for those products, as before). Chosen by POSATTN_TRITON_DK_DV_ORDER; the tile
# sweep times both.
DK_DV_ORDERS = ("key-major", "query-major")


def dk_dv_order() -> str:
    return environment_choice("POSATTN_TRITON_DK_DV_ORDER", DK_DV_ORDERS)


# How the backward runs: "split", a dQ kernel (which also reduces the tables' gradients) and a
# dK/dV kernel, each recomputing the scores, probabilities and dP (7 products per block
# pair), or "fused", FlashAttention-2's one kernel: dK/dV key-major adds each block's dQ to a
# float32 sum with atomics (5 products per pair) and, where a tile holds twice as many keys
# as queries, a learned table's diagonal sums (dQ's circular skew, carried across query
# blocks); D_i = rowsum(dO O) by torch before it. "fused" serves calls without TUPE's untie
# or DIET's segments, outside torch.use_deterministic_algorithms (its atomics sum dQ in the
# order blocks run), with dK/dV key-major; other calls run split. sm_90 (bf16, d_h=64), warp
# instructions per 1000 scores, fused against split's dK/dV + dQ: no table 439 / 708, a
# frozen table 535 / 932, a learned one 868 / 1178 (default tile, spill-free); with T5's flat
# tails the learned table's loops spill 60 bytes per thread there, none at 32 x 64
# (POSATTN_TRITON_DK_DV=32,64,4,2). Chosen by POSATTN_TRITON_BACKWARD; not yet on a GPU's
# clock (the tile sweep times it).
BACKWARDS = ("split", "fused")


def backward_choice() -> str:
    return environment_choice("POSATTN_TRITON_BACKWARD", BACKWARDS)


# Where a low-rank bias's factors (TUPE's absolute part, DIET-ABS) meet the kernels: "beside"
# q and k, read from the factors themselves (`triton_factors`; no [B, H, n, d + r] copy of q
# and k, the factors' gradients summed in the kernels: TUPE-R's extra peak at n = 8192, bf16,
# B = H = 8 on the stand-in GPU 425 MiB against 745, which the H200 measured for the copy),
# or "folded" into a copy of q and k (as before; its loops issue 3-12% fewer instructions,
# sm_90). Chosen by POSATTN_TRITON_FACTORS.
FACTOR_LAYOUTS = ("beside", "folded")


def factors_choice() -> str:
    return environment_choice("POSATTN_TRITON_FACTORS", FACTOR_LAYOUTS)


# How a kernel is launched: "direct", Triton's compiled launcher called with the kernel
# kept per key (`triton_launch.DirectLaunch`: a third of a T5 training call's host time went
# to Triton's launch path), or "triton", through `kernel[grid](...)` each time. Chosen by
# POSATTN_TRITON_LAUNCH; the interpreter always takes Triton's path.
LAUNCHES = ("direct", "triton")


def launch_choice() -> str:
    return environment_choice("POSATTN_TRITON_LAUNCH", LAUNCHES)


# Whether a table's tails (`table_bias_attention`'s `tails`: T5's buckets past max_distance,
# DIET-REL's clipped offsets, ALiBi's lines) run in loops of their own without reading the
# table ("on") or read it like any other entry ("off"). Chosen by POSATTN_TRITON_TABLE_TAILS;
# the tile sweep times both.
TAIL_CHOICES = ("on", "off")


def tails_choice() -> str:
    return environment_choice("POSATTN_TRITON_TABLE_TAILS", TAIL_CHOICES)


# Whether the forward and dQ run the key blocks inside a run of visible keys (padding on
# either side, `key_spans`) in loops of their own without the key mask ("on") or mask every
# key block of a padded call as they did ("off", the default: the kernel measured on a GPU).
# On sm_90 builds (scripts/triton_resources.py --key-runs on / off; T5-like table, d_h=64,
# default tiles) the unmasked loops issue 6-32% fewer instructions per step than the one
# masked loop and the masked ones around them up to 11% more, but take more registers: the
# causal padded forward 148 against 112, two blocks per SM down to one (16 warps to 8), the
# padded dQ 176 against 164 (12 to 8). Which wins is the GPU's to say: chosen by
# POSATTN_TRITON_KEY_RUNS, the tile sweep times both.
KEY_RUN_CHOICES = ("off", "on")


def key_runs_choice() -> str:
    return environment_choice("POSATTN_TRITON_KEY_RUNS", KEY_RUN_CHOICES)


# Where a table's loads are cached: "l1", copied into shared memory through L1
# (cp.async.ca), or "l2", through L2 alone (cp.async.cg, what Triton makes of a 16-byte copy
# unasked, as every GPU run so far had it). A tile's rows read overlapping runs of the
# table's aligned copies: a 128 x 32 tile of the forward reads 16 KiB, of 2.5 KiB of distinct
# 32-byte sectors, and the next key block 0.5 KiB of new ones; through L2 alone all 16 KiB
# move every key block, twice the block's K and V (8 KiB in bf16). On sm_90 builds the two
# differ in the copies' cache operator only: registers and loop instructions are the same
# (tests/test_triton_compile.py). "l1" is the default on that count of bytes, not yet on a
# GPU's clock: chosen by POSATTN_TRITON_TABLE_CACHE, the tile sweep times both. Triton 3.9
# honours it; 3.6 to 3.8 compile a 16-byte copy through L2 whatever the load asks.
TABLE_CACHES = ("l1", "l2")


def table_cache_choice() -> str:
    return environment_choice("POSATTN_TRITON_TABLE_CACHE", TABLE_CACHES)


def diagonal_block(tile: Tiles, skew: str = "circular") -> int:
    """DIAGONALS of the dQ kernel: BLOCK_N for the circular skew, where the tile is two squares
    (`_carried_diagonal_sums`), else the wide skew's width for each half of the tile's rows
    (`_add_diagonal_sums`)."""
    if skew == "circular" and tile.block_m // 2 == tile.block_n:
        return tile.block_n
    return power_of_two_at_least(tile.block_m // 2 + tile.block_n - 1)


def circular_skew(settings: CallSettings) -> bool:
    """Whether the call's dQ kernel skews its tiles circularly (the skew chosen and a tile of
    two squares): each query block then adds each entry of the table's gradient at most
    twice, the condition of deterministic gradients (`triton_bias.gradient_mode`)."""
    tile = settings.tiles["dq"]
    return diagonal_block(tile, settings.skew) == tile.block_n


# Host-side integer helpers instead of triton.cdiv / triton.next_power_of_2: Triton 3.9 makes
# those constexpr functions with a call wrapper (ten calls cost a call about 50 us under the
# profiler; scripts/triton_host.py --profile), and at n=1024 a GPU call waits on the host.
def power_of_two_at_least(size: int) -> int:
    return 1 << max(0, size - 1).bit_length()


def blocks(length: int, block: int) -> int:
    """How many blocks of `block` cover `length`."""
    return -(-length // block)


def rounded_up(length: int, block: int) -> int:
    """`length` rounded up to a whole number of blocks."""
    return blocks(length, block) * block


def head_block(size: int) -> int:
    """A power of two >= the head size (tl.arange), at least 16 (tl.dot)."""
    return max(16, power_of_two_at_least(size))


def kernel_flags(
    dtype: torch.dtype, D: int, DV: int, *, has_table: bool, has_keys: bool, causal: bool,
    num_segments: int, has_untie: bool = False, tails: bool = False, linear_tails: bool = False,
    key_runs: bool = False, dropout: bool = False, factor_at: int = 0, table_l1: bool = True,
) -> dict:  # fmt: skip
    """The compile-time flags every kernel of one call shares (RUNS, the forward's and dQ's
    alone: `key_runs_choice`; DROPOUT, attention dropout; FACTOR_AT, the column from which a
    low-rank bias's factors are read beside q and k, 0 without: `triton_factors`; TABLE_L1,
    the table's loads cached in L1: `table_cache_choice`)."""
    return dict(
        HAS_TABLE=has_table,
        RUNS=has_keys and key_runs,
        TAILS=has_table and tails,
        LINEAR=has_table and tails and linear_tails,
        HAS_UNTIE=has_untie,
        HAS_KEYS=has_keys,
        CAUSAL=causal,
        PRECISION="ieee" if dtype == torch.float32 else "tf32",
        NUM_SEGMENTS=num_segments,
        BLOCK_D=head_block(D),
        BLOCK_DV=head_block(DV),
        EVEN_D=head_block(D) == D,
        EVEN_DV=head_block(DV) == DV,
        DROPOUT=dropout,
        FACTOR_AT=factor_at,
        TABLE_L1=has_table and table_l1,
    )


def dk_dv_flags(flags: dict) -> dict:
    """The dK/dV kernel's flags: without the table's tails where q and k are wider than 64
    (TUPE-R's fold, 128): with them, Triton 3.6 (the lent GPU image's) spilled 256 bytes per
    thread in its key-major 64 x 128 tile, holding 128-wide keys and their gradient; it reads
    its table there as before (3.9 fitted it in 255 registers). It masks every block of a
    padded call (no RUNS: a loop of its own for the key blocks inside a run of visible keys
    spilled ALiBi's dK/dV, 16 bytes per thread)."""
    flags = {name: value for name, value in flags.items() if name != "RUNS"}
    if flags["BLOCK_D"] <= 64:
        return flags
    return {**flags, "TAILS": False, "LINEAR": False}


# The environment variables a call's choices are read from: each kernel's tiles, then the
# backward's and the launches' choices.
SETTING_VARIABLES = (
    *(f"POSATTN_TRITON_{kind.upper()}" for kind in GPU_TILES),
    "POSATTN_TRITON_DK_DV_ORDER",
    "POSATTN_TRITON_SKEW",
    "POSATTN_TRITON_TABLE_GRAD",
    "POSATTN_TRITON_LAUNCH",
    "POSATTN_TRITON_TABLE_TAILS",
    "POSATTN_TRITON_KEY_RUNS",
    "POSATTN_TRITON_BACKWARD",
    "POSATTN_TRITON_TABLE_CACHE",
)
_ENCODED_NAMES = (
    tuple(map(os.environ.encodekey, SETTING_VARIABLES))
    if callable(getattr(os.environ, "encodekey", None))
    else None
)


@dataclass(frozen=True)
class CallSettings:
    """Everything a call chooses from its device and the environment, read in its forward and
    kept for its backward: each kernel's tiles and launch options, the longest table run a
    tile reads, and the backward's and launches' choices."""

    tiles: dict[str, Tiles]
    schedules: dict[str, dict]
    longest_run: int
    key_major: bool
    skew: str
    grad_mode: str
    launch_mode: str
    tails: bool
    key_runs: bool
    dropout_dk_dv: tuple[Tiles, dict]
    fused_backward: bool
    table_l1: bool


def call_settings(device: torch.device) -> CallSettings:
    """The call's settings, as the environment says now (a change applies from the next call),
    built once per device type, distinct environment and tile chooser (`tiles` and `schedule`,
    which the stand-in GPU and tests replace): built per call, the tiles and the choices took
    about a tenth of a training call's host time (scripts/triton_host.py). Built afresh while
    torch.compile traces (once per trace: dynamo ignores the cache and warns of it)."""
    built = _settings.__wrapped__ if torch.compiler.is_compiling() else _settings
    return built(device.type, setting_values(), tiles, schedule)


def setting_values() -> tuple:
    """The values of SETTING_VARIABLES now, as a key (encoded, not decoded: nothing but
    `_settings`' cache reads it). Read from the dict `os.environ` keeps them in, which its
    writes and deletions update, by the names encoded once: `os.environ.get` encodes each name
    and decodes each value, 11 us for the ten on the 2-core AMD CPU, per call; 0.5 us so.
    Where that dict is not there (another Python), `os.environ.get` as before."""
    data = getattr(os.environ, "_data", None)
    if not isinstance(data, dict) or _ENCODED_NAMES is None:
        return tuple(map(os.environ.get, SETTING_VARIABLES))
    return tuple(map(data.get, _ENCODED_NAMES))


@functools.lru_cache(maxsize=16)
def _settings(device_type: str, environment: tuple, choose_tiles, choose_schedule) -> CallSettings:
    """(`environment`, the variables' values, is part of the key: the choosers read them.)"""
    device = torch.device(device_type)
    chosen = {kind: choose_tiles(device, kind) for kind in GPU_TILES}
    with_dropout = chosen["dk_dv"]
    if with_dropout == GPU_TILES["dk_dv"]:  # not overridden
        with_dropout = DROPOUT_DK_DV
    return CallSettings(
        tiles=chosen,
        schedules={kind: choose_schedule(tile, device) for kind, tile in chosen.items()},
        longest_run=longest_table_run({**chosen, "dropout_dk_dv": with_dropout}),
        key_major=dk_dv_order() == "key-major",
        skew=skew_choice(),
        grad_mode=table_grad_mode(),
        launch_mode=launch_choice(),
        tails=tails_choice() == "on",
        key_runs=key_runs_choice() == "on",
        dropout_dk_dv=(with_dropout, choose_schedule(with_dropout, device)),
        fused_backward=backward_choice() == "fused",
        table_l1=table_cache_choice() == "l1",
    )


def dk_dv_tiles(settings: CallSettings, dropout: bool) -> tuple[Tiles, dict]:
    """The dK/dV kernel's tile and schedule for a call with or without attention dropout."""
    if dropout:
        return settings.dropout_dk_dv
    return settings.tiles["dk_dv"], settings.schedules["dk_dv"]


def longest_table_run(chosen: dict[str, Tiles]) -> int:
    """The longest run of the table one row of a tile reads: a tile's width (its block_n, or
    key-major in dK/dV its block_m), so at most its larger side, over every kernel's tile."""
    return max(max(tile.block_m, tile.block_n) for tile in chosen.values())
