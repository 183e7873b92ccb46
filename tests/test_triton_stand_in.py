"""kernel="triton" launched through a stand-in GPU (`triton_aot.stand_in_gpu`: Triton's
driver an sm_90 GPU that is not there), no GPU needed: each call binds, specialises, compiles
and finds its kernels as on the GPU, which the CPU interpreter never does - models in bf16
in training, inference, cached decoding and under torch.compile, the direct launches against
Triton's own path, what a call keeps and makes. The builds alone: tests/test_triton_compile.py."""

from __future__ import annotations

import importlib.metadata
import importlib.util
from types import SimpleNamespace

import pytest
import torch
from host_reads import HostReads

# The sm_90 builds and the stand-in GPU use Triton 3.6 to 3.9's compiler and driver
# interfaces (an older one has no `driver._active`, its `get_ptxas` takes no arch), and
# kernel="triton" refuses a Triton before 3.6.
pytest.importorskip("triton", minversion="3.6")


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
    monkeypatch.setattr(
        table_bias, "importlib", SimpleNamespace(util=untraceable, metadata=importlib.metadata)
    )
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


def test_tupe_r_keeps_no_folded_copy_of_q_and_k(aot, monkeypatch):
    """TUPE-R's training call through the stand-in GPU (bf16, B=H=8, n=1024, d_h=64): with its
    absolute part's factors read beside q and k and their gradients summed in the kernels
    (the default), its extra peak memory is below the folded copy's by at least two [B, H,
    n, 128] copies (53 MiB against 93; with the gradients a row per batch element and head
    it took 65; at n = 8192: 425 MiB against 745)."""
    from posattn.lab.bench.attention_rows import attention_call
    from posattn.lab.bench.memory import extra_peak_mib
    from posattn.lab.bench.settings import BenchSettings

    settings = BenchSettings(dtype="bfloat16")
    peaks = {}
    with aot.stand_in_gpu(record=False):
        for layout in ("beside", "folded"):
            monkeypatch.setenv("POSATTN_TRITON_FACTORS", layout)
            call = attention_call("tupe-r", settings, 1024, True, "cpu", kernel="triton")
            call()
            peaks[layout] = extra_peak_mib(call) * 2**20
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


@pytest.mark.parametrize(
    "dtype, encodings",
    [("bfloat16", ("tupe-r", "tupe-a", "diet-abs")), ("float32", ("tupe-r",))],
    ids=["bfloat16", "float32"],
)
def test_low_rank_encodings_launch_at_the_benchs_head_size_in_either_dtype(aot, dtype, encodings):
    """TUPE-R, TUPE-A and DIET-ABS as `posattn bench` calls them (d_h = 64, a factor as wide)
    train through the stand-in GPU, each kernel within a block's shared memory: in float32
    their factors read beside q and k took 246272 bytes in dK/dV (Hopper's limit: 232448), so
    a float32 call that wide folds them (`table_bias.triton_attention`). float32 runs TUPE-R
    alone: the widest of the three (table, [CLS] untie and factors) and the same width rule,
    for a third of the nine cold builds (125 s on a 2-core CI with Triton's cache empty)."""
    from posattn.lab.bench.attention_rows import attention_call
    from posattn.lab.bench.settings import BenchSettings

    settings = BenchSettings(dtype=dtype)
    with aot.stand_in_gpu() as launches:
        for encoding in encodings:
            attention_call(encoding, settings, 64, True, "cpu", kernel="triton", batch=1)()
    kernels = ["_forward", "_backward_dq_dtable", "_backward_dk_dv"]
    assert [launch.name for launch in launches] == kernels * len(encodings)
