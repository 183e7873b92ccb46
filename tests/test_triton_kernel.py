"""kernel="triton" under Triton's CPU interpreter: values and every gradient (q, k, v and the
bias table) equal the eager reference in float32, with padding, causality, decoding rows and
every table-described encoding; and each configuration it cannot serve is refused by name.

TRITON_INTERPRET=1 is set for this module only, before posattn builds its Triton kernels, and
the interpreted kernels are dropped afterwards (a GPU run later in the process compiles them).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections import Counter

import pytest
import torch
from conftest import tiny_config, tiny_encoder
from packaging.version import Version
from test_kernels import padded_batch
from transformers import DynamicCache

from posattn import PosAttnConfigError, PosAttnForCausalLM
from posattn.kernels import build_attention_mask, eager_attention, get_kernel
from posattn.kernels.masks import key_spans
from posattn.kernels.table_bias import TableBias, forget_built_kernels, key_rules
from posattn.toeplitz import ClsUntie, TableTails

triton = pytest.importorskip("triton")
if Version(triton.__version__) < Version("3.7"):
    # Its interpreter's scalars are one-element arrays, and `range(0, N, ...)` over a kernel
    # argument calls int() on one, which recent numpy refuses (2.4: "only 0-dimensional arrays
    # can be converted to Python scalars"; deprecated since 1.25); 3.7 squeezes them. Compiled
    # on a GPU, 3.6 runs the kernels (tests/test_triton_compile.py builds them with it too).
    pytest.skip(
        f"Triton {triton.__version__}'s CPU interpreter cannot run these kernels under recent "
        "numpy; 3.7 or later can",
        allow_module_level=True,
    )


@contextlib.contextmanager
def language_patched_once_per_launch():
    """Triton's interpreter patches triton.language for each launch, and again at every call
    of a @triton.jit helper inside it (`_patch_lang`: inspect.getmembers over the language's
    modules, never undone), though the launch's patches already hold there: a fifth of these
    tests' time. Here a helper's call inside a launch patches nothing; a launch patches as
    before and undoes it after. Where Triton has no `_patch_lang`, nothing changes."""
    from triton.runtime import interpreter

    patch_lang = getattr(interpreter, "_patch_lang", None)
    if patch_lang is None:
        yield
        return
    launches = []

    def once_per_launch(fn):
        if launches:  # a helper's call: the launch's patches hold
            return None
        scope = patch_lang(fn)
        restore = scope.restore

        def restore_and_end():
            launches.pop()
            restore()

        scope.restore = restore_and_end
        launches.append(scope)
        return scope

    interpreter._patch_lang = once_per_launch
    try:
        yield
    finally:
        interpreter._patch_lang = patch_lang


@contextlib.contextmanager
def overflow_checks_never_asserted_not_computed():
    """Triton's interpreter computes an overflow check around every 32-bit integer add, sub
    and mul of a kernel (its builder's `sanitize_overflow`, on: both operands cast to 64 bits,
    the operation again, two comparisons) and hands the result to `device_assert`, which
    returns at once unless the builder's `debug` is on - never in the interpreter (Triton
    3.9): a third of these tests' time went to conditions nobody read. A kernel compiled for a
    GPU without debug carries no check either. Where debug is on, or the options differ,
    nothing changes."""
    from triton.runtime import interpreter

    builder = getattr(interpreter, "interpreter_builder", None)
    options = getattr(builder, "options", None)
    if (
        not dataclasses.is_dataclass(options)
        or getattr(options, "debug", True)
        or not getattr(options, "sanitize_overflow", False)
    ):
        yield
        return
    builder.options = dataclasses.replace(options, sanitize_overflow=False)
    try:
        yield
    finally:
        builder.options = options


@contextlib.contextmanager
def numpy_dtypes_looked_up_once():
    """Triton's interpreter finds the numpy dtype of a Triton type (`_get_np_dtype`, at every
    load, store, cast, splat and arithmetic op) by building a dict of eighteen types, each
    hashed by its name in Python, on every call. Here each type's answer is kept after its
    first lookup (a function of the type alone; pointer types, unhashable, are looked up as
    before). Where Triton has no `_get_np_dtype`, nothing changes."""
    from triton.runtime import interpreter

    get_np_dtype = getattr(interpreter, "_get_np_dtype", None)
    if get_np_dtype is None:
        yield
        return
    found = {}

    def looked_up_once(tt_dtype):
        try:
            return found[tt_dtype]
        except KeyError:
            found[tt_dtype] = np_dtype = get_np_dtype(tt_dtype)
            return np_dtype
        except TypeError:  # unhashable (a pointer type)
            return get_np_dtype(tt_dtype)

    interpreter._get_np_dtype = looked_up_once
    try:
        yield
    finally:
        interpreter._get_np_dtype = get_np_dtype


@pytest.fixture(scope="module", autouse=True)
def interpreter():
    previous = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    forget_built_kernels()
    with (
        language_patched_once_per_launch(),
        overflow_checks_never_asserted_not_computed(),
        numpy_dtypes_looked_up_once(),
    ):
        yield
    forget_built_kernels()
    if previous is None:
        del os.environ["TRITON_INTERPRET"]
    else:
        os.environ["TRITON_INTERPRET"] = previous


@pytest.fixture(autouse=True)
def float32():
    torch.set_default_dtype(torch.float32)
    yield
    torch.set_default_dtype(torch.float64)


def toeplitz_rows(table: torch.Tensor, n_q: int, n_k: int) -> torch.Tensor:
    """[H, n_q, n_k] bias of the rule bias[h, i, j] = table[h, j - i + n_q - 1], written out."""
    i, j = torch.meshgrid(torch.arange(n_q), torch.arange(n_k), indexing="ij")
    return table[:, j - i + n_q - 1]


# (n_q, n_k, padding, causal, query_start): odd lengths crossing several 32 x 16 tiles.
CASES = [
    (70, 70, False, False, 0),
    (48, 48, False, False, 0),  # whole key blocks (no mask at all), a partial query block
    (37, 37, True, False, 0),  # right, left and full padding
    (45, 45, True, True, 0),  # left-padded causal rows are opened to every key
    (1, 1, False, True, 0),
    (21, 40, True, True, 19),  # decoding rows [19, 40) over all keys
    (70, 70, False, True, 0),  # causal without padding: blocks below the diagonal unmasked
    (33, 64, False, True, 31),  # the same for decoding rows
    (17, 33, True, False, 0),  # cross-attention shape: a key mask, no table
]


# Head size 16 fills its block (masks per row); 8 fills half a 16-wide block (masked columns),
# tried on the two padded cases with decoding rows or no table (the interpreter's time is the
# tests' budget; the other padded cases at 8 added 5 s and nothing these two miss).
HEAD_CASES = [(*case, 16) for case in CASES] + [(*case, 8) for case in CASES if case[0] != case[1]]


@pytest.mark.parametrize(("n_q", "n_k", "padded", "causal", "query_start", "head_dim"), HEAD_CASES)
def test_values_and_every_gradient_equal_eager(n_q, n_k, padded, causal, query_start, head_dim):
    torch.manual_seed(0)
    batch, heads = (3 if padded else 1), 2
    q = torch.randn(batch, heads, n_q, head_dim, requires_grad=True)
    k, v = (torch.randn(batch, heads, n_k, head_dim, requires_grad=True) for _ in range(2))
    with_table = n_q + query_start == n_k
    table = torch.randn(heads, n_q + n_k - 1, requires_grad=True) if with_table else None
    padding = None
    if padded:
        padding = torch.ones(batch, n_k, dtype=torch.bool)
        # Padding over whole 16-key blocks, which the kernels skip (`_key_span`).
        padding[0, :20] = False
        padding[1, n_k - 20 :] = False
        padding[2] = False
    if with_table:
        mask = build_attention_mask(padding, n_k, causal, torch.device("cpu"), query_start)
    else:
        mask = padding[:, None, None, :]
    bias = None if table is None else toeplitz_rows(table, n_q, n_k)
    grad = torch.randn(batch, heads, n_q, head_dim)
    inputs = [t for t in (q, k, v, table) if t is not None]

    ours = get_kernel("triton")(
        q, k, v, mask=mask, bias=None, scale=0.3, tables=TableBias(offset=table)
    )
    reference = eager_attention(q, k, v, mask=mask, bias=bias, scale=0.3)
    grads = torch.autograd.grad(ours, inputs, grad)
    reference_grads = torch.autograd.grad(reference, inputs, grad)
    if not with_table:
        # Batch element 2 sees no key at all: eager gives NaN, the kernel 0 and no gradient.
        assert (ours[2] == 0).all() and all((g[2] == 0).all() for g in grads)
        ours, reference = ours[:2], reference[:2]
        grads, reference_grads = (tuple(g[:2] for g in gs) for gs in (grads, reference_grads))
    torch.testing.assert_close(ours, reference, atol=2e-6, rtol=2e-5)
    for a, b in zip(grads, reference_grads, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


# (causal, query_start, hidden keys per batch element, tails): blocks of padding no row sees.
RIGHT_AND_LEFT = (slice(50, 70), slice(0, 66))  # the left past where rows' high tails begin
SKIPPED_CASES = [
    (False, 0, RIGHT_AND_LEFT, False),
    (False, 0, RIGHT_AND_LEFT, True),
    (True, 0, (slice(45, 70), slice(40, 70)), True),  # right only: no row opened to every key
    (True, 30, (slice(45, 70), slice(0, 10)), True),  # decoding rows [30, 70): none opened
]


@pytest.mark.parametrize(("causal", "query_start", "hidden", "with_tails"), SKIPPED_CASES)
def test_blocks_of_padding_are_never_read(causal, query_start, hidden, with_tails):
    """Key blocks before a batch element's first visible key or after its last, which no row
    sees, are skipped by every kernel (`_key_span`, `_query_begin`), also where they lie between
    a flat table's tails at +-10 or inside them: NaN in their keys and values leaves the
    output and every gradient equal to eager's with zeros there (a block read and masked
    multiplies its NaN by 0), dK and dV 0 there."""
    from posattn.kernels import triton_settings

    torch.manual_seed(4)
    n_k, heads = 70, 2
    n_q = n_k - query_start
    block = triton_settings.INTERPRETER_TILES.block_n
    padding = torch.ones(len(hidden), n_k, dtype=torch.bool)
    poison = torch.zeros(len(hidden), 1, n_k, 1, dtype=torch.bool)
    for row, keys in enumerate(hidden):
        padding[row, keys] = False
        # The whole blocks inside the hidden run (the last block ends at n_k).
        stop = n_k if keys.stop == n_k else keys.stop // block * block
        whole = range(-(-keys.start // block) * block, stop)
        poison[row, 0, whole.start : whole.stop] = True
    assert poison.any()
    mask = build_attention_mask(padding, n_k, causal, torch.device("cpu"), query_start)
    q = torch.randn(len(hidden), heads, n_q, 16, requires_grad=True)
    parameter = torch.randn(heads, n_q + n_k - 1, requires_grad=True)
    flat = (n_k - 11, n_k + 9) if with_tails else (0, n_q + n_k - 2)
    tails = TableTails(*(x - (n_k - 1) for x in flat)) if with_tails else None
    k, v = (torch.randn(len(hidden), heads, n_k, 16) for _ in range(2))
    poisoned, clean = (
        [torch.where(poison, fill, x).requires_grad_() for x in (k, v)] for fill in (torch.nan, 0.0)
    )
    tables = TableBias(offset=clamped_table(parameter, flat), offset_tails=tails)
    ours = get_kernel("triton")(q, *poisoned, mask=mask, bias=None, scale=0.3, tables=tables)
    bias = toeplitz_rows(clamped_table(parameter, flat), n_q, n_k)
    reference = eager_attention(q, *clean, mask=mask, bias=bias, scale=0.3)
    torch.testing.assert_close(ours, reference, atol=2e-6, rtol=2e-5)
    grad = torch.randn_like(ours)
    grads = torch.autograd.grad(ours, (q, parameter, *poisoned), grad)
    expected = torch.autograd.grad(reference, (q, parameter, *clean), grad)
    for name, a, b in zip(("q", "table", "k", "v"), grads, expected, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4, msg=name)
    assert all((g.masked_select(poison) == 0).all() for g in grads[2:])


@pytest.mark.parametrize(("causal", "query_start"), [(False, 0), (True, 0), (True, 20)])
def test_only_blocks_inside_a_run_of_visible_keys_go_unmasked(monkeypatch, causal, query_start):
    """The key blocks inside a batch element's visible keys take no mask in the forward and
    dQ where no key between its first and last visible one is hidden (right padding, row 0:
    blocks [0, 32) of 16), and all keep it where one is (row 1, left padding with keys 20-23
    hidden inside: `key_spans`' last column; read as a run, the kernels would see them);
    causal rows opened to every key (row 1's first five) among them. Values and every
    gradient against eager, with POSATTN_TRITON_KEY_RUNS on and off (the default)."""
    torch.manual_seed(7)
    n_k, heads = 50, 2
    n_q = n_k - query_start
    padding = torch.ones(2, n_k, dtype=torch.bool)
    padding[0, 40:] = False
    padding[1, :5] = False
    padding[1, 20:24] = False
    mask = build_attention_mask(padding, n_k, causal, torch.device("cpu"), query_start)
    q = torch.randn(2, heads, n_q, 16, requires_grad=True)
    k, v = (torch.randn(2, heads, n_k, 16, requires_grad=True) for _ in range(2))
    table = torch.randn(heads, n_q + n_k - 1, requires_grad=True)
    grad = torch.randn(2, heads, n_q, 16)
    for runs in ("on", "off"):
        monkeypatch.setenv("POSATTN_TRITON_KEY_RUNS", runs)
        bias = toeplitz_rows(table, n_q, n_k)
        reference = eager_attention(q, k, v, mask=mask, bias=bias, scale=0.3)
        tables = TableBias(offset=table)
        out = get_kernel("triton")(q, k, v, mask=mask, bias=None, scale=0.3, tables=tables)
        assert_values_and_gradients_equal(out, reference, (q, k, v, table), grad)


def assert_values_and_gradients_equal(out, reference, leaves, grad) -> None:
    """The kernel's output and its gradients for every leaf (q, k, v, then the tables) equal
    eager's."""
    torch.testing.assert_close(out, reference, atol=2e-6, rtol=2e-5)
    ours = torch.autograd.grad(out, leaves, grad)
    expected = torch.autograd.grad(reference, leaves, grad)
    for index, (a, b) in enumerate(zip(ours, expected, strict=True)):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4, msg=f"leaf {index}")


def test_a_table_of_another_length_is_refused_by_name():
    """bias[h, i, j] = table[h, j - i + n_q - 1] needs n_q + n_k - 1 entries per head: the
    reversed copies dK/dV reads run from the last one, so a longer table would shift its
    bias. Refused, naming the shape and what it must be."""
    from posattn.kernels.triton_bias import table_bias_attention

    q, k, v = (torch.randn(1, 2, 7, 16) for _ in range(3))
    for length in (12, 14):
        pattern = rf"table.shape=\(2, {length}\).*\(2, 13\)"
        with pytest.raises(PosAttnConfigError, match=pattern):
            table_bias_attention(q, k, v, scale=0.25, table=torch.randn(2, length))


def test_causal_calls_without_first_real_take_it_from_the_keys():
    """first_real left out: the first key `keys` shows (n_k where none is), as key_rules
    gives it, or 0 without keys - eager's causal rows either way, every batch element."""
    from posattn.kernels.triton_bias import table_bias_attention

    torch.manual_seed(5)
    cpu = torch.device("cpu")
    q, k, v = (torch.randn(3, 2, 40, 16) for _ in range(3))
    padding = torch.ones(3, 40, dtype=torch.bool)
    padding[0, :20] = False
    padding[2] = False
    for keys_mask in (padding, None):
        mask = build_attention_mask(keys_mask, 40, True, cpu)
        keys, causal, _, _, _ = key_rules(mask, 3, 40)
        ours = table_bias_attention(q, k, v, scale=0.3, keys=keys, causal=causal)
        reference = eager_attention(q, k, v, mask=mask, bias=None, scale=0.3)
        torch.testing.assert_close(ours, reference, atol=2e-6, rtol=2e-5)


def test_a_masks_key_rules_are_made_once_and_anew_when_it_is_written(monkeypatch):
    """key_rules keeps what it derives on the mask (`derived_once`): the layers of a forward
    get the same keys and spans, made once; a mask written in place is derived anew, and one
    made under inference mode (no version counter) in each call."""
    from posattn.kernels import table_bias

    made = []
    monkeypatch.setattr(table_bias, "key_spans", lambda *a: made.append(1) or key_spans(*a))
    ids, mask, segment_ids = padded_batch()
    model = tiny_encoder("t5", num_layers=2)
    model.set_kernel("triton")
    model(ids, mask, segment_ids)
    assert len(made) == 1
    with torch.inference_mode():  # a mask without a version counter: the same outputs
        ours = model(ids, mask, segment_ids)
        model.set_kernel("eager")
        torch.testing.assert_close(ours, model(ids, mask, segment_ids), atol=2e-5, rtol=2e-5)
    keys = torch.ones(2, 1, 1, 40, dtype=torch.bool)
    keys[0, ..., 30:] = False
    rules = key_rules(keys, 2, 40)
    assert all(a is b for a, b in zip(key_rules(keys, 2, 40), rules, strict=True))
    assert rules[4].tolist() == [[0, 0, 30, 1], [0, 0, 40, 1]]
    keys[1, ..., 35:] = False
    assert key_rules(keys, 2, 40)[4].tolist() == [[0, 0, 30, 1], [0, 0, 35, 1]]
    with torch.inference_mode():  # no version counter: derived in each call
        frozen = torch.ones(2, 1, 1, 40, dtype=torch.bool)
        assert key_rules(frozen, 2, 40)[4].tolist() == [[0, 0, 40, 1], [0, 0, 40, 1]]
        frozen[1, ..., 35:] = False
        assert key_rules(frozen, 2, 40)[4].tolist() == [[0, 0, 40, 1], [0, 0, 35, 1]]


def test_absent_arguments_are_made_once_and_outlive_inference_mode():
    """Stand-ins for absent tensors (no table, no mask, no segments) are made once per device
    and dtype, not per call; made first under inference mode, they are still ordinary
    tensors that a later training call saves for backward, with eager's gradients."""
    from posattn.kernels import triton_bias, triton_inputs

    triton_inputs.absent.cache_clear()
    torch.manual_seed(2)
    q, k, v = (torch.randn(1, 2, 19, 16) for _ in range(3))
    with torch.inference_mode():
        triton_bias.table_bias_attention(q, k, v, scale=0.25)
    stand_in = triton_inputs.absent(q.device, torch.float32)
    assert not stand_in.is_inference()
    inputs = [t.clone().requires_grad_() for t in (q, k, v)]
    out = triton_bias.table_bias_attention(*inputs, scale=0.25)
    reference = eager_attention(*inputs, mask=None, bias=None, scale=0.25)
    assert_values_and_gradients_equal(out, reference, inputs, torch.randn_like(out))
    assert triton_inputs.absent(q.device, torch.float32) is stand_in
    assert stand_in.item() == 0.0  # never written


# (n_q, n_k, query_start, row, column, with_table): the untied row and column inside a tile, on
# a tile's edge, decoding rows [19, 40) whose slice starts past the [CLS] row (row -16) or holds
# it; on T5's table (TUPE-R) and on zeros (TUPE-A).
UNTIE_CASES = [
    (37, 37, 0, 3, 3, True),
    (45, 45, 0, 16, 16, True),
    (21, 40, 19, -16, 3, True),
    (21, 40, 19, 6, 25, True),
    (37, 37, 0, 3, 3, False),
    (21, 40, 19, 6, 25, False),
]


@pytest.mark.parametrize(("n_q", "n_k", "query_start", "row", "column", "with_table"), UNTIE_CASES)
def test_cls_untie_equals_its_bias_in_values_and_every_gradient(
    n_q, n_k, query_start, row, column, with_table
):
    """TUPE's [CLS] untie read in the kernel (a row of the table's bias, or of zeros, 0; a
    column one value per head) equals eager with the bias written out: values and the
    gradients of q, k, v, the column's values and the table (whose gradient leaves the untied
    scores out)."""
    torch.manual_seed(0)
    batch, heads, head_dim = 2, 2, 16
    q = torch.randn(batch, heads, n_q, head_dim, requires_grad=True)
    k, v = (torch.randn(batch, heads, n_k, head_dim, requires_grad=True) for _ in range(2))
    table = torch.randn(heads, n_q + n_k - 1, requires_grad=True) if with_table else None
    column_value = torch.randn(heads, requires_grad=True)
    untie = ClsUntie(row, column, column_value)
    padding = torch.ones(batch, n_k, dtype=torch.bool)
    padding[1, n_k - 4 :] = False
    mask = build_attention_mask(padding, n_k, query_start > 0, torch.device("cpu"), query_start)
    grad = torch.randn(batch, heads, n_q, head_dim)
    inputs = (q, k, v, column_value) + ((table,) if with_table else ())
    tables = TableBias(offset=table, cls_untie=untie)
    ours = get_kernel("triton")(q, k, v, mask=mask, bias=None, scale=0.3, tables=tables)
    matrix = toeplitz_rows(table, n_q, n_k) if with_table else torch.zeros(heads, n_q, n_k)
    reference = eager_attention(q, k, v, mask=mask, bias=untie.applied(matrix), scale=0.3)
    assert_values_and_gradients_equal(ours, reference, inputs, grad)


@pytest.fixture
def restore_determinism():
    """torch.use_deterministic_algorithms as it was before the test."""
    enabled = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    yield
    torch.use_deterministic_algorithms(enabled, warn_only=warn_only)


def atomic_adds_per_address(monkeypatch) -> Counter:
    """How many atomic adds the interpreted kernels make to each address (filled as they
    run)."""
    from triton.runtime import interpreter

    adds = Counter()
    original = interpreter.InterpreterBuilder.create_atomic_rmw

    def counted(self, rmw, ptr, val, mask, sem, scope):
        adds.update(ptr.data[mask.data].ravel().tolist())
        return original(self, rmw, ptr, val, mask, sem, scope)

    monkeypatch.setattr(interpreter.InterpreterBuilder, "create_atomic_rmw", counted)
    return adds


def learned_tables_case(padded: bool, causal: bool, n: int) -> tuple:
    """q, k, v [2, 2, n, 16], an offset table, the untie's column values and DIET's segment
    pairs (all leaves), segment ids (segment 1 from position 20) and the mask (the second
    row's last 7 keys padded if `padded`)."""
    torch.manual_seed(0)
    batch, heads = 2, 2
    q, k, v = (torch.randn(batch, heads, n, 16, requires_grad=True) for _ in range(3))
    table = torch.randn(heads, 2 * n - 1, requires_grad=True)
    column_value = torch.randn(heads, requires_grad=True)
    pairs = torch.randn(heads, 4, requires_grad=True)
    ids = (torch.arange(n) >= 20).long().expand(batch, n)
    padding = torch.ones(batch, n, dtype=torch.bool)
    if padded:
        padding[1, n - 7 :] = False
    mask = build_attention_mask(padding, n, causal, torch.device("cpu"))
    return q, k, v, table, column_value, pairs, ids, mask


# (padded, causal, table tails as indices, segments, dK/dV's orientation): the table's
# gradient carried across key blocks, a tail's sum on its bound, causal blocks skipped,
# segment pairs per key block.
DETERMINISTIC_CASES = [
    (True, True, (30, 50), False, "query-major"),
    (True, False, (30, 47), True, "key-major"),
]


@pytest.mark.parametrize(("padded", "causal", "tails", "segments", "order"), DETERMINISTIC_CASES)
def test_deterministic_dropout_equals_eager_and_takes_at_most_two_adds_per_address(
    monkeypatch, restore_determinism, padded, causal, tails, segments, order
):
    """Two features at once, each against eager. Under torch.use_deterministic_algorithms
    the tables' gradients (the table's, TUPE's untie's, DIET's segment table's) are added per
    query block into copies of their own and summed after in a fixed order: no address takes
    more than two atomic adds, so the order the blocks run in cannot change a bit (two adds
    onto zero give one value either way); shared by every block, an address takes many.
    Attention dropout inside the kernel: the output and every gradient equal eager's with the
    scores the kernel drops (its seed drawn from torch's generator, its mask `kept_scores`)
    zeroed and the rest scaled by 1 / (1 - p), dK/dV key- or query-major; about 1 - p of the
    scores kept."""
    from posattn.kernels.table_bias import SegmentPairs
    from posattn.kernels.triton_bias import kept_scores

    monkeypatch.setenv("POSATTN_TRITON_DK_DV_ORDER", order)
    batch, heads, n, p = 2, 2, 36, 0.3
    q, k, v, table, column_value, pairs, ids, mask = learned_tables_case(padded, causal, n)
    grad = torch.randn(batch, heads, n, 16)
    untie = ClsUntie(3, 3, column_value)
    known = TableTails(*(index - (n - 1) for index in tails))
    pair_bias = SegmentPairs(pairs, ids, 2) if segments else None
    leaves = [q, k, v, table, column_value] + ([pairs] if segments else [])

    def call():  # the table read anew for each backward
        tables = TableBias(offset=clamped_table(table, tails), offset_tails=known,
                           segments=pair_bias, cls_untie=untie)  # fmt: skip
        kernel = get_kernel("triton")
        return kernel(q, k, v, mask=mask, bias=None, scale=0.3, dropout_p=p, tables=tables)

    adds = atomic_adds_per_address(monkeypatch)
    call().backward(grad)
    assert max(adds.values()) > 2  # one table for every block: many adds per address
    for leaf in leaves:
        leaf.grad = None
    adds.clear()
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(7)
    ours = call()
    torch.manual_seed(7)
    kept = kept_scores(torch.randint(0, 2**31 - 1, (1,)), batch, heads, n, n, p)
    assert abs(kept.float().mean().item() - (1 - p)) < 0.03  # 5184 scores: 4.7 sigma
    bias = untie.applied(toeplitz_rows(clamped_table(table, tails), n, n))[None]
    if segments:
        bias = bias + pair_bias.dense()
    logits = (q @ k.transpose(-1, -2)) * 0.3 + bias
    probs = logits.masked_fill(~mask, float("-inf")).softmax(-1)
    reference = (probs * kept / (1 - p)) @ v
    assert_values_and_gradients_equal(ours, reference, leaves, grad)
    assert adds and max(adds.values()) <= 2


def test_the_wide_skew_follows_torchs_deterministic_setting(monkeypatch, restore_determinism):
    """The wide skew adds a table entry more than twice per query block: under
    torch.use_deterministic_algorithms(True) its backward raises, naming the kernel, the
    gradient and the deterministic setting; with warn_only=True it warns and gives the
    gradients it gives otherwise. The forward runs as before."""
    monkeypatch.setenv("POSATTN_TRITON_SKEW", "wide")
    torch.manual_seed(0)
    heads, n = 2, 20
    q, k, v = (torch.randn(2, heads, n, 16, requires_grad=True) for _ in range(3))
    table = torch.randn(heads, 2 * n - 1, requires_grad=True)
    leaves = [q, k, v, table]

    def call():
        tables = TableBias(offset=table)
        return get_kernel("triton")(q, k, v, mask=None, bias=None, scale=0.3, tables=tables)

    expected = torch.autograd.grad(call().square().sum(), leaves)
    torch.use_deterministic_algorithms(True)
    out = call()
    alert = r"kernel='triton' adds the gradient of the bias table under the wide skew"
    with pytest.raises(RuntimeError, match=alert):
        torch.autograd.grad(out.square().sum(), leaves)
    torch.use_deterministic_algorithms(True, warn_only=True)
    with pytest.warns(UserWarning, match=alert):
        got = torch.autograd.grad(call().square().sum(), leaves)
    for ours, reference in zip(got, expected, strict=True):
        torch.testing.assert_close(ours, reference)


def test_auto_takes_the_kernel_under_deterministic_algorithms_where_it_is_deterministic(
    monkeypatch, restore_determinism
):
    """While determinism is asked for, `auto` takes the kernel for a large learned table
    under the circular skew (deterministic) and leaves it to SDPA under the wide one; for
    inference it takes it either way."""
    from posattn.kernels import flex

    class Shaped:  # q or k as the rule reads them, on a GPU
        shape, device = (8, 8, 8192, 64), torch.device("cuda")

        def element_size(self):
            return 2

    monkeypatch.setattr(flex, "serves_table", lambda *args: True)
    q = Shaped()
    torch.use_deterministic_algorithms(True)
    assert flex.auto_takes_triton(q, q, None, None, True)
    monkeypatch.setenv("POSATTN_TRITON_SKEW", "wide")
    assert not flex.auto_takes_triton(q, q, None, None, True)
    assert flex.auto_takes_triton(q, q, None, None, False, inference=True)
    torch.use_deterministic_algorithms(False)
    assert flex.auto_takes_triton(q, q, None, None, True)


def test_philox_gives_the_published_known_answers():
    """The dropout's Philox4x32-10 (`_philox`) reproduces the generator's published
    known-answer vectors (Random123's: a zero counter and key; the counter and key of pi's
    hexadecimal digits)."""
    from posattn.kernels.triton_tile_ops import _philox

    def philox_of(C, K, OUT, PHILOX: triton.language.constexpr):  # [2, 4], [2, 2] -> [2, 4]
        rows = triton.language.arange(0, 2)
        words = [triton.language.load(C + rows * 4 + index) for index in range(4)]
        keys = [triton.language.load(K + rows * 2 + index) for index in range(2)]
        draws = PHILOX(words[0], words[1], words[2], words[3], keys[0], keys[1])
        for index in range(4):
            triton.language.store(OUT + rows * 4 + index, draws[index])

    def uint32(values):
        return torch.tensor(values, dtype=torch.int64).to(torch.int32).view(torch.uint32)

    out = uint32([0] * 8)
    words = [0, 0, 0, 0, 0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344]
    keys = uint32([0, 0, 0xA4093822, 0x299F31D0])
    triton.jit(philox_of)[(1,)](uint32(words), keys, out, PHILOX=_philox)
    assert [int(x) & 0xFFFFFFFF for x in out.view(torch.int32)] == [
        0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8,
        0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1,
    ]  # fmt: skip


@pytest.mark.filterwarnings("ignore:`gradient_checkpointing_enable` is deprecated")
def test_a_model_trains_with_attention_dropout_on_the_kernel():
    """A masked LM with attention dropout trains on kernel="triton": the same seed gives the
    same loss, another seed another, eval mode none of it; with gradient checkpointing (its
    recomputed forward draws the same seed: torch restores the generator) every gradient
    equals the plain model's."""
    import copy

    from posattn import PosAttnForMaskedLM

    torch.manual_seed(0)
    config = tiny_config("t5", kernel="triton", attention_dropout=0.3, num_layers=1)
    model = PosAttnForMaskedLM(config).train()
    ids = torch.randint(1, 40, (2, 12))

    def loss(model, seed):
        torch.manual_seed(seed)
        return model(input_ids=ids, labels=ids).loss

    first, again, other = loss(model, 1), loss(model, 1), loss(model, 2)
    assert torch.equal(first, again) and not torch.allclose(first, other)
    first.backward()
    checkpointed = copy.deepcopy(model)
    checkpointed.zero_grad()
    checkpointed.gradient_checkpointing_enable()
    loss(checkpointed, 1).backward()
    for ours, plain in zip(checkpointed.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(ours.grad, plain.grad)
    model.eval()
    with torch.no_grad():
        evaluated = model(input_ids=ids, labels=ids).loss
        model.posattn.encoder.set_kernel("eager")
        torch.testing.assert_close(evaluated, model(input_ids=ids, labels=ids).loss)


# (n_q, n_k, query_start, (low, high) table indices, padded, causal, untie, the backward's
# choices): tails on both sides of the interpreter's 32 x 16 tiles, the low one alone (TUPE's
# untied column inside it, decoding rows), causal rows hiding the high one.
FLAT_CASES = [
    (48, 48, 0, (30, 47), False, False, None, ("shared", "circular", "key-major")),
    (48, 48, 0, (34, 60), True, True, None, ("per-batch", "wide", "query-major")),
    (48, 48, 0, (30, 200), True, False, (3, 3), ("per-batch", "circular", "key-major")),
    (21, 40, 19, (35, 50), True, True, (6, 25), ("shared", "wide", "query-major")),
]


def clamped_table(parameter: torch.Tensor, flat: tuple[int, int]) -> torch.Tensor:
    """A table flat past `flat` by construction, as the encodings make theirs: each entry
    read from `parameter` at its index clamped to `flat`."""
    return parameter[:, torch.arange(parameter.shape[-1]).clamp(*flat)]


def tail_test_mask(batch: int, n_k: int, padded: bool, causal: bool, start: int):
    """The tails tests' mask: left padding in the first row, right in the second, each over
    a whole 16-key block (skipped) and part of another."""
    padding = None
    if padded:
        padding = torch.ones(batch, n_k, dtype=torch.bool)
        padding[0, :20] = False
        padding[1, n_k - 20 :] = False
    return build_attention_mask(padding, n_k, causal, torch.device("cpu"), start)


@pytest.mark.parametrize(
    ("n_q", "n_k", "start", "flat", "padded", "causal", "untie", "choices"), FLAT_CASES
)
def test_tails_equal_eager_in_values_and_every_gradient(
    monkeypatch, n_q, n_k, start, flat, padded, causal, untie, choices
):
    """A table's flat tails (`tails`: each tile inside one adds one value per head, and sums
    its dS into the tail's first entry) give eager's values and gradients - of q, k, v, the
    untie's column values and the parameter the table is read from - under each mode of the
    backward; and the tails are read as one value indeed: claimed of a table that is not
    flat, the output changes, and with POSATTN_TRITON_TABLE_TAILS=off it does not."""
    from posattn.kernels.triton_bias import table_bias_attention

    torch.manual_seed(2)
    batch, heads = (2 if padded else 1), 2  # the padding pattern takes two rows
    q = torch.randn(batch, heads, n_q, 16, requires_grad=True)
    k, v = (torch.randn(batch, heads, n_k, 16, requires_grad=True) for _ in range(2))
    parameter = torch.randn(heads, n_q + n_k - 1, requires_grad=True)
    mask = tail_test_mask(batch, n_k, padded, causal, start)
    column = None if untie is None else torch.randn(heads, requires_grad=True)
    rule = None if untie is None else ClsUntie(*untie, column)
    leaves = (q, k, v, parameter) + (() if column is None else (column,))
    for name, choice in zip(("TABLE_GRAD", "SKEW", "DK_DV_ORDER"), choices, strict=True):
        monkeypatch.setenv(f"POSATTN_TRITON_{name}", choice)
    tails = TableTails(*(x - (n_k - 1) for x in flat))
    tables = TableBias(offset=clamped_table(parameter, flat), cls_untie=rule, offset_tails=tails)
    out = get_kernel("triton")(q, k, v, mask=mask, bias=None, scale=0.3, tables=tables)
    matrix = toeplitz_rows(clamped_table(parameter, flat), n_q, n_k)
    bias = matrix if rule is None else rule.applied(matrix)
    reference = eager_attention(q, k, v, mask=mask, bias=bias, scale=0.3)
    assert_values_and_gradients_equal(out, reference, leaves, torch.randn_like(out))
    not_flat = torch.randn(heads, n_q + n_k - 1)
    keys, causal_rule, first, query_start, _ = key_rules(mask, batch, n_k)
    inputs = (q.detach(), k.detach(), v.detach())
    common = dict(scale=0.3, table=not_flat, keys=keys, causal=causal_rule, first_real=first,
                  query_start=query_start)  # fmt: skip
    honest = table_bias_attention(*inputs, **common)
    assert not torch.allclose(table_bias_attention(*inputs, **common, tails=flat), honest)
    monkeypatch.setenv("POSATTN_TRITON_TABLE_TAILS", "off")
    torch.testing.assert_close(table_bias_attention(*inputs, **common, tails=flat), honest)


# (n_q, n_k, query_start, flat tails as indices or None, padded, causal, the table: None,
# "frozen" or "learned", dropout p): FlashAttention-2's one backward kernel
# (POSATTN_TRITON_BACKWARD=fused) over a whole table, its tails, padding, causality, decoding
# rows, no table, dropout.
FUSED_CASES = [
    (70, 70, 0, None, False, False, "learned", 0.0),
    (48, 48, 0, (30, 47), True, True, "learned", 0.0),
    (21, 40, 19, (35, 50), True, True, "learned", 0.0),
    (37, 37, 0, None, True, False, None, 0.0),
    (45, 45, 0, (20, 70), True, False, "learned", 0.3),
    (48, 48, 0, (30, 47), False, False, "frozen", 0.0),
]


@pytest.mark.parametrize(("n_q", "n_k", "start", "flat", "padded", "causal", "table", "p"),
                         FUSED_CASES)  # fmt: skip
def test_the_fused_backward_equals_eager_in_values_and_every_gradient(
    monkeypatch, launched_kernels, n_q, n_k, start, flat, padded, causal, table, p
):
    """POSATTN_TRITON_BACKWARD=fused: the dK/dV kernel alone (no dQ kernel launched; dQ added
    there with atomics, the table's diagonal sums carried across query blocks in its tiles
    of twice as many keys as queries, its tails' sums on their bounds) gives eager's
    gradients of q, k, v and the table's parameter, with dropout against eager with the
    kernel's mask."""
    from posattn.kernels import triton_bias, triton_settings

    monkeypatch.setenv("POSATTN_TRITON_BACKWARD", "fused")
    # Under the interpreter every kernel takes 32 x 16; dK/dV here 16 queries x 32 keys.
    monkeypatch.setattr(
        triton_settings, "tiles", lambda device, kind: (
            triton_settings.Tiles(16, 32) if kind == "dk_dv"
            else triton_settings.INTERPRETER_TILES
        ),
    )  # fmt: skip
    torch.manual_seed(3)
    batch, heads = (2 if padded else 1), 2
    q = torch.randn(batch, heads, n_q, 16, requires_grad=True)
    k, v = (torch.randn(batch, heads, n_k, 16, requires_grad=True) for _ in range(2))
    mask = tail_test_mask(batch, n_k, padded, causal, start)
    leaves, bias, tables = (q, k, v), None, None
    if table is not None:
        parameter = torch.randn(heads, n_q + n_k - 1, requires_grad=table == "learned")

        def read():  # anew for each graph (each is differentiated once)
            return parameter if flat is None else clamped_table(parameter, flat)

        tails = None if flat is None else TableTails(*(x - (n_k - 1) for x in flat))
        leaves += (parameter,) if table == "learned" else ()
        bias, tables = toeplitz_rows(read(), n_q, n_k), TableBias(offset=read(), offset_tails=tails)
    torch.manual_seed(7)
    out = get_kernel("triton")(q, k, v, mask=mask, bias=None, scale=0.3, dropout_p=p,
                               tables=tables)  # fmt: skip
    if p:
        torch.manual_seed(7)
        seed = torch.randint(0, 2**31 - 1, (1,))
        kept = triton_bias.kept_scores(seed, batch, heads, n_q, n_k, p)
        logits = (q @ k.transpose(-1, -2)) * 0.3 + bias
        reference = (logits.masked_fill(~mask, float("-inf")).softmax(-1) * kept / (1 - p)) @ v
    else:
        reference = eager_attention(q, k, v, mask=mask, bias=bias, scale=0.3)
    assert_values_and_gradients_equal(out, reference, leaves, torch.randn_like(out))
    assert launched_kernels == ["_forward", "_backward_dk_dv"]


def test_the_fused_backward_serves_what_it_can_and_leaves_the_rest_split(monkeypatch):
    """`fused_backward`: chosen by POSATTN_TRITON_BACKWARD=fused, dK/dV key-major; a table's
    gradient only where dK/dV's tile holds twice as many keys as queries; never with TUPE's
    untie, DIET's segments, a low-rank bias's factors or torch.use_deterministic_algorithms."""
    from posattn.kernels.triton_bias import fused_backward
    from posattn.kernels.triton_settings import Tiles, call_settings

    plain = dict(HAS_UNTIE=False, NUM_SEGMENTS=0, DROPOUT=False, FACTOR_AT=0)

    def serves(table_grad=True, dk_dv=(16, 32), order="key-major", **flags):
        monkeypatch.setenv("POSATTN_TRITON_DK_DV_ORDER", order)
        from posattn.kernels import triton_settings

        monkeypatch.setattr(triton_settings, "tiles", lambda device, kind: Tiles(*dk_dv))
        settings = call_settings(torch.device("cpu"))
        return fused_backward(settings, {**plain, **flags}, table_grad)

    assert not serves()  # not chosen
    monkeypatch.setenv("POSATTN_TRITON_BACKWARD", "fused")
    assert serves() and serves(dk_dv=(32, 16), table_grad=False)
    assert not serves(dk_dv=(32, 16)) and not serves(order="query-major")
    assert not serves(HAS_UNTIE=True) and not serves(NUM_SEGMENTS=2)
    assert not serves(FACTOR_AT=16)
    torch.use_deterministic_algorithms(True)
    try:
        assert not serves()
    finally:
        torch.use_deterministic_algorithms(False)


@pytest.mark.parametrize("scale", [0.3, -0.3])
@pytest.mark.parametrize("flat", [None, (30, 47)])
def test_scores_far_apart_keep_their_row_maximum_in_plain_blocks(scale, flat):
    """Blocks whose scores are the scaled product alone (no table, or a flat tail's) take the
    row maximum before the scale, where the scale is >= 0 (`_forward_step`'s PLAIN); scores
    some hundreds apart, where any other value subtracted overflows exp2 or underflows it,
    give eager's values and gradients at either sign of the scale (to float32's rounding of
    scores that large: the kernel keeps its running maximum and sums in float32)."""
    torch.manual_seed(4)
    q, k, v = (torch.randn(1, 2, 48, 16) for _ in range(3))
    q = (40 * q).requires_grad_()
    k, v = k.requires_grad_(), v.requires_grad_()
    leaves, tables, bias = (q, k, v), None, None
    if flat is not None:
        parameter = torch.randn(2, 95, requires_grad=True)
        leaves += (parameter,)
        tails = TableTails(*(x - 47 for x in flat))
        tables = TableBias(offset=clamped_table(parameter, flat), offset_tails=tails)
        bias = toeplitz_rows(clamped_table(parameter, flat), 48, 48)
    out = get_kernel("triton")(q, k, v, mask=None, bias=None, scale=scale, tables=tables)
    reference = eager_attention(q, k, v, mask=None, bias=bias, scale=scale)
    torch.testing.assert_close(out, reference, atol=1e-4, rtol=1e-3)
    grad = torch.randn_like(out)
    ours = torch.autograd.grad(out, leaves, grad)
    expected = torch.autograd.grad(reference, leaves, grad)
    for index, (a, b) in enumerate(zip(ours, expected, strict=True)):
        torch.testing.assert_close(a, b, atol=1e-3, rtol=1e-3, msg=f"leaf {index}")


def test_wide_heads_read_the_table_in_dk_dv_and_their_tails_elsewhere():
    """q and k 128 wide (TUPE-R's fold): dK/dV reads the whole table (`dk_dv_flags`: with the
    tails, Triton 3.6 spilled there), the forward and dQ take the tails; values and every
    gradient still equal eager's."""
    from posattn.kernels.triton_bias import table_bias_attention

    torch.manual_seed(6)
    n, flat = 48, (30, 60)
    q, k = (torch.randn(1, 2, n, 128, requires_grad=True) for _ in range(2))
    v = torch.randn(1, 2, n, 64, requires_grad=True)
    parameter = torch.randn(2, 2 * n - 1, requires_grad=True)
    out = table_bias_attention(q, k, v, scale=0.1, table=clamped_table(parameter, flat),
                               tails=flat)  # fmt: skip
    bias = toeplitz_rows(clamped_table(parameter, flat), n, n)
    reference = eager_attention(q, k, v, mask=None, bias=bias, scale=0.1)
    assert_values_and_gradients_equal(out, reference, (q, k, v, parameter), torch.randn_like(out))


# (n_q, n_k, query_start, (low, high), padded, causal): ALiBi's tails meet at offset 0 (index
# n_k - 1), a general table's lines start further out.
LINEAR_CASES = [
    (48, 48, 0, (47, 47), False, False),
    (48, 48, 0, (40, 60), True, True),
    (21, 40, 19, (36, 50), True, True),
]


@pytest.mark.parametrize(("n_q", "n_k", "start", "bounds", "padded", "causal"), LINEAR_CASES)
def test_linear_tails_equal_eager_in_values_and_input_gradients(
    monkeypatch, n_q, n_k, start, bounds, padded, causal
):
    """A table that is a line past each bound (`tail_slopes`: ALiBi, a fixed table) read as
    the line in the tiles inside its tails gives eager's values and q, k, v gradients; wrong
    slopes change the output, and with POSATTN_TRITON_TABLE_TAILS=off they do not."""
    from posattn.kernels.triton_bias import table_bias_attention

    torch.manual_seed(5)
    batch, heads = (2 if padded else 1), 2  # the padding pattern takes two rows
    q = torch.randn(batch, heads, n_q, 16, requires_grad=True)
    k, v = (torch.randn(batch, heads, n_k, 16, requires_grad=True) for _ in range(2))
    low, high = bounds
    slopes = (torch.rand(heads) * 0.5, -torch.rand(heads) * 0.5)
    index = torch.arange(n_q + n_k - 1)
    table = torch.randn(heads, n_q + n_k - 1) * 0.3
    for bound, slope, beyond in ((low, slopes[0], index < low), (high, slopes[1], index > high)):
        line = table[:, bound, None] + slope[:, None] * (index - bound)
        table = torch.where(beyond, line, table)
    mask = tail_test_mask(batch, n_k, padded, causal, start)
    keys, causal_rule, first, query_start, _ = key_rules(mask, batch, n_k)
    common = dict(scale=0.3, table=table, keys=keys, causal=causal_rule, first_real=first,
                  query_start=query_start)  # fmt: skip
    out = table_bias_attention(q, k, v, **common, tails=bounds, tail_slopes=slopes)
    reference = eager_attention(q, k, v, mask=mask, bias=toeplitz_rows(table, n_q, n_k), scale=0.3)
    assert_values_and_gradients_equal(out, reference, (q, k, v), torch.randn_like(out))
    inputs = (q.detach(), k.detach(), v.detach())
    honest = table_bias_attention(*inputs, **common)
    wrong = (slopes[0] + 0.1, slopes[1] - 0.1)
    assert not torch.allclose(table_bias_attention(*inputs, **common, tails=bounds,
                                                   tail_slopes=wrong), honest)  # fmt: skip
    monkeypatch.setenv("POSATTN_TRITON_TABLE_TAILS", "off")
    torch.testing.assert_close(
        table_bias_attention(*inputs, **common, tails=bounds, tail_slopes=wrong), honest
    )


def test_tails_are_refused_unless_ordered_integers_and_lines_unless_fixed(monkeypatch):
    from posattn.kernels import triton_bias

    q = torch.randn(1, 2, 5, 16)
    table = torch.randn(2, 9)
    for tails in [(6, 2), (1.5, 3), (1, 2, 3)]:
        with pytest.raises(PosAttnConfigError, match=r"tails=.*low <= high"):
            triton_bias.table_bias_attention(q, q, q, scale=0.25, table=table, tails=tails)
    slopes = (torch.ones(2), -torch.ones(2))
    learned = table.clone().requires_grad_()
    untie = (0, 0, torch.zeros(2))
    cases = [dict(table=learned, tails=(4, 4)), dict(table=table, tails=(4, 4), untie=untie),
             dict(table=table)]  # fmt: skip
    for arguments in cases:
        with pytest.raises(PosAttnConfigError, match=r"tail_slopes=.*no gradient"):
            triton_bias.table_bias_attention(q, q, q, scale=0.25, tail_slopes=slopes, **arguments)
    monkeypatch.setenv("POSATTN_TRITON_TABLE_TAILS", "maybe")
    with pytest.raises(PosAttnConfigError, match=r"POSATTN_TRITON_TABLE_TAILS='maybe'.*'on'"):
        triton_bias.table_bias_attention(q, q, q, scale=0.25, table=table)


# Every table-described encoding, the low-rank ones (folded), TUPE-R (T5's table plus folded
# factors), ones without a bias, and DIET's segment pairs inside attention (its table's
# gradient reduced in the kernel too).
MODELS = [
    ("t5", {}, False, "input"),
    ("t5", {"bidirectional": False, "num_buckets": 8, "max_distance": 10}, True, "input"),
    ("bert-r", {}, False, "input"),
    ("diet-rel", {"sharing": "none", "max_distance": 5}, False, "attention"),
    ("kerple", {"kernel": "log"}, True, "input"),
    ("alibi", {}, False, "input"),
    ("alibi", {}, True, "attention"),
    ("diet-abs", {"sharing": "none", "rank": 5}, False, "attention"),
    ("tupe-a", {"cls_index": 3}, False, "input"),
    ("tupe-r", {"cls_index": 3}, False, "input"),
    ("tupe-r", {"untie_cls": False, "bidirectional": False}, True, "input"),
    ("rope", {"layout": "half"}, True, "input"),
]


@pytest.mark.parametrize(("encoding", "options", "causal", "segments"), MODELS)
def test_models_equal_eager_in_values_and_parameter_gradients(encoding, options, causal, segments):
    ids, mask, segment_ids = padded_batch()
    # One layer: each layer's call is checked the same way, and the interpreter is slow.
    model = tiny_encoder(
        encoding, causal=causal, encoding_options=options, segments=segments, num_layers=1
    )
    assert_triton_equals_eager(model, ids, mask, segment_ids)


def assert_triton_equals_eager(model, ids, mask, segment_ids) -> None:
    """The model's outputs and every parameter gradient with kernel="triton" equal eager's
    (the loss over the real tokens; mask None: all of them)."""
    results = {}
    for kernel in ("eager", "triton"):
        model.set_kernel(kernel)
        model.zero_grad()
        out = model(ids, mask, segment_ids)
        (out if mask is None else out[mask]).square().sum().backward()
        results[kernel] = (out.detach(), [p.grad.clone() for p in model.parameters()])
    (out, grads), (out_ref, grads_ref) = results["triton"], results["eager"]
    torch.testing.assert_close(out, out_ref, atol=2e-5, rtol=2e-5)
    for ours, reference in zip(grads, grads_ref, strict=True):
        torch.testing.assert_close(ours, reference, atol=2e-4, rtol=2e-4)


@pytest.mark.parametrize(
    ("encoding", "options"), [("t5", {}), ("tupe-r", {"cls_index": 2}), ("tupe-a", {})]
)
def test_appending_padding_leaves_real_positions_unchanged(encoding, options):
    """Right-padding to a longer length (a longer table, other tile edges, more hidden keys)
    leaves the outputs at real tokens unchanged through kernel="triton"."""
    model = tiny_encoder(
        encoding, encoding_options=options, num_layers=1, kernel="triton", max_len=32
    )
    ids = torch.randint(1, 40, (2, 9), generator=torch.Generator().manual_seed(4))
    mask = torch.ones(2, 9, dtype=torch.bool)
    mask[1, 6:] = False
    padded_ids = torch.cat([ids, torch.zeros(2, 20, dtype=torch.long)], dim=1)
    padded_mask = torch.cat([mask, torch.zeros(2, 20, dtype=torch.bool)], dim=1)
    with torch.no_grad():
        out, padded = model(ids, mask), model(padded_ids, padded_mask)
    torch.testing.assert_close(padded[:, :9][mask], out[mask], atol=2e-6, rtol=2e-6)


# TUPE-R: the [CLS] untie's row before the decoded rows, its column among the cached keys.
@pytest.mark.parametrize(("encoding", "options"), [("alibi", {}), ("tupe-r", {"cls_index": 2})])
def test_decoding_with_a_cache_equals_the_full_forward(encoding, options):
    torch.manual_seed(0)
    config = tiny_config(encoding, causal=True, kernel="triton", encoding_options=options)
    model = PosAttnForCausalLM(config).eval()
    ids = torch.randint(1, 40, (2, 9))
    attention_mask = torch.ones(2, 9, dtype=torch.long)
    attention_mask[1, :3] = 0  # left padding
    with torch.no_grad():
        full = model(ids, attention_mask=attention_mask).logits
        cache, chunks, start = DynamicCache(config=model.config), [], 0
        for end in (4, 5, 9):
            chunks.append(
                model(
                    ids[:, start:end],
                    attention_mask=attention_mask[:, :end],
                    past_key_values=cache,
                    use_cache=True,
                ).logits
            )
            start = end
    torch.testing.assert_close(
        torch.cat(chunks, 1)[attention_mask.bool()],
        full[attention_mask.bool()],
        atol=2e-5,
        rtol=2e-5,
    )


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"encoding": "fire"}, r"encoding 'fire'.*no table description"),
        ({"encoding": "shaw", "encoding_options": {"values": True}}, r"'shaw'.*value-side"),
        ({"encoding": "deberta"}, r"'deberta'.*qk_logits"),
    ],
)
def test_configurations_it_cannot_serve_are_refused_at_construction(overrides, reason):
    encoding = overrides.pop("encoding")
    with pytest.raises(PosAttnConfigError, match=rf"kernel='triton'.*{reason}.*'sdpa'"):
        tiny_config(encoding, kernel="triton", **overrides)
    model = tiny_encoder(encoding, **overrides)
    with pytest.raises(PosAttnConfigError, match=rf"kernel='triton'.*{reason}"):
        model.set_kernel("triton")
    assert model.config.kernel == "auto"


def test_what_it_cannot_run_is_refused_when_called(monkeypatch):
    from posattn.kernels.triton_bias import table_bias_attention

    ids = torch.randint(1, 40, (2, 6))
    model = tiny_encoder("t5", kernel="triton").eval()
    q = k = v = torch.randn(1, 2, 5, 8)
    with pytest.raises(PosAttnConfigError, match=r"dropout_p=1.0 is not allowed: a probab"):
        table_bias_attention(q, k, v, scale=1.0, dropout_p=1.0)
    kernel = get_kernel("triton")
    with pytest.raises(PosAttnConfigError, match=r"kernel='triton'.*\[\.\., n_q, n_k\] values"):
        kernel(q, k, v, mask=None, bias=torch.zeros(2, 5, 5), scale=1.0)
    with pytest.raises(PosAttnConfigError, match=r"mask=.*build_attention_mask"):
        kernel(q, k, v, mask=torch.ones(1, 1, 5, 5, dtype=torch.bool), bias=None, scale=1.0)
    monkeypatch.delenv("TRITON_INTERPRET")
    with pytest.raises(PosAttnConfigError, match=r"kernel='triton'.*cpu.*TRITON_INTERPRET=1"):
        model(ids)
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    with pytest.raises(PosAttnConfigError, match=r"kernel='triton'.*pip install triton"):
        model(ids)


def test_auto_never_takes_triton_on_cpu(monkeypatch, choose):
    """On the CPU (the interpreter is for tests) `auto` keeps to SDPA's paths."""
    from posattn.kernels import table_bias

    calls = []
    monkeypatch.setattr(table_bias, "unavailable", lambda device: calls.append(1))
    choose(flex_threshold_bytes=0, triton_threshold_bytes=0)
    model = tiny_encoder("t5", kernel="auto")
    model(torch.randint(1, 40, (2, 6))).sum().backward()
    assert not calls


def test_gpu_tiles_come_from_the_table_or_the_environment(monkeypatch):
    """GPU tiles per kernel from `GPU_TILES`, overridden by POSATTN_TRITON_FORWARD / _DQ /
    _DK_DV (the sweep's knob); a malformed override is refused with the variable named. The
    CPU interpreter always takes its small tiles."""
    from posattn.kernels import triton_settings

    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    monkeypatch.delenv("POSATTN_TRITON_FORWARD", raising=False)
    assert triton_settings.tiles(cuda, "forward") == triton_settings.GPU_TILES["forward"]
    assert set(triton_settings.GPU_TILES) == {"forward", "dq", "dk_dv"}
    monkeypatch.setenv("POSATTN_TRITON_DQ", "32,64,8,3")
    monkeypatch.setenv("POSATTN_TRITON_DK_DV", "16,128,4,2")
    assert triton_settings.tiles(cuda, "dq") == triton_settings.Tiles(32, 64, 8, 3)
    assert triton_settings.tiles(cuda, "dk_dv") == triton_settings.Tiles(16, 128, 4, 2)
    assert triton_settings.tiles(cpu, "dk_dv") == triton_settings.INTERPRETER_TILES
    assert triton_settings.schedule(triton_settings.Tiles(32, 64, 8, 3), cuda) == dict(
        num_warps=8, num_stages=3, enable_fp_fusion=True
    )
    assert triton_settings.schedule(triton_settings.INTERPRETER_TILES, cpu) == {}
    # A fifth number caps the registers per thread (Triton's maxnreg) where q and k are at
    # most 64 wide and the keys fill whole blocks.
    monkeypatch.setenv("POSATTN_TRITON_FORWARD", "128,64,8,2,128")
    capped = triton_settings.tiles(cuda, "forward")
    assert capped == triton_settings.Tiles(128, 64, 8, 2, 128)
    assert capped.as_text() == "128,64,8,2,128"
    assert triton_settings.GPU_TILES["dq"].as_text() == "64,32,4,3"
    options = triton_settings.schedule(capped, cuda)
    assert options["maxnreg"] == 128
    assert triton_settings.launch_options(options, {"BLOCK_D": 64}) is options
    assert "maxnreg" not in triton_settings.launch_options(options, {"BLOCK_D": 128})
    assert "maxnreg" not in triton_settings.launch_options(options, {"BLOCK_D": 64}, True)
    assert "maxnreg" not in triton_settings.schedule(triton_settings.GPU_TILES["forward"], cuda)
    for bad in ("64,48,4,2", "64,64", "8,64,4,2", "a,b,c,d", "128,64,8,2,16", "128,64,8,2,256"):
        monkeypatch.setenv("POSATTN_TRITON_FORWARD", bad)
        with pytest.raises(PosAttnConfigError, match=rf"POSATTN_TRITON_FORWARD='{bad}'.*powers"):
            triton_settings.tiles(cuda, "forward")


def test_the_tables_gradient_is_the_same_by_every_mode(monkeypatch):
    """POSATTN_TRITON_TABLE_GRAD: the dQ kernel's diagonal sums into one table ("shared") or
    one per batch element ("per-batch", summed after), POSATTN_TRITON_SKEW: each half tile
    skewed zero-padded ("wide") or rotated in place ("circular", the interpreter's 16 x 16
    halves), and POSATTN_TRITON_DK_DV_ORDER: dK/dV's score tiles key-major or query-major,
    give the same gradients as eager, causal and padded decoding rows, with TUPE's [CLS]
    untie left out of the table's gradient; unknown values are refused by name."""
    from posattn.kernels import triton_settings

    torch.manual_seed(4)
    n_q, n_k, start = 21, 40, 19
    q = torch.randn(3, 2, n_q, 16, requires_grad=True)
    k, v = (torch.randn(3, 2, n_k, 16, requires_grad=True) for _ in range(2))
    table = torch.randn(2, n_q + n_k - 1, requires_grad=True)
    untie = ClsUntie(6, 25, torch.randn(2))  # its scores leave the table's gradient
    padding = torch.ones(3, n_k, dtype=torch.bool)
    padding[0, :5] = False
    mask = build_attention_mask(padding, n_k, True, torch.device("cpu"), start)
    grad = torch.randn(3, 2, n_q, 16)
    matrix = toeplitz_rows(table, n_q, n_k)
    bias = untie.applied(matrix)
    reference = eager_attention(q, k, v, mask=mask, bias=bias, scale=0.3)
    expected = torch.autograd.grad(reference, (q, k, v, table), grad)
    tables = TableBias(offset=table, cls_untie=untie)
    settings = [
        ("shared", "circular", "key-major"),
        ("per-batch", "circular", "query-major"),
        ("shared", "wide", "key-major"),
    ]
    for mode, skew, order in settings:
        monkeypatch.setenv("POSATTN_TRITON_TABLE_GRAD", mode)
        monkeypatch.setenv("POSATTN_TRITON_SKEW", skew)
        monkeypatch.setenv("POSATTN_TRITON_DK_DV_ORDER", order)
        out = get_kernel("triton")(q, k, v, mask=mask, bias=None, scale=0.3, tables=tables)
        ours = torch.autograd.grad(out, (q, k, v, table), grad)
        for name, a, b in zip(["q", "k", "v", "table"], ours, expected, strict=True):
            assert torch.allclose(a, b, atol=1e-5, rtol=1e-4), (mode, skew, order, name)
    assert set(triton_settings.TABLE_GRAD_MODES) == {"shared", "per-batch"}
    assert set(triton_settings.SKEWS) == {"wide", "circular"}
    assert set(triton_settings.DK_DV_ORDERS) == {"key-major", "query-major"}
    assert set(triton_settings.LAUNCHES) == {"direct", "triton"}
    assert set(triton_settings.KEY_RUN_CHOICES) == {"off", "on"}
    assert set(triton_settings.TABLE_CACHES) == {"l1", "l2"}
    # Refused by name where the backward reads them (the kernels' own choosers).
    choosers = {"DK_DV_ORDER": triton_settings.dk_dv_order, "SKEW": triton_settings.skew_choice,
                "TABLE_GRAD": triton_settings.table_grad_mode,
                "LAUNCH": triton_settings.launch_choice,
                "KEY_RUNS": triton_settings.key_runs_choice,
                "TABLE_CACHE": triton_settings.table_cache_choice}  # fmt: skip
    bad_values = [("DK_DV_ORDER", "rows"), ("SKEW", "diagonal"), ("TABLE_GRAD", "atomic"),
                  ("LAUNCH", "fast"), ("KEY_RUNS", "yes"), ("TABLE_CACHE", "l3")]  # fmt: skip
    for name, bad in bad_values:
        monkeypatch.setenv(f"POSATTN_TRITON_{name}", bad)
        with pytest.raises(PosAttnConfigError, match=rf"POSATTN_TRITON_{name}='{bad}'.*'"):
            choosers[name]()


def test_setting_values_change_with_each_variable_and_only_with_it(monkeypatch):
    """The key `call_settings` finds its settings under (`setting_values`, read from the dict
    os.environ keeps): each variable set, set to "", changed or deleted again moves it, and
    back to the same environment gives the same key; without that dict, os.environ.get's."""
    from posattn.kernels import triton_settings

    for variable in triton_settings.SETTING_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    unset = triton_settings.setting_values()
    assert len(unset) == len(triton_settings.SETTING_VARIABLES)
    seen = {unset}
    for variable in triton_settings.SETTING_VARIABLES:
        for value in ("", "on", "off"):
            monkeypatch.setenv(variable, value)
            key = triton_settings.setting_values()
            assert key not in seen, (variable, value)
            seen.add(key)
        monkeypatch.delenv(variable)
        assert triton_settings.setting_values() == unset
    monkeypatch.setenv("POSATTN_TRITON_SKEW", "wide")
    monkeypatch.setattr(triton_settings, "_ENCODED_NAMES", None)
    expected = tuple(map(os.environ.get, triton_settings.SETTING_VARIABLES))
    assert triton_settings.setting_values() == expected and "wide" in expected


def test_a_calls_settings_follow_the_environment_and_the_tile_chooser(monkeypatch):
    """`call_settings` keeps what it built per distinct environment (built per call, it cost
    host time), yet a changed variable or a replaced tile chooser applies from the next call,
    and a refused value is refused at every call, not kept."""
    from posattn.kernels import triton_settings

    for variable in triton_settings.SETTING_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    first = triton_settings.call_settings(cpu)
    assert triton_settings.call_settings(cpu) is first
    chosen = (first.key_major, first.skew, first.grad_mode, first.launch_mode, first.key_runs,
              first.table_l1)  # fmt: skip
    assert chosen == (True, "circular", "shared", "direct", False, True)
    interpreted = triton_settings.INTERPRETER_TILES
    assert first.tiles == dict.fromkeys(triton_settings.GPU_TILES, interpreted)
    assert first.schedules == {kind: {} for kind in triton_settings.GPU_TILES}
    assert first.longest_run == 32
    monkeypatch.setenv("POSATTN_TRITON_SKEW", "wide")
    monkeypatch.setenv("POSATTN_TRITON_DK_DV_ORDER", "query-major")
    monkeypatch.setenv("POSATTN_TRITON_TABLE_GRAD", "per-batch")
    monkeypatch.setenv("POSATTN_TRITON_LAUNCH", "triton")
    changed = triton_settings.call_settings(cpu)
    monkeypatch.setenv("POSATTN_TRITON_KEY_RUNS", "on")
    monkeypatch.setenv("POSATTN_TRITON_TABLE_CACHE", "l2")
    changed = triton_settings.call_settings(cpu)
    chosen = (changed.key_major, changed.skew, changed.grad_mode, changed.launch_mode)
    assert chosen == (False, "wide", "per-batch", "triton") and changed.key_runs
    assert not changed.table_l1
    monkeypatch.setenv("POSATTN_TRITON_FORWARD", "64,16,4,2")
    on_gpu = triton_settings.call_settings(cuda)
    overridden = triton_settings.Tiles(64, 16, 4, 2)
    assert on_gpu.tiles == {**triton_settings.GPU_TILES, "forward": overridden}
    fused = dict(enable_fp_fusion=True)
    assert on_gpu.schedules["forward"] == dict(num_warps=4, num_stages=2, **fused)
    assert on_gpu.schedules["dk_dv"] == dict(num_warps=8, num_stages=2, **fused)
    assert on_gpu.longest_run == 128
    small = triton_settings.Tiles(16, 64)
    monkeypatch.setattr(triton_settings, "tiles", lambda device, kind: small)
    assert triton_settings.call_settings(cpu).tiles["dq"] == small
    monkeypatch.setenv("POSATTN_TRITON_LAUNCH", "fast")
    for _ in range(2):
        with pytest.raises(PosAttnConfigError, match="POSATTN_TRITON_LAUNCH='fast'"):
            triton_settings.call_settings(cpu)


def test_the_gpu_default_tiles_equal_eager_under_the_interpreter(monkeypatch):
    """The GPU's own tile shapes, which the other tests' small interpreter tiles never take:
    the forward's 128 x 32, dQ's 64 x 32 with its two 32 x 32 halves rotated in place, and
    dK/dV's 128 keys key-major (the reversed table's copies padded for 128-long runs), at
    d_h=64 and n=136: two blocks of each kind, the last partial. Causal with left padding and
    TUPE's [CLS] untie, values and every gradient against eager."""
    from posattn.kernels import triton_settings

    gpu_tiles = triton_settings.GPU_TILES
    monkeypatch.setattr(triton_settings, "tiles", lambda device, kind: gpu_tiles[kind])
    monkeypatch.setenv("POSATTN_TRITON_SKEW", "circular")
    torch.manual_seed(5)
    n = 136
    q, k, v = (torch.randn(1, 1, n, 64, requires_grad=True) for _ in range(3))
    table = torch.randn(1, 2 * n - 1, requires_grad=True)
    untie = ClsUntie(9, 9, torch.randn(1))
    padding = torch.ones(1, n, dtype=torch.bool)
    padding[0, :9] = False
    mask = build_attention_mask(padding, n, True, torch.device("cpu"))
    grad = torch.randn(1, 1, n, 64)
    reference = eager_attention(
        q, k, v, mask=mask, bias=untie.applied(toeplitz_rows(table, n, n)), scale=0.125
    )
    tables = TableBias(offset=table, cls_untie=untie)
    out = get_kernel("triton")(q, k, v, mask=mask, bias=None, scale=0.125, tables=tables)
    assert_values_and_gradients_equal(out, reference, (q, k, v, table), grad)


def test_dk_dv_reads_filled_rows_where_its_query_blocks_outreach_the_forwards(monkeypatch):
    """dK/dV reads LSE and D unmasked up to the end of its last query block. Where an override
    makes those blocks longer than the forward's and dQ's (32 rows against 16), the rows they
    never write are filled first (+inf, 0): values and gradients still equal eager's."""
    from posattn.kernels import triton_settings

    chosen = {"forward": triton_settings.Tiles(16, 16), "dq": triton_settings.Tiles(16, 16)}
    chosen["dk_dv"] = triton_settings.Tiles(32, 16)
    monkeypatch.setattr(triton_settings, "tiles", lambda device, kind: chosen[kind])
    torch.manual_seed(6)
    n = 40  # 48 rows written, 64 read
    q, k, v = (torch.randn(2, 2, n, 16, requires_grad=True) for _ in range(3))
    table = torch.randn(2, 2 * n - 1, requires_grad=True)
    grad = torch.randn(2, 2, n, 16)
    reference = eager_attention(q, k, v, mask=None, bias=toeplitz_rows(table, n, n), scale=0.25)
    out = get_kernel("triton")(
        q, k, v, mask=None, bias=None, scale=0.25, tables=TableBias(offset=table)
    )
    assert_values_and_gradients_equal(out, reference, (q, k, v, table), grad)


def test_auto_hands_a_table_to_triton_only_where_it_serves_it(monkeypatch):
    """`serves_table`: a Toeplitz table of the right shape, a head size that fills a block
    (a folded bias widens it: 64 + 2 would pad to 128), and a mask the kernel reads (padding,
    causal, decoding rows, a key mask; not an arbitrary [B, 1, n, n] one such as packed
    documents)."""
    from posattn.kernels import table_bias

    monkeypatch.setattr(table_bias, "unavailable", lambda device: None)
    q, k = torch.randn(2, 4, 10, 64), torch.randn(2, 4, 10, 64)
    table = torch.randn(4, 19)
    padding = torch.ones(2, 10, dtype=torch.bool)
    padding[0, 7:] = False
    serves = table_bias.serves_table
    assert serves(q, k, table, None)
    for causal in (False, True):
        assert serves(q, k, table, build_attention_mask(padding, 10, causal, q.device))
    assert serves(q, k, table, padding[:, None, None, :])
    packed = torch.rand(2, 1, 10, 10) > 0.5
    assert not serves(q, k, table, packed)
    assert not serves(q, k, None, None)
    assert not serves(q, k, torch.randn(4, 17), None)
    folded = torch.randn(2, 4, 10, 66)
    assert not serves(folded, folded, table, None)
    # TUPE-R: the head size the kernel meets is the folded one, not q's
    assert serves(q, k, table, None, head_size=128)
    assert not serves(q, k, table, None, head_size=136)
    monkeypatch.setattr(table_bias, "unavailable", lambda device: "no GPU")
    assert not serves(q, k, table, None)


def test_auto_asks_about_tupe_r_at_its_folded_head_size(monkeypatch):
    """`auto` asks whether triton serves TUPE-R's table at the width its absolute part folds
    q and k to (head 8 + 8 here), in training, once per layer; out of training it never asks
    for it (no learned gradient)."""
    from posattn import attention

    asked = []

    def ask(q, k, table, mask, learned, head_size, inference):
        asked.append((q.shape[-1], head_size, learned, inference))
        return False

    monkeypatch.setattr(attention, "auto_takes_triton", ask)
    model = tiny_encoder("tupe-r", kernel="auto")
    ids = torch.randint(1, 40, (2, 6))
    model(ids).sum().backward()
    assert asked == [(8, 16, True, False)] * 2
    asked.clear()
    with torch.no_grad():
        model(ids)
    assert asked == [(8, 16, False, False)] * 2  # TUPE-R's folded forward stays with SDPA


def test_auto_asks_about_a_learned_table_with_attention_dropout(monkeypatch):
    """Attention dropout does not keep `auto` from the kernel (which drops scores itself): a
    learned table in training asks as a learned one, dropout on or off."""
    from posattn import attention

    asked = []
    monkeypatch.setattr(
        attention, "auto_takes_triton", lambda q, k, table, mask, learned, *_: asked.append(learned)
    )
    ids = torch.randint(1, 40, (2, 6))
    for dropout in (0.0, 0.1):
        model = tiny_encoder("t5", kernel="auto", attention_dropout=dropout).train()
        model(ids).sum().backward()
    assert asked == [True] * 4


def test_auto_asks_for_inference_with_a_table_alone(monkeypatch):
    """Without gradients `auto` asks about a plain table (T5) as inference, and by the size
    rule of `auto_takes_triton`: a learned table's gradient past 256 MiB (n=2048 at B=8, H=8
    in bf16, not 1024), in inference its float32 [H, n, n] bias past 1 GiB (n=8192 at H=8,
    not 4096); never off the GPU."""
    from posattn import attention
    from posattn.kernels import flex

    asked = []
    monkeypatch.setattr(
        attention, "auto_takes_triton", lambda *args: asked.append(args[4:]) or False
    )
    model = tiny_encoder("t5", kernel="auto")
    with torch.no_grad():
        model(torch.randint(1, 40, (2, 6)))
    assert asked == [(False, 8, True)] * 2
    asked.clear()
    with torch.no_grad():  # a head of 12 is asked about as 12: nothing folds to widen it
        tiny_encoder("t5", kernel="auto", d_model=36)(torch.randint(1, 40, (2, 6)))
    assert asked == [(False, 12, True)] * 2

    class Shaped:  # q or k as the rule reads them, on a GPU
        def __init__(self, n, device="cuda"):
            self.shape, self.device = (8, 8, n, 64), torch.device(device)

        def element_size(self):
            return 2

    monkeypatch.setattr(flex, "serves_table", lambda *args: True)
    rule = flex.auto_takes_triton
    for n, learned, inference, expected in [
        (2048, True, False, True), (1024, True, False, False),
        (8192, False, True, True), (4096, False, True, False), (8192, False, False, False),
    ]:  # fmt: skip
        q = Shaped(n)
        assert rule(q, q, None, None, learned, inference=inference) is expected, (n, learned)
    assert not rule(Shaped(8192, "cpu"), Shaped(8192, "cpu"), None, None, True, inference=True)


def count_dense_builds(monkeypatch) -> list:
    """A list that grows by one each time an encoding builds a Toeplitz bias from its table."""
    from posattn.encodings import base

    builds = []
    original = base.toeplitz
    monkeypatch.setattr(base, "toeplitz", lambda *a: builds.append(1) or original(*a))
    return builds


def training_steps(model, kernels, ids, builds) -> list:
    """Per kernel: (outputs, parameter gradients, dense-bias builds) of one forward + backward."""
    results = []
    for kernel in kernels:
        builds.clear()
        model.set_kernel(kernel)
        model.zero_grad()
        out = model(ids)
        out.square().sum().backward()
        grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
        results.append((out.detach(), grads, len(builds)))
    return results


@pytest.mark.parametrize("encoding", ["t5", "diet-rel", "kerple", "alibi"])
def test_the_triton_path_never_builds_the_dense_bias(monkeypatch, encoding):
    """A Toeplitz bias is described by its table and built only when read: kernel="triton"
    trains without the [H, n, n] tensor (no call of toeplitz), kernel="sdpa" builds it once per
    distinct layer terms (one for layers that share them), and both give the same outputs and
    gradients."""
    builds = count_dense_builds(monkeypatch)
    torch.set_default_dtype(torch.float32)
    try:
        model = tiny_encoder(encoding)
    finally:
        torch.set_default_dtype(torch.float64)
    ids = torch.randint(1, 40, (2, 9), generator=torch.Generator().manual_seed(0))
    results = training_steps(model, ("triton", "sdpa"), ids, builds)
    (out, grads, triton_builds), (out_ref, grads_ref, sdpa_builds) = results
    shared = encoding != "diet-rel"  # DIET-REL's default: a table per layer
    assert (triton_builds, sdpa_builds) == (0, 1 if shared else model.config.num_layers)
    torch.testing.assert_close(out, out_ref, atol=2e-5, rtol=2e-4)
    for ours, reference in zip(grads, grads_ref, strict=True):
        torch.testing.assert_close(ours, reference, atol=2e-5, rtol=2e-4)


def test_deferred_bias_is_built_once_and_decoding_rows_stay_deferred():
    """A deferred bias is built once, when first read, and decoding rows stay deferred. Rows
    of a bias with factors beside its table slice the whole bias; rows of a Toeplitz bias of
    its table alone come from the table, the whole [H, n, n] never built (cached decoding
    built it at every new token to keep one row)."""
    from posattn.encodings.base import DeferredBias, LayerTerms

    calls = []
    table = torch.randn(2, 9)
    factors = (torch.randn(1, 2, 5, 3), torch.randn(1, 2, 5, 3))

    def build():
        calls.append(1)
        return torch.ones(1, 2, 5, 5)

    terms = LayerTerms(scale=1.0, bias=build, bias_factors=factors, offset_bias=table)
    rows = terms.query_rows(3)
    assert not DeferredBias.is_built(terms) and not DeferredBias.is_built(rows) and not calls
    assert rows.bias.shape == (1, 2, 2, 5) and calls == [1]
    assert terms.bias is terms.bias and calls == [1]
    i, j = torch.meshgrid(torch.arange(5), torch.arange(5), indexing="ij")
    assert torch.equal(LayerTerms.of_table(1.0, table).bias[0], table[:, j - i + 4])
    whole = LayerTerms.of_table(1.0, table)
    for start in (1, 3, 4):
        rows = whole.query_rows(start)
        assert torch.equal(rows.bias[0], table[:, j - i + 4][:, start:])
        assert torch.equal(rows.offset_bias, table[:, :-start])
    twice = whole.query_rows(1).query_rows(2)  # rows of rows line up
    assert torch.equal(twice.bias[0], table[:, j - i + 4][:, 3:])
    assert not DeferredBias.is_built(whole)


@pytest.mark.parametrize("encoding", ["t5", "tupe-r"])
def test_auto_decides_for_triton_before_the_bias_is_built(monkeypatch, encoding):
    """Where `auto` would take the Triton kernel (GPU, large table; here the rule without its
    device and size parts), `attend` routes the layer there before reading `terms.bias`: no
    [H, n, n] bias is built, and outputs and gradients equal SDPA's (TUPE-R: its absolute
    part folded into q and k, 16 + 16 wide, its [CLS] untie read by the kernel). Without
    gradients (no learned bias to train) the ordinary path runs and builds it."""
    from posattn import attention
    from posattn.kernels.table_bias import serves_table

    def takes_triton(q, k, table, mask, learned, head_size, inference):
        return learned and serves_table(q, k, table, mask, head_size)

    monkeypatch.setattr(attention, "auto_takes_triton", takes_triton)
    calls = []
    original = attention.triton_attention
    monkeypatch.setattr(
        attention, "triton_attention", lambda *a, **kw: calls.append(1) or original(*a, **kw)
    )
    builds = count_dense_builds(monkeypatch)
    torch.set_default_dtype(torch.float32)
    try:
        model = tiny_encoder(encoding, num_heads=2, d_model=32)  # head size 16 fills a block
    finally:
        torch.set_default_dtype(torch.float64)
    ids = torch.randint(1, 40, (2, 9), generator=torch.Generator().manual_seed(0))
    results = training_steps(model, ("auto", "sdpa"), ids, builds)
    (out, grads, auto_builds), (out_ref, grads_ref, sdpa_builds) = results
    assert len(calls) == 2  # one per layer, in the auto step
    if encoding == "t5":  # T5's shared bias is built once per forward where it is built
        assert (auto_builds, sdpa_builds) == (0, 1)
    torch.testing.assert_close(out, out_ref, atol=2e-5, rtol=2e-4)
    for ours, reference in zip(grads, grads_ref, strict=True):
        torch.testing.assert_close(ours, reference, atol=2e-5, rtol=2e-4)
    model.set_kernel("auto")
    builds.clear()
    with torch.no_grad():
        torch.testing.assert_close(model(ids), out_ref, atol=2e-5, rtol=2e-4)
    assert len(calls) == 2
    if encoding == "t5":
        assert builds == [1]


@pytest.mark.parametrize(
    ("encoding", "options", "segments"),
    [("diet-rel", {"sharing": "none", "max_distance": 5}, "attention"),
     ("kerple", {"kernel": "log"}, "input"),
     ("tupe-r", {"cls_index": 35, "num_buckets": 8, "max_distance": 6}, "input"),
     ("alibi", {}, "input")],
)  # fmt: skip
def test_unmasked_models_equal_eager(encoding, options, segments):
    """Without padding or causality (n=40: two whole 16-key blocks and a part, one whole
    32-row block and a part; the table read from its aligned copies from every offset mod 4),
    segment pairs and the tables' gradients included. DIET-REL and TUPE-R (T5's buckets) are
    flat past offsets +-5 and +-6: the tile of rows 32-39 over keys 0-15 lies in the low tail
    (`offset_tails`; TUPE-R's [CLS] row 35 in it), read as one value per head; ALiBi's lines
    meet at 0, and every tile off the diagonal lies in one."""
    torch.manual_seed(1)
    ids = torch.randint(1, 40, (2, 40))
    segment_ids = (torch.arange(40) >= 23).long().expand(2, 40)
    model = tiny_encoder(
        encoding, encoding_options=options, segments=segments, max_len=40, num_layers=1
    )  # fmt: skip
    assert_triton_equals_eager(model, ids, None, segment_ids)


@pytest.mark.parametrize("with_reversed", [False, True])
def test_table_copies_hold_the_table_and_its_reverse_from_each_shift_and_zeros_past_the_end(
    with_reversed,
):
    """Copy c holds scale * table[:, c + x] and copy 4 + c scale * table[:, L - 1 - c - x]
    (the table reversed), each 0 where that index leaves the table, written entry by entry
    from the definition; float32 whatever the table's dtype, contiguous, its index made once
    per shape."""
    from posattn.kernels.triton_inputs import copies_index, table_copies

    table = torch.randn(3, 9).t().contiguous().t()  # heads not contiguous, as T5's table
    for source in (table, table.to(torch.bfloat16)):
        copies = table_copies(source, longest_run=16, scale=1.5, with_reversed=with_reversed)
        assert copies.dtype == torch.float32 and copies.is_contiguous()
        assert copies.shape == (3, 8 if with_reversed else 4, 32)  # 9 + 16 rounded up to 16
        expected = torch.zeros_like(copies)
        for shift in range(4):
            for x in range(32):
                if shift + x < 9:
                    expected[:, shift, x] = 1.5 * source[:, shift + x].float()
                    if with_reversed:
                        expected[:, 4 + shift, x] = 1.5 * source[:, 8 - shift - x].float()
        assert torch.equal(copies, expected)
    device = torch.device("cpu")
    assert copies_index(device, 9, 32, True) is copies_index(device, 9, 32, True)


# (head, rank, factor shape's batch and heads, a table): q's half and the factor's of one
# block (read as two halves), a factor narrower than its half, and one wider than q (read
# column-masked).
FACTOR_CASES = [(16, 16, 1, 3, True), (16, 5, 2, 3, False), (8, 16, 1, 1, True)]


@pytest.mark.parametrize(
    ("head", "rank", "factor_batch", "factor_heads", "with_table"), FACTOR_CASES
)
def test_factors_read_beside_q_and_k_equal_folding_them_in(
    head, rank, factor_batch, factor_heads, with_table, restore_determinism
):
    """A low-rank bias's factors given to the kernel (`factors`) give the values and the
    gradients of q, k, v and the table that folding them into q and k gives
    (`fold_into_queries_keys`: the layout the kernels read them in), to the bit; the factors'
    own gradients, summed by the kernels in float32 over what each is broadcast along (in the
    order their blocks run), to float32's rounding - and to the bit under
    torch.use_deterministic_algorithms (the two-halves case), where they come back beside q's
    and k's and are summed after. The folded copy is neither made nor kept for the
    backward."""
    from posattn.kernels.fold import fold_into_queries_keys
    from posattn.kernels.triton_bias import table_bias_attention

    torch.manual_seed(0)
    batch, heads, n = 2, 3, 33
    q, k, v = (torch.randn(batch, heads, n, head) for _ in range(3))
    f_q, f_k = (torch.randn(factor_batch, factor_heads, n, rank) for _ in range(2))
    table = torch.randn(heads, 2 * n - 1) if with_table else None
    keys = torch.ones(batch, n, dtype=torch.int8)
    keys[1, 30:] = 0
    leaves = [x for x in (q, k, v, table, f_q, f_k) if x is not None]
    grad = torch.randn(batch, heads, n, head)
    scale = 0.3

    def call(fold: bool):
        copies = [x.detach().clone().requires_grad_() for x in leaves]
        q_, k_, v_, *rest = copies
        table_ = rest.pop(0) if with_table else None
        factors = tuple(rest)
        if fold:
            q_, k_ = fold_into_queries_keys(q_, k_, factors, scale)
            factors = None
        out = table_bias_attention(
            q_, k_, v_, scale=scale, table=table_, keys=keys, factors=factors
        )
        # What the backward keeps, [B, ...] four-dimensional: its last widths.
        kept = out.grad_fn.saved_tensors
        widths = {t.shape[-1] for t in kept if t.dim() == 4 and t.shape[0] == batch}
        out.backward(grad)
        return out, [x.grad for x in copies], widths

    (out, grads, widths), (folded, folded_grads, folded_widths) = call(False), call(True)
    torch.testing.assert_close(out, folded, rtol=0, atol=0)
    for ours, reference in zip(grads[:-2], folded_grads[:-2], strict=True):
        torch.testing.assert_close(ours, reference, rtol=0, atol=0)
    for ours, reference in zip(grads[-2:], folded_grads[-2:], strict=True):
        torch.testing.assert_close(ours, reference, rtol=1e-5, atol=1e-5)
    wide = fold_into_queries_keys(q, k, (f_q, f_k), scale)[0].shape[-1]
    assert wide in folded_widths and wide not in widths and head in widths
    if rank != head:  # the deterministic path once (the interpreter's time)
        return
    torch.use_deterministic_algorithms(True)
    (out, grads, _), (folded, folded_grads, _) = call(False), call(True)
    for ours, reference in zip([out, *grads], [folded, *folded_grads], strict=True):
        torch.testing.assert_close(ours, reference, rtol=0, atol=0)


def test_factors_that_do_not_fit_q_and_k_are_refused_by_name():
    from posattn.kernels.triton_bias import table_bias_attention

    q = k = v = torch.randn(2, 3, 9, 16)
    for factors, named in (
        ((torch.randn(3, 9, 4), torch.randn(3, 9, 5)), "factors"),  # two widths
        ((torch.randn(3, 8, 4), torch.randn(3, 9, 4)), r"factors\[0\].shape"),  # rows
        ((torch.randn(4, 3, 9, 4), torch.randn(3, 9, 4)), r"factors\[0\].shape"),  # batch
    ):
        with pytest.raises(PosAttnConfigError, match=named):
            table_bias_attention(q, k, v, scale=0.25, factors=factors)


def test_a_models_factors_beside_or_folded_give_one_result(monkeypatch):
    """POSATTN_TRITON_FACTORS: a model's low-rank bias read beside q and k ("beside", the
    default) or folded into them ("folded") gives the same values and parameter gradients,
    bit for bit; any other value is refused by name."""
    from posattn.kernels import triton_bias

    ids, mask, segment_ids = padded_batch()
    model = tiny_encoder("tupe-r", kernel="triton", num_layers=1)
    called = triton_bias.table_bias_attention
    widths = []  # q's as the kernel meets it, and whether factors came beside it

    def recorded(q, k, v, **options):
        widths.append((q.shape[-1], options["factors"] is not None))
        return called(q, k, v, **options)

    monkeypatch.setattr(triton_bias, "table_bias_attention", recorded)
    results = []
    for layout in ("beside", "folded"):
        monkeypatch.setenv("POSATTN_TRITON_FACTORS", layout)
        model.zero_grad()
        out = model(ids, mask, segment_ids)
        out[mask].square().sum().backward()
        results.append([out.detach(), *(p.grad.clone() for p in model.parameters())])
    for ours, folded in zip(*results, strict=True):
        torch.testing.assert_close(ours, folded, rtol=0, atol=0)
    head = model.config.d_model // model.config.num_heads
    assert widths[0] == (head, True) and widths[1][0] > head and not widths[1][1]
    monkeypatch.setenv("POSATTN_TRITON_FACTORS", "inside")
    with pytest.raises(PosAttnConfigError, match="POSATTN_TRITON_FACTORS='inside'"):
        model(ids, mask, segment_ids)
