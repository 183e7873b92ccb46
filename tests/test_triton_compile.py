"""kernel="triton" compiled for a Hopper GPU (sm_90) on this machine, no GPU needed: the
compiler's frontend, which the CPU interpreter never runs, accepts every kernel under every
flag combination, each launch of the default tiles fits a block's shared memory (a tile
that does not is refused only at launch, on the GPU: "out of resource: shared memory"), and
what ptxas reports of registers, spills and loop instructions. The launches themselves, through
a stand-in GPU: tests/test_triton_stand_in.py (two files, so that a cold Triton cache's builds
spread over two test workers)."""

from __future__ import annotations

import pytest
import torch

# The sm_90 builds and the stand-in GPU use Triton 3.6 to 3.9's compiler and driver
# interfaces (an older one has no `driver._active`, its `get_ptxas` takes no arch), and
# kernel="triton" refuses a Triton before 3.6.
pytest.importorskip("triton", minversion="3.6")


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
