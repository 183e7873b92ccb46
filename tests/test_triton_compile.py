"""kernel="triton" compiled for a Hopper GPU (sm_90) on this machine, no GPU needed: the
compiler's frontend, which the CPU interpreter never runs, accepts every kernel under every
flag combination, and each launch of the default tiles fits a block's shared memory (a tile
that does not is refused only at launch, on the GPU: "out of resource: shared memory")."""

from __future__ import annotations

import importlib.util
import os
from types import SimpleNamespace

import pytest
import torch
from host_reads import HostReads

pytest.importorskip("triton")


@pytest.fixture(scope="module")
def aot():
    """The kernels built for the compiler (a test module before may have built them for the
    interpreter)."""
    from posattn.kernels.table_bias import forget_built_kernels

    previous = os.environ.pop("TRITON_INTERPRET", None)
    forget_built_kernels()
    from posattn.kernels import triton_aot

    yield triton_aot
    forget_built_kernels()
    if previous is not None:
        os.environ["TRITON_INTERPRET"] = previous


RULES = [
    (torch.bfloat16, 64, {}, True),  # nothing hidden
    (torch.bfloat16, 64, {"has_keys": True}, True),  # padding
    (torch.bfloat16, 64, {"has_keys": True, "causal": True}, True),
    # causal without padding: the blocks below the diagonal in loops of their own, unmasked
    (torch.bfloat16, 64, {"causal": True, "tails": True}, True),
    (torch.bfloat16, 64, {"has_keys": True, "causal": True}, False),  # ALiBi: a fixed table
    (torch.bfloat16, 64, {"num_segments": 2, "has_keys": True}, True),  # DIET's segment pairs
    (torch.bfloat16, 64, {"has_table": False}, False),  # a folded or no bias
    (torch.float32, 16, {"has_keys": True}, True),  # the float32 tests' shape (IEEE dots)
    (torch.float16, 48, {}, True),  # a head size that does not fill its block
    # TUPE-R: q and k folded to 64 + 64, values 64, the [CLS] untie read in the kernel
    (torch.bfloat16, 128, {"value_head": 64, "has_untie": True, "has_keys": True}, True),
    # TUPE-A: the same without a table, the untie on zeros
    (torch.bfloat16, 128, {"value_head": 64, "has_untie": True, "has_table": False}, False),
    # TUPE-R and TUPE-A as models run them: the absolute part's factors read beside q and k
    (
        torch.bfloat16,
        128,
        {"value_head": 64, "factor_at": 64, "has_untie": True, "has_keys": True},
        True,
    ),
    (
        torch.bfloat16,
        128,
        {"value_head": 64, "factor_at": 64, "has_untie": True, "has_table": False},
        False,
    ),
    # A table's tails in loops of their own (`offset_tails`): flat (T5, TUPE-R, DIET-REL), or
    # linear for a fixed table (ALiBi)
    (torch.bfloat16, 64, {"has_keys": True, "tails": True}, True),
    (
        torch.bfloat16,
        64,
        {"has_keys": True, "causal": True, "tails": True, "linear_tails": True},
        False,
    ),
]


@pytest.mark.parametrize(("dtype", "head", "rules", "table_grad"), RULES)
def test_every_kernel_compiles_for_hopper_within_its_shared_memory(
    aot, dtype, head, rules, table_grad
):
    from posattn.kernels.triton_settings import GPU_TILES

    flags = aot.call_flags(dtype, head, **rules)
    for launch in aot.launches(flags, GPU_TILES, table_grad):
        compiled = aot.compile_launch(launch, dtype)
        assert compiled.metadata.name == launch.kernel.__name__
        assert 0 < compiled.metadata.shared <= aot.SHARED_LIMIT[90], launch.name


@pytest.mark.parametrize(
    ("head", "rules"),
    [
        (64, {}),
        (64, {"has_keys": True}),
        (64, {"has_keys": True, "causal": True}),
        (64, {"causal": True}),  # without padding: unmasked blocks below the diagonal
        (128, {"value_head": 64, "factor_at": 64, "has_untie": True, "has_keys": True}),  # TUPE-R
        (128, {"value_head": 64, "factor_at": 64, "has_untie": True, "has_table": False}),  # TUPE-A
        (64, {"has_keys": True, "causal": True, "tails": True}),  # T5's flat tails
        (64, {"has_keys": True, "tails": True, "linear_tails": True}),  # ALiBi's lines
        (
            128,
            {"value_head": 64, "factor_at": 64, "has_untie": True, "has_keys": True, "tails": True},
        ),
        # POSATTN_TRITON_KEY_RUNS=on: a padded call's blocks inside a run of real keys in
        # loops of their own (the forward and dQ; not dQ at TUPE-R's 128, where it spilled,
        # and TUPE-R's forward with them took 191 registers when this was written)
        (64, {"has_keys": True, "causal": True, "tails": True, "key_runs": True}),
        (64, {"has_keys": True, "tails": True, "linear_tails": True, "key_runs": True}),
    ],
)
def test_the_default_tiles_do_not_spill_registers(aot, head, rules):
    """ptxas's report for bf16, d_h=64 and a table (T5, DIET-REL, KERPLE, ALiBi; TUPE-R with
    its absolute part folded into q and k): no kernel spills. The dQ kernel's in-register
    skew of a whole 64 x 32 dS tile spilled 300 bytes per thread; it now skews two halves of
    rows. TUPE-R's [CLS] reset as two more folded columns (q and k 136 wide, a 256-wide
    block, values as wide) spilled 2444 bytes per thread in the forward; read in the kernel
    (`cls_untie`, TUPE-A's too), the block is 128 wide. Every product of every kernel is a
    warpgroup MMA (wgmma), none the older mma.sync: dK/dV at dQ's 64 x 32 tile, query-major,
    had its products with the keys as rows 32 rows tall and compiled them to mma.sync (32 of
    its 40 MMA instructions in the PTX)."""
    from posattn.kernels.triton_settings import GPU_TILES

    flags = aot.call_flags(torch.bfloat16, head, **rules)
    # dQ with its other skew too (the choice's builds only with the default one: test time)
    wide = [] if rules.get("key_runs") else aot.launches(flags, GPU_TILES, True, skew="wide")[-1:]
    for launch in [*aot.launches(flags, GPU_TILES, True), *wide]:
        assert_spill_free_warpgroup_mma(aot, launch)


@pytest.mark.parametrize(
    ("head", "rules"),
    [
        (64, {"num_segments": 2, "has_keys": True}),  # DIET-REL's segment pairs
        (
            128,
            {"value_head": 64, "factor_at": 64, "has_untie": True, "has_keys": True, "tails": True},
        ),  # TUPE-R
    ],
)
def test_deterministic_gradients_cost_dq_no_registers_spilled_and_few_instructions(
    aot, head, rules
):
    """dQ with its gradients' copies per query block (PER_BLOCK, under
    torch.use_deterministic_algorithms) at the default tile: spill-free, all warpgroup MMA,
    each loop within 8 instructions of the shared copies' (only the addresses differ)."""
    from posattn.kernels.triton_settings import GPU_TILES

    flags = aot.call_flags(torch.bfloat16, head, **rules)
    dq = [
        aot.launches(flags, GPU_TILES, True, mask_tail=False, per_block=per_block)[-1]
        for per_block in (False, True)
    ]
    assert_spill_free_warpgroup_mma(aot, dq[1])
    shared, per_block = (aot.compile_launch(launch, torch.bfloat16) for launch in dq)
    for loops in zip(*map(aot.each_loop_instructions, (shared, per_block)), strict=True):
        assert loops[1] <= loops[0] + 8, loops


@pytest.mark.parametrize(
    ("head", "rules"),
    [
        (64, {"has_keys": True, "causal": True, "tails": True}),  # T5, causal
        (
            128,
            {"value_head": 64, "factor_at": 64, "has_untie": True, "has_keys": True, "tails": True},
        ),  # TUPE-R
    ],
)
def test_attention_dropout_compiles_spill_free_at_its_tiles(aot, head, rules):
    """With attention dropout (each kernel drawing Philox numbers for its tiles) every kernel
    compiles spill-free with warpgroup MMA only, dK/dV at its dropout tile (`DROPOUT_DK_DV`:
    the default 64 x 128 spilled 40 bytes per thread for T5 and 248 for TUPE-R). Triton 3.6
    (the lent GPU image's) spills TUPE-R's dQ there, 32 bytes per thread at 255 registers
    (3.9 and later: 245, none); at most that is allowed under it. TUPE-R's dK/dV, its factors
    read beside q and k and their gradient summed after the loop, spills 48 bytes per thread
    outside its loop (none of its loop's 1077 instructions, fewer than the folded copy's
    1104, touches local memory): allowed, where no loop spills and at most 64 bytes."""
    import triton
    from packaging.version import Version

    from posattn.kernels.triton_settings import DROPOUT_DK_DV, GPU_TILES

    older = Version(triton.__version__) < Version("3.9")
    flags = aot.call_flags(torch.bfloat16, head, dropout=True, **rules)
    for launch in aot.launches(flags, {**GPU_TILES, "dk_dv": DROPOUT_DK_DV}, True):
        if older and head > 64 and launch.name == "dq_dtable":
            used = aot.resources(aot.compile_launch(launch, torch.bfloat16))
            assert used["spill_stores"] <= 32, used
        elif head > 64 and launch.name == "dk_dv":
            compiled = aot.compile_launch(launch, torch.bfloat16)
            assert aot.resources(compiled)["spill_stores"] <= 64
            for body in aot.each_loop_body(compiled):
                assert not [op for op in body if "STL" in op or "LDL" in op]
        else:
            assert_spill_free_warpgroup_mma(aot, launch)


def test_the_fused_backward_compiles_spill_free_in_fewer_instructions(aot, monkeypatch):
    """POSATTN_TRITON_BACKWARD=fused: dK/dV adding dQ with atomics compiles spill-free with
    warpgroup MMA only (dQ^T = K^T dS^T; dS^T K took mma.sync), without a table and with a
    frozen one (and with attention dropout at its tile), and its loop issues fewer
    instructions per score than split's dK/dV and dQ loops together (439 / 535 against 708 /
    932 per 1000 scores without a table / with one, sm_90, Triton 3.9); with a learned
    table's sums too (at 32 x 64 with T5's flat tails).
    Through the stand-in GPU, a bf16 call launches the forward and the fused kernel alone."""
    import triton
    from packaging.version import Version

    from posattn.kernels import triton_bias
    from posattn.kernels.triton_settings import DROPOUT_DK_DV, GPU_TILES, Tiles

    older = Version(triton.__version__) < Version("3.9")

    def per_score(launch):
        compiled = aot.compile_launch(launch, torch.bfloat16)
        return aot.instructions_per_score(launch, aot.loop_instructions(compiled))

    for rules in ({"has_table": False}, {}):
        flags = aot.call_flags(torch.bfloat16, 64, **rules)
        split = aot.launches(flags, GPU_TILES, False, mask_tail=False)[1:]
        fused = aot.launches(flags, GPU_TILES, False, mask_tail=False, fused=True)[1]
        assert_spill_free_warpgroup_mma(aot, fused)
        assert per_score(fused) < 0.7 * sum(map(per_score, split))
    # A learned table's diagonal sums in dK/dV, a square at a time: spill-free at the default
    # tile, 868 against 1178 per 1000 scores split (the whole tile at once spilled 64 bytes
    # per thread; Triton 3.6, the lent GPU image's, spills 20 this way); with T5's flat
    # tails, spill-free at 32 x 64.
    cases = (({}, GPU_TILES["dk_dv"], 0.9), ({"tails": True}, Tiles(32, 64, 4, 2), 1.0))
    for rules, tile, fraction in cases:
        flags = aot.call_flags(torch.bfloat16, 64, **rules)
        split = aot.launches(flags, GPU_TILES, True, mask_tail=False)[1:]
        tiles = {**GPU_TILES, "dk_dv": tile}
        fused = aot.launches(flags, tiles, True, mask_tail=True, fused=True)[1]
        assert fused.constexprs["TABLE_GRAD"] and fused.constexprs["MASK_TAIL"]
        if older and tile == GPU_TILES["dk_dv"]:  # Triton 3.6: 20 bytes per thread spilled
            assert aot.resources(aot.compile_launch(fused, torch.bfloat16))["spill_stores"] <= 32
        else:
            assert_spill_free_warpgroup_mma(aot, fused)
        assert per_score(fused) < fraction * sum(map(per_score, split))
    flags = aot.call_flags(torch.bfloat16, 64, dropout=True)
    tiles = {**GPU_TILES, "dk_dv": DROPOUT_DK_DV}
    assert_spill_free_warpgroup_mma(aot, aot.launches(flags, tiles, False, fused=True)[1])
    monkeypatch.setenv("POSATTN_TRITON_BACKWARD", "fused")
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 100, 64, dtype=torch.bfloat16, requires_grad=True) for _ in "qkv")
    with aot.stand_in_gpu() as launches:
        triton_bias.table_bias_attention(q, k, v, scale=0.125).sum().backward()
        assert [launch.name for launch in launches] == ["_forward", "_backward_dk_dv"]


def test_a_register_cap_holds_the_wide_forward_to_16_warps_per_sm(aot):
    """POSATTN_TRITON_FORWARD=128,64,8,2,128: the forward at 128 x 64 with 8 warps takes at
    most 128 registers per thread with T5's flat tails (uncapped: 164, 8 warps per SM), so an
    SM holds 16 of its warps, spill-free and all warpgroup MMA, its loops within a few
    instructions of the uncapped ones; with q and k 128 wide (TUPE-R's fold), or a partial
    last key block, the cap is left out (`launch_options`)."""
    from posattn.kernels.triton_settings import GPU_TILES, Tiles

    capped, free = Tiles(128, 64, 8, 2, 128), Tiles(128, 64, 8, 2)
    flags = aot.call_flags(torch.bfloat16, 64, tails=True)
    forward = [
        aot.launches(flags, {**GPU_TILES, "forward": tile}, True, mask_tail=False)[0]
        for tile in (capped, free)
    ]
    compiled = [aot.compile_launch(launch, torch.bfloat16) for launch in forward]
    used = [aot.resources(c) for c in compiled]
    assert used[0]["registers"] <= 128 < used[1]["registers"]
    assert aot.warps_per_sm(used[0], capped) == 2 * aot.warps_per_sm(used[1], free) == 16
    assert_spill_free_warpgroup_mma(aot, forward[0])
    for loops in zip(*map(aot.each_loop_instructions, compiled), strict=True):
        assert loops[0] <= loops[1] + 16, loops
    wide = aot.call_flags(torch.bfloat16, 128, value_head=64, has_untie=True, tails=True)
    tupe_r = aot.launches(wide, {**GPU_TILES, "forward": capped}, True, mask_tail=False)[0]
    assert aot.resources(aot.compile_launch(tupe_r, torch.bfloat16))["registers"] > 128
    # A partial last key block (its mask) leaves the cap out too: it spilled 84 bytes.
    tail = aot.launches(flags, {**GPU_TILES, "forward": capped}, True, mask_tail=True)[0]
    assert aot.resources(aot.compile_launch(tail, torch.bfloat16))["registers"] > 128


def test_a_register_cap_reaches_the_launch_from_the_environment(aot, monkeypatch):
    """POSATTN_TRITON_FORWARD's fifth number through Triton's own launch path (the
    stand-in GPU): a call whose keys fill whole blocks compiles its forward under the cap, one
    with a partial last block without it."""
    from posattn.kernels import triton_bias

    monkeypatch.setenv("POSATTN_TRITON_FORWARD", "128,64,8,2,128")
    torch.manual_seed(0)
    caps = {}
    with aot.stand_in_gpu():
        for n in (128, 130):
            q, k, v = (torch.randn(1, 2, n, 64, dtype=torch.bfloat16) for _ in "qkv")
            table, tails = torch.randn(2, 2 * n - 1), (n - 9, n + 7)
            triton_bias.table_bias_attention(q, k, v, scale=0.125, table=table, tails=tails)
            # (a comprehension: no compiled kernel outlives the stand-in, whose unload it calls)
            kernels = triton_bias._forward.device_caches[0][0].values()
            caps[n] = {aot.resources(kernel)["registers"] <= 128 for kernel in kernels}
            kernels = None
    assert caps == {128: {True}, 130: {True, False}}


def assert_spill_free_warpgroup_mma(aot, launch) -> None:
    """ptxas reports no spill and at most 255 registers; every product is a wgmma."""
    compiled = aot.compile_launch(launch, torch.bfloat16)
    used = aot.resources(compiled)
    assert used["spill_stores"] == used["spill_loads"] == 0, (launch.name, used)
    assert 0 < used["registers"] <= 255
    products = aot.matrix_products(compiled)
    assert products["wgmma"] > 0 and products["mma.sync"] == 0, (launch.name, products)


def loop_counts(aot, table_grad: bool = True, **rules) -> dict[str, list[int]]:
    """Each kernel's loop instructions per warp and step (`each_loop_instructions`), bf16,
    d_h=64, default tiles, whole key blocks, under these rules (`call_flags`)."""
    from posattn.kernels.triton_settings import GPU_TILES

    flags = aot.call_flags(torch.bfloat16, 64, **rules)
    built = aot.launches(flags, GPU_TILES, table_grad, mask_tail=False)
    return {launch.name: aot.each_loop_instructions(aot.compile_launch(launch, torch.bfloat16))
            for launch in built}  # fmt: skip


def test_a_tails_loops_issue_what_a_kernel_without_a_table_issues(aot):
    """The loops over a table's tails (`offset_tails`) read no table and skew no dS: per step,
    each issues at most a few instructions more than the same kernel without any table (its
    rows' value, dQ's sum of their dS, a line's add per score), and the dQ kernel's flat tails
    less than two thirds of its loop between them (T5-like, bf16, d_h=64, sm_90, whole key
    blocks; when written, flat: forward 238 / 284 / 233 against 231 without a table, dK/dV
    368 / 446 / 355 against 341, dQ 211 / 408 / 208 against 192; ALiBi's lines, no table
    gradient: forward 243 / 284 / 240, dK/dV 422 / 450 / 407, dQ 218 / 268 / 217)."""
    plain = loop_counts(aot, has_table=False)
    for tails in (loop_counts(aot, tails=True),
                  loop_counts(aot, False, tails=True, linear_tails=True)):  # fmt: skip
        for name, (low, between, high) in tails.items():
            assert max(low, high) <= plain[name][0] + 96 and max(low, high) < between, tails
            assert min(low, high) <= plain[name][0] + 32 or name == "dk_dv", tails
    low, between, high = loop_counts(aot, tails=True)["dq_dtable"]
    assert max(low, high) < between * 2 / 3


def test_the_tables_loads_go_through_l1_and_change_nothing_else(aot):
    """POSATTN_TRITON_TABLE_CACHE: with "l1" (the default) each kernel's copies of the table
    into shared memory are cached in L1 (cp.async.ca), with "l2" through L2 alone, as Triton
    makes a 16-byte copy unasked (cp.async.cg); registers, shared memory and every loop's
    instructions are the same (bf16, d_h=64, default tiles, sm_90; when written, forward 12
    of its 18 copies the table's, dK/dV 16 of 28, dQ 12 of 24)."""
    from posattn.kernels.triton_settings import GPU_TILES

    builds = {}
    for l1 in (True, False):
        flags = aot.call_flags(torch.bfloat16, 64, table_l1=l1)
        launches = aot.launches(flags, GPU_TILES, True, mask_tail=False)
        builds[l1] = {launch.name: aot.compile_launch(launch, torch.bfloat16)
                      for launch in launches}  # fmt: skip
    for name, cached in builds[True].items():
        bypass = builds[False][name]
        assert aot.resources(cached) == aot.resources(bypass), name
        assert aot.each_loop_instructions(cached) == aot.each_loop_instructions(bypass), name
        on, off = aot.async_copies(cached), aot.async_copies(bypass)
        moved = off["cg"] - on["cg"]
        assert moved > 0 and on["ca"] - off["ca"] == moved, (name, on, off)


def test_a_loops_opcodes_add_up_to_its_instructions(aot):
    """`opcodes` of the forward's main loop (no table, default tile: 16 scores per thread)
    sum to `loop_instructions`, and hold its work: the two products as warpgroup MMA, an
    exponent (MUFU) per score and one for the rows' rescale, an FMA per score's exponent
    (`_forward_step`'s PLAIN)."""
    from posattn.kernels.triton_settings import GPU_TILES

    flags = aot.call_flags(torch.bfloat16, 64, has_table=False)
    forward = aot.launches(flags, GPU_TILES, False, mask_tail=False)[0]
    compiled = aot.compile_launch(forward, torch.bfloat16)
    counts = aot.opcodes(aot.each_loop_body(compiled)[-1])
    assert sum(counts.values()) == aot.loop_instructions(compiled)
    assert counts["HGMMA"] > 0 and counts["MUFU"] >= 16 and counts["FFMA"] >= 16


def test_causal_blocks_below_the_diagonal_issue_what_unmasked_blocks_issue(aot):
    """Causal without padding: each kernel's blocks that every row sees whole run in a loop of
    their own without the causal mask, issuing about what the kernel without any mask issues,
    and fewer instructions than the loop of the blocks on the diagonal (T5-like table, bf16,
    d_h=64, sm_90; when written, Triton 3.9: forward 283 / 375 against 277 unmasked and 343
    for every block masked before, dQ 415 / 512 against 388 and 464, dK/dV 452 / 570 against
    430 and 559; Triton 3.6's dK/dV 501 / 603 against 448)."""
    unmasked, causal = loop_counts(aot), loop_counts(aot, causal=True)
    for name, counts in causal.items():
        whole = counts[0] if name != "dk_dv" else counts[1]  # dK/dV: the later query blocks
        assert len(counts) == 2 and whole <= unmasked[name][0] + 64 and whole < max(counts)


def test_blocks_inside_a_run_of_visible_keys_issue_less_than_masked_ones(aot):
    """A padded call with a table's flat tails (T5): with POSATTN_TRITON_KEY_RUNS on, the
    forward's and dQ's blocks inside a run of visible keys run in loops of their own without
    the key mask, each issuing fewer instructions per step than the one masked loop of the
    same part with it off (the default), which is the kernel as it was (bf16, d_h=64, sm_90; when
    written, Triton 3.9: forward 236 / 316 / 236 against 312 / 395 / 298, dQ 207 / 432 / 207
    against 304 / 510 / 283)."""
    from posattn.kernels.triton_settings import GPU_TILES

    counts = {}
    for runs in (True, False):
        flags = aot.call_flags(torch.bfloat16, 64, has_keys=True, tails=True, key_runs=runs)
        for launch in aot.launches(flags, GPU_TILES, True, mask_tail=False):
            if launch.name != "dk_dv":
                compiled = aot.compile_launch(launch, torch.bfloat16)
                counts[launch.name, runs] = aot.each_loop_instructions(compiled)
    for name in ("forward", "dq_dtable"):
        pieces, masked = counts[name, True], counts[name, False]
        assert len(pieces) == 9 and len(masked) == 3, counts
        # Per part (a tail, the table's blocks, the other tail): masked, unmasked, masked.
        assert all(pieces[3 * part + 1] < masked[part] for part in range(3)), counts


def test_whole_key_blocks_compile_without_the_tail_mask(aot):
    """A length that fills its key blocks (n = 1024, 4096, ...: MASK_TAIL off) and no padding
    or causality: the forward and dQ hide no score, and still compile spill-free to warpgroup
    MMA."""
    from posattn.kernels.triton_settings import GPU_TILES

    flags = aot.call_flags(torch.bfloat16, 64)
    for launch in aot.launches(flags, GPU_TILES, True, mask_tail=False):
        assert_spill_free_warpgroup_mma(aot, launch)


def test_query_major_dk_dv_at_dqs_tile_falls_back_to_mma_sync(aot):
    """The measurements behind dK/dV's own key-major tile, kept true: at 64 x 32 query-major
    (the kernel before the split) most of its products are mma.sync, and its main loop issues
    more warp instructions per score than the key-major default's (684 against 420 per 1000
    when this was written, T5-like table)."""
    from posattn.kernels.triton_settings import GPU_TILES, Tiles

    flags = aot.call_flags(torch.bfloat16, 64)
    before = {**GPU_TILES, "dk_dv": Tiles(64, 32, 4, 3)}
    old = aot.launches(flags, before, True, key_major=False, mask_tail=False)[1]
    new = aot.launches(flags, GPU_TILES, True, mask_tail=False)[1]
    old_build, new_build = (aot.compile_launch(launch, torch.bfloat16) for launch in (old, new))
    products = aot.matrix_products(old_build)
    assert products["mma.sync"] > products["wgmma"] > 0, products
    loops = [aot.loop_instructions(build) for build in (old_build, new_build)]
    per_score = [aot.instructions_per_score(launch, loop)
                 for launch, loop in zip((old, new), loops, strict=True)]  # fmt: skip
    assert 0 < per_score[1] < 0.8 * per_score[0], per_score
    assert 0 < loops[1] < len(aot.sass(new_build))


def test_warps_per_sm_is_bounded_by_registers_shared_memory_and_the_warp_limit(aot):
    """The earlier forward sweep's tiles: 111 registers and 72 KiB at 8 warps -> two blocks,
    16 warps (registers bound: 112 x 256 x 3 > 65536); 255 registers and 128 KiB at 4 warps ->
    one block (shared memory bound), 4 warps; a tiny block is bound by the 64 warps."""
    from posattn.kernels.triton_settings import Tiles

    assert aot.warps_per_sm({"registers": 111, "shared": 73728}, Tiles(128, 32, 8, 3)) == 16
    assert aot.warps_per_sm({"registers": 255, "shared": 131072}, Tiles(128, 64, 4, 3)) == 4
    assert aot.warps_per_sm({"registers": 32, "shared": 1024}, Tiles(16, 16, 4, 2)) == 64


def test_a_training_call_goes_through_tritons_own_launch_path_as_on_the_gpu(aot):
    """Under the stand-in GPU (scripts/triton_host.py times the host's side with it) a T5-like
    training call on CPU tensors binds, specialises and compiles its kernels for sm_90 at the
    GPU's tiles and schedules, as a launch on the GPU does - the path the CPU interpreter
    never takes (an unknown launch option or a constexpr given as an argument fails here) -
    and launches the forward, dQ and dK/dV once each over their GPU grids, every argument
    passed; afterwards Triton's driver and the tile choosers are as they were, and Triton's
    caches and the direct launches hold none of the stand-in's kernels."""
    from triton.runtime.driver import driver

    from posattn.kernels import triton_bias, triton_settings

    def choosers():
        return triton_settings.tiles, triton_settings.schedule

    before = (driver._active, choosers())
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 70, 64, dtype=torch.bfloat16, requires_grad=True) for _ in "qkv")
    table = torch.randn(3, 139, requires_grad=True)
    with aot.stand_in_gpu() as launches:
        out = triton_bias.table_bias_attention(q, k, v, scale=0.125, table=table)
        out.backward(torch.ones_like(out))
        # `recording()` takes a stretch's launches apart (the timing scripts record nothing
        # else: a recorded launch keeps its tensors alive).
        with aot.recording() as stretch, torch.no_grad():
            triton_bias.table_bias_attention(q, k, v, scale=0.125, table=table)
    assert [launch.name for launch in stretch] == ["_forward"]
    assert (driver._active, choosers()) == before
    # No stand-in kernel is left where a real launch would find it.
    assert not triton_bias._forward.device_caches and not triton_bias._DIRECT
    tiles = triton_settings.GPU_TILES
    kernels = [getattr(triton_bias, name) for name in aot.KERNEL_NAMES]
    grids = [(1, 6, 1), (-(-70 // tiles["dq"].block_m), 6, 1), (1, 6, 1)]  # 70 rows, B * H = 6
    assert [(launch.name, launch.grid, len(launch.arguments)) for launch in launches] == [
        (kernel.__name__, grid, len(kernel.arg_names))
        for kernel, grid in zip(kernels, grids, strict=True)
    ]
    assert table.grad is not None and q.grad.shape == q.shape  # the backward ran through


# Each encoding the kernel serves, as its model hands it over: tables, folded factors, TUPE's
# untie, DIET's segment pairs, padding and causality.
STAND_IN_MODELS = [
    ("t5", {}, False, "input"),
    ("kerple", {"kernel": "log"}, True, "input"),
    ("diet-rel", {"sharing": "none", "max_distance": 5}, False, "attention"),
    ("alibi", {}, True, "attention"),
    ("diet-abs", {"sharing": "none", "rank": 5}, False, "input"),
    ("tupe-a", {"cls_index": 3}, False, "input"),
    ("tupe-r", {"cls_index": 3}, False, "input"),
]


@pytest.mark.parametrize(("encoding", "options", "causal", "segments"), STAND_IN_MODELS)
def test_models_in_bf16_compile_and_launch_through_the_stand_in_gpu(
    aot, encoding, options, causal, segments
):
    """A one-layer bf16 model with kernel="triton", trained a step and run in inference on
    the stand-in GPU: what the model hands the kernel compiles for sm_90 as the GPU would
    specialise it (the interpreter tests run float64 models, which a GPU never compiles), and
    each call launches the forward, then dQ and dK/dV, with every argument, reading nothing
    back on the host and copying no host data (`host_reads`)."""
    from conftest import tiny_encoder
    from test_kernels import padded_batch

    from posattn.kernels import triton_bias

    ids, mask, segment_ids = padded_batch()
    model = tiny_encoder(
        encoding, causal=causal, encoding_options=options, segments=segments, num_layers=1
    ).to(torch.bfloat16)
    model.set_kernel("triton")
    kernels = {name: len(getattr(triton_bias, name).arg_names) for name in aot.KERNEL_NAMES}
    with aot.stand_in_gpu() as launches, HostReads() as reads:
        model(ids, mask, segment_ids).float().sum().backward()
        trained = [(launch.name, len(launch.arguments)) for launch in launches]
        launches.clear()
        with torch.no_grad():
            model(ids, mask, segment_ids)
            model(ids, segment_ids=segment_ids)  # no padding: the causal rule's own spans
    assert trained == list(kernels.items())
    assert [(launch.name, len(launch.arguments)) for launch in launches] == [
        ("_forward", kernels["_forward"])
    ] * 2
    # Nothing waits on the host but the segment ids' check, once a forward (test_host_reads).
    assert reads.found == {("_local_scalar_dense", "models/encoder.py:_check_inputs"): 3}


# Where a model meets the kernel through torch.compile: a table with padding, TUPE-R's
# folded factors and untie, DIET's segment pairs inside attention.
TORCH_COMPILE_MODELS = [STAND_IN_MODELS[0], STAND_IN_MODELS[-1], STAND_IN_MODELS[2]]


@pytest.mark.parametrize(("encoding", "options", "causal", "segments"), TORCH_COMPILE_MODELS)
def test_models_trace_into_one_torch_compile_graph_on_the_stand_in_gpu(
    aot, monkeypatch, encoding, options, causal, segments
):
    """torch.compile(fullgraph=True) of a model with kernel="triton", in training and in
    inference: one graph with no break (the kernels as dynamo's Triton kernel calls, through
    AOT autograd's functionalisation), launching what the model launches uncompiled - the
    same kernels, in order, on the same grids, the forward's specialisation the same (the
    backward's may differ: the compiled graph hands it a contiguous output gradient). Dynamo
    takes a Triton kernel only where torch finds a GPU for Triton (`has_triton`), which the
    stand-in is. Values need a GPU (tests/test_gpu_kernels.py). Dynamo warns of no cache it
    traces through."""
    import torch.utils._triton
    from conftest import no_dynamo_cache_warnings, tiny_encoder
    from test_kernels import padded_batch

    from posattn.kernels import table_bias

    monkeypatch.setattr(torch.utils._triton, "has_triton", lambda: True)
    # Dynamo before torch 2.13 (the lent GPU's 2.11) refuses to trace importlib's find_spec;
    # 2.13 folds that very function to a constant, so the kernel's module gets one it cannot.
    untraceable = SimpleNamespace(find_spec=torch.compiler.disable(importlib.util.find_spec))
    monkeypatch.setattr(table_bias, "importlib", SimpleNamespace(util=untraceable))
    ids, mask, segment_ids = padded_batch()
    model = tiny_encoder(
        encoding, causal=causal, encoding_options=options, segments=segments, num_layers=1
    ).to(torch.bfloat16)
    model.set_kernel("triton")

    def step(ids, mask, segment_ids):
        return model(ids, mask, segment_ids).float().sum()

    def summary(launches, specialisations):
        return [
            (launch.name, launch.grid, len(launch.arguments))
            + ((launch.kernel,) if index < specialisations else ())
            for index, launch in enumerate(launches)
        ]

    torch._dynamo.reset()
    try:
        with aot.stand_in_gpu() as launches, no_dynamo_cache_warnings():
            model.train()
            for run in (step, torch.compile(step, fullgraph=True, backend="aot_eager")):
                run(ids, mask, segment_ids).backward()
            eager, compiled = launches[:3], launches[3:]
            assert summary(compiled, 1) == summary(eager, 1)
            assert [launch.name for launch in eager] == list(aot.KERNEL_NAMES)
            launches.clear()
            model.eval()
            with torch.no_grad():
                model(ids, mask, segment_ids)
                torch.compile(model, fullgraph=True, backend="aot_eager")(ids, mask, segment_ids)
            assert summary(launches[1:], 1) == summary(launches[:1], 1)
    finally:
        torch._dynamo.reset()


def launched_argument(value):
    """A launcher argument as two launches of one call can share it: a tensor by its kind
    (each call allocates its own outputs), anything else by value."""
    if isinstance(value, torch.Tensor):
        return ("tensor", value.dtype, tuple(value.shape), value.data_ptr() % 16 == 0)
    return value


def training_call_launches(launches, monkeypatch, mode: str, q, k, v, table) -> list:
    """The stand-in's launches of one T5-like training call with POSATTN_TRITON_LAUNCH=mode."""
    from posattn.kernels import triton_bias

    monkeypatch.setenv("POSATTN_TRITON_LAUNCH", mode)
    launches.clear()
    out = triton_bias.table_bias_attention(q, k, v, scale=0.125, table=table)
    out.backward(torch.ones_like(out))
    return list(launches)


def training_leaves(n: int, misaligned: bool = False) -> list:
    """q, k, v [2, 3, n, 64] bf16 and a table; q one element into its storage if misaligned
    (Triton specialises a pointer on 16-byte alignment)."""
    torch.manual_seed(0)
    shape = (2, 3, n, 64)
    q, k, v = (torch.randn(*shape, dtype=torch.bfloat16) for _ in "qkv")
    if misaligned:
        q = torch.randn(q.numel() + 1, dtype=torch.bfloat16)[1:].view(shape)
        assert q.data_ptr() % 16 != 0
    table = torch.randn(3, 2 * n - 1, dtype=torch.float32)
    return [leaf.requires_grad_() for leaf in (q, k, v, table)]


def launch_summary(launches) -> list:
    return [
        (launch.name, launch.grid, launch.kernel, list(map(launched_argument, launch.arguments)))
        for launch in launches
    ]


def test_direct_launches_give_the_launcher_what_tritons_own_path_gives_it(aot, monkeypatch):
    """POSATTN_TRITON_LAUNCH=direct (the default): a call's first launch of each kernel goes
    through Triton's path (compiled, launch metadata given), the next calls straight to the
    same compiled kernel's launcher with the same grid and the same arguments, argument for
    argument, that Triton's own path (POSATTN_TRITON_LAUNCH=triton) gives it, and no launch
    metadata. A misaligned input is a key not seen yet: it goes through Triton's path and gets
    the kernel Triton's path gets for it, never the aligned one. A new length whose scalars
    Triton specialises alike (37 -> 38: none is 1 or a new multiple of 16) launches directly
    at once, with Triton's kernel for it. A launch hook sends every launch through Triton's
    path, which hands it to the launcher, and keeps nothing."""
    from triton import knobs

    with aot.stand_in_gpu() as launches:

        def run(mode, leaves):
            return training_call_launches(launches, monkeypatch, mode, *leaves)

        leaves = training_leaves(37)
        tritons, first, direct = (run(mode, leaves) for mode in ("triton", "direct", "direct"))
        assert len(tritons) == 3 and all(launch.with_metadata for launch in tritons + first)
        assert not any(launch.with_metadata for launch in direct)
        assert launch_summary(direct) == launch_summary(first) == launch_summary(tritons)

        misaligned = training_leaves(37, misaligned=True)
        tritons_misaligned, new_key, again = (
            run(mode, misaligned) for mode in ("triton", "direct", "direct")
        )
        assert all(launch.with_metadata for launch in new_key)  # Triton's path
        assert not any(launch.with_metadata for launch in again)
        assert launch_summary(again) == launch_summary(tritons_misaligned)
        assert again[0].kernel != direct[0].kernel  # the forward compiled for it

        longer = training_leaves(38)
        longer_direct = run("direct", longer)
        assert not any(launch.with_metadata for launch in longer_direct)
        assert launch_summary(longer_direct) == launch_summary(run("triton", longer))

        calls = []
        knobs.runtime.launch_enter_hook.add(calls.append)
        try:
            hooked = run("direct", leaves)
            hooked_again = run("direct", training_leaves(48))
        finally:
            knobs.runtime.launch_enter_hook.remove(calls.append)
        assert all(launch.with_metadata for launch in hooked + hooked_again)
        assert launch_summary(hooked) == launch_summary(direct)
        # Nothing obtained under the hook was kept: n=48 (a multiple of 16, unlike 37 and 38:
        # another class) is new to the direct launches.
        assert all(launch.with_metadata for launch in run("direct", training_leaves(48)))


def test_attention_dropout_launches_through_tritons_path_then_directly(aot):
    """A bf16 model with attention dropout trained on the stand-in GPU: its kernels compile
    for sm_90 with dropout as a launch specialises them (the seed's pointer, the drop
    threshold, dK/dV at its dropout tile), and the next step launches them directly with the
    arguments Triton's own path gave (its fresh seed a tensor of the same kind)."""
    from conftest import tiny_encoder
    from test_kernels import padded_batch

    from posattn.kernels.triton_settings import DROPOUT_DK_DV

    ids, mask, segment_ids = padded_batch()
    model = tiny_encoder("t5", attention_dropout=0.1, num_layers=1).to(torch.bfloat16).train()
    model.set_kernel("triton")
    with aot.stand_in_gpu() as launches:
        model(ids, mask, segment_ids).float().sum().backward()
        first = list(launches)
        launches.clear()
        model(ids, mask, segment_ids).float().sum().backward()
    assert [launch.name for launch in first] == list(aot.KERNEL_NAMES)
    assert all(launch.with_metadata for launch in first)
    assert not any(launch.with_metadata for launch in launches)
    assert launch_summary(launches) == launch_summary(first)
    # LSE's rows reach the end of dK/dV's last query block: 32 at its dropout tile, not 64.
    lse = first[0].arguments[4]
    assert lse.shape[-1] == DROPOUT_DK_DV.block_m == 32


def test_scalar_classes_are_at_least_as_fine_as_tritons_specialisation(aot):
    """Two scalars of one class get the same specialisation from Triton's own rule (ints on
    being 1, divisibility by 16, width; floats and bools by type), so a kernel found by class
    is the one Triton would compile."""
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend

    from posattn.kernels.triton_launch import scalar_class

    backend = make_backend(GPUTarget("cuda", 90, 32))
    values = [0, 1, 2, 15, 16, 17, 32, -1, -16, -(2**31), 2**31 - 16, 2**31, 2**40, 2**63,
              2**64 - 16, 0.5, 1.0, 1e30, True, False]  # fmt: skip
    specialisation = {}
    for value in values:
        found = native_specialize_impl(backend, value, False, True, True)
        assert specialisation.setdefault(scalar_class(value), found) == found, value
    assert scalar_class(1) != scalar_class(True) != scalar_class(1.0)


def test_an_integer_scale_reaches_the_kernels_as_a_float(aot):
    """scale=1 and scale=1.0 train through the same compiled kernels with the same scale
    arguments (Triton would compile an integer 1 as a constant; a direct launch's key tells
    them apart by value only)."""
    from posattn.kernels import triton_bias

    kernels = {name: getattr(triton_bias, name).arg_names for name in aot.KERNEL_NAMES}
    runs = []
    for scale in (1, 1.0):
        torch.manual_seed(0)
        q, k, v = (
            torch.randn(1, 2, 20, 64, dtype=torch.bfloat16, requires_grad=True) for _ in "qkv"
        )
        table = torch.randn(2, 39, requires_grad=True)
        with aot.stand_in_gpu() as launches:
            out = triton_bias.table_bias_attention(q, k, v, scale=scale, table=table)
            out.backward(torch.ones_like(out))
        runs.append([
            (launch.kernel, name, launch.arguments[kernels[launch.name].index(name)])
            for launch in launches for name in ("scale", "scale2")
            if name in kernels[launch.name]
        ])  # fmt: skip
    assert runs[0] == runs[1] and len(runs[0]) == 5  # scale2 in each, scale in the backward's
    assert all(type(value) is float for _, _, value in runs[0])


def test_the_reversed_copies_are_made_only_where_a_backward_can_follow(aot):
    """The forward hands its kernel the table's four aligned copies, plus dK/dV's four
    reversed ones where a backward can follow: not under no_grad or inference mode, though
    the table is a parameter that requires grad."""
    from posattn.kernels import triton_bias

    position = triton_bias._forward.arg_names.index("TABLE")
    q, k, v = (torch.randn(1, 2, 20, 64, dtype=torch.bfloat16) for _ in "qkv")
    table = torch.nn.Parameter(torch.randn(2, 39, dtype=torch.float32))
    copies = {}
    with aot.stand_in_gpu() as launches:
        for name, mode in [("train", torch.enable_grad), ("no_grad", torch.no_grad),
                           ("inference", torch.inference_mode)]:  # fmt: skip
            launches.clear()
            with mode():
                triton_bias.table_bias_attention(q, k, v, scale=0.125, table=table)
            copies[name] = launches[0].arguments[position].shape[1]
    assert copies == {"train": 8, "no_grad": 4, "inference": 4}


@pytest.mark.parametrize(("encoding", "options"), [("alibi", {}), ("tupe-r", {"cls_index": 2})])
def test_cached_decoding_in_bf16_launches_through_the_stand_in_gpu(aot, encoding, options):
    """A bf16 causal LM decoding with a cache (rows [start, end) over every key, left
    padding; one-token steps among them) compiles for sm_90 and launches one forward per
    layer and step, each with every argument, every layer after the first directly (the
    first's launch met the key). Here each step's first launch is new to the direct
    launches: with a head of 8 the keys' stride 8N changes its divisibility by 16 with N,
    which Triton specialises on too."""
    from conftest import tiny_config
    from transformers import DynamicCache

    from posattn import PosAttnForCausalLM
    from posattn.kernels import triton_bias

    torch.manual_seed(0)
    config = tiny_config(encoding, causal=True, kernel="triton", encoding_options=options)
    model = PosAttnForCausalLM(config).eval().to(torch.bfloat16)
    ids = torch.randint(1, 40, (2, 9))
    attention_mask = torch.ones(2, 9, dtype=torch.long)
    attention_mask[1, :3] = 0
    arguments = len(triton_bias._forward.arg_names)
    steps = []
    with aot.stand_in_gpu() as launches, torch.no_grad():
        cache, start = DynamicCache(config=model.config), 0
        for end in (4, 5, 6, 9):
            launches.clear()
            model(ids[:, start:end], attention_mask=attention_mask[:, :end],
                  past_key_values=cache, use_cache=True)  # fmt: skip
            steps.append([(launch.name, len(launch.arguments)) for launch in launches])
            # The first layer's launch of a step met the key its later layers then find.
            assert not any(launch.with_metadata for launch in launches[1:]), end
            start = end
    layers = config.num_hidden_layers
    assert steps == [[("_forward", arguments)] * layers] * 4


def test_extra_peak_counts_what_a_call_holds_at_once(aot):
    """`extra_peak_mib`: 4 MiB held while 8 more are made, then both released: 12 at the
    peak."""

    def call():
        held = torch.empty(2**20, dtype=torch.float32)
        more = torch.empty(2 * 2**20, dtype=torch.float32)
        del held, more

    assert aot.extra_peak_mib(call) == 12


def test_tupe_r_keeps_no_folded_copy_of_q_and_k(aot, monkeypatch):
    """TUPE-R's training call through the stand-in GPU (bf16, B=H=8, n=1024, d_h=64): with its
    absolute part's factors read beside q and k and their gradients summed in the kernels
    (the default), its extra peak memory is below the folded copy's by at least two [B, H,
    n, 128] copies (53 MiB against 93; with the gradients a row per batch element and head
    it took 65; at n = 8192: 425 MiB against 745)."""
    from posattn.lab.bench.bench import BenchSettings, attention_call

    settings = BenchSettings(dtype="bfloat16")
    peaks = {}
    with aot.stand_in_gpu(record=False):
        for layout in ("beside", "folded"):
            monkeypatch.setenv("POSATTN_TRITON_FACTORS", layout)
            call = attention_call("tupe-r", settings, 1024, True, "cpu", kernel="triton")
            call()
            peaks[layout] = aot.extra_peak_mib(call) * 2**20
    wide_copy = 8 * 8 * 1024 * 128 * 2
    assert peaks["beside"] <= peaks["folded"] - 2 * wide_copy


# (encoding, what a training step makes): ALiBi's terms hold no parameter, so they and
# what the kernel derived from them outlive a step.
SHARED_DERIVED = [
    ("t5", dict(table_copies=1)),
    ("tupe-r", dict(table_copies=1, scaled_factors=1)),
    ("alibi", {}),
]


@pytest.mark.parametrize(("encoding", "derived"), SHARED_DERIVED)
def test_layers_share_what_they_derive_from_their_terms_and_merge_heads_without_copies(
    aot, monkeypatch, encoding, derived
):
    """A 3-layer bf16 model training a step with kernel="triton" on the stand-in GPU: the
    table's aligned copies, TUPE-R's factors scaled and ALiBi's slopes in base 2, which every
    layer would derive alike from the forward's shared terms, are made once a forward
    (`kept_in`), not once a layer;
    and the kernel's output and q's and k's gradients come in the layout of the model's
    split heads, so that no layer copies them to merge heads or to split them back (before:
    three [B, n, d_model] copies a layer, 12 a BERT-small step)."""
    from collections import Counter

    from conftest import tiny_encoder
    from test_kernels import padded_batch
    from torch.utils._python_dispatch import TorchDispatchMode

    from posattn.kernels import triton_bias

    class Ops(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.found = Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.found[func.__name__.split(".")[0]] += 1
            return func(*args, **(kwargs or {}))

    calls = Counter()
    for name in ("table_copies", "scaled_factors", "base2_slopes"):
        made = getattr(triton_bias, name)

        def counted(*args, made=made, name=name, **kwargs):
            calls[name] += 1
            return made(*args, **kwargs)

        monkeypatch.setattr(triton_bias, name, counted)
    ids, mask, segment_ids = padded_batch()
    found = {}
    for layers in (1, 3):
        model = tiny_encoder(encoding, num_layers=layers).to(torch.bfloat16).train()
        model.set_kernel("triton")
        with aot.stand_in_gpu(record=False):
            model(ids, mask, segment_ids).float().sum().backward()  # compiled on the way
            calls.clear()
            with Ops() as ops:
                model(ids, mask, segment_ids).float().sum().backward()
        found[layers] = (Counter(calls), ops.found["clone"], ops.found["stack"])
    assert found[1] == found[3]  # nothing of the above is made per layer
    assert found[3][0] == Counter(derived)
    # T5's step copies nothing; TUPE-R's factors are made contiguous once a forward.
    assert (found[3][1] == 0) == ("scaled_factors" not in derived)


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_low_rank_encodings_launch_at_the_benchs_head_size_in_either_dtype(aot, dtype):
    """TUPE-R, TUPE-A and DIET-ABS as `posattn bench` calls them (d_h = 64, a factor as wide)
    train through the stand-in GPU, each kernel within a block's shared memory: in float32
    their factors read beside q and k took 246272 bytes in dK/dV (Hopper's limit: 232448), so
    a float32 call that wide folds them (`table_bias.triton_attention`)."""
    from posattn.lab.bench.bench import BenchSettings, attention_call

    settings = BenchSettings(dtype=dtype)
    with aot.stand_in_gpu() as launches:
        for encoding in ("tupe-r", "tupe-a", "diet-abs"):
            attention_call(encoding, settings, 64, True, "cpu", kernel="triton", batch=1)()
    assert len(launches) == 9
