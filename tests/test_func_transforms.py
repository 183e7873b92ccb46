"""torch.func's transforms on posattn's models: grad, vmap over examples (per-sample
gradients) and jvp give autograd's values for every encoding (the masked LM; the causal LM,
the classifier and the encoder-decoder for four of them), with padding and labels, also
where eager autograd runs posattn's own autograd Functions (the CPU recomputing backward, the
pair rotation, the spread by offset, the transposed copy), which the transforms do not take;
kernels they cannot run through are refused by name.

Each model is in float64 with every parameter random (`randomised`), so that no term hides."""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import randomised, tiny_config, tiny_seq2seq_config
from packaging.version import Version
from torch.func import functional_call, grad, hessian, jvp, stack_module_state, vmap

from posattn import (
    PosAttnForCausalLM,
    PosAttnForMaskedLM,
    PosAttnForSeq2SeqLM,
    PosAttnForSequenceClassification,
)
from posattn.encodings.registry import ENCODINGS
from posattn.encodings.t5 import cached_buckets
from posattn.errors import PosAttnConfigError
from posattn.tracing import (
    active_transforms,
    read_on_host,
    requires_grad_beneath,
    traced,
    under_forward_mode,
    under_func_transform,
)

# Encodings whose eager training path runs an autograd Function of posattn's on the CPU once
# the recomputing backward is chosen for every learned bias (recompute_threshold_bytes=0),
# with that Function's backward node.
FUSED = {
    "t5": "FusedTableAttentionBackward",
    "tupe-r": "FusedPartsAttentionBackward",
    "diet-abs": "FusedPartsAttentionBackward",
    "shaw": "ByOffsetBackward",
    "deberta": "TransposedCopyBackward",
}


def model_of(encoding: str, **overrides) -> PosAttnForMaskedLM:
    config = tiny_config(encoding, **{"num_layers": 2, **overrides})
    return randomised(PosAttnForMaskedLM(config))


def batch(size: int = 3, n: int = 10):
    """Ids, a padding mask (the last example's last three tokens padded) and labels."""
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 40, (size, n), generator=generator)
    mask = torch.ones_like(ids)
    mask[-1, -3:] = 0
    labels = ids.masked_fill(torch.rand(ids.shape, generator=generator) < 0.5, -100)
    labels[:, 0] = ids[:, 0]  # every example has a label
    return ids, mask, labels


def example_loss(model):
    """loss(params, ids [n], mask [n], labels [n]) of one example, functional in params."""

    def loss(params, ids, mask, labels):
        inputs = dict(attention_mask=mask[None], labels=labels[None])
        return functional_call(model, params, (ids[None],), inputs).loss

    return loss


def parameters_of(model) -> dict:
    return {name: p.detach() for name, p in model.named_parameters()}


def autograd_gradients(model, ids, mask, labels) -> dict:
    model.zero_grad()
    model(ids, attention_mask=mask, labels=labels).loss.backward()
    return accumulated_gradients(model)


def accumulated_gradients(model) -> dict:
    """Copies of the gradients the model's parameters hold (those a backward reached)."""
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def backward_nodes(tensor) -> set[str]:
    """The names of every node of tensor's autograd graph."""
    names, seen, stack = set(), set(), [tensor.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        names.add(type(node).__name__)
        stack.extend(next_node for next_node, _ in node.next_functions)
    return names


def assert_per_sample_gradients(model, inputs: dict, rtol=1e-9, atol=1e-11) -> None:
    """vmap(grad) of the loss over the examples of `inputs` (input_ids, attention_mask,
    labels, ... as [B, n] tensors) equals one eager backward per example."""
    names = list(inputs)

    def loss(params, *example):
        batched = {name: value[None] for name, value in zip(names, example, strict=True)}
        return functional_call(model, params, (), batched).loss

    in_dims = (None, *[0] * len(names))
    got = vmap(grad(loss), in_dims=in_dims)(parameters_of(model), *inputs.values())
    for b in range(len(inputs["input_ids"])):
        model.zero_grad()
        model(**{name: value[b : b + 1] for name, value in inputs.items()}).loss.backward()
        expected = accumulated_gradients(model)
        assert_gradients_equal({name: g[b] for name, g in got.items()}, expected, rtol, atol)


def assert_gradients_equal(got: dict, expected: dict, rtol=1e-9, atol=1e-11) -> None:
    for name, value in expected.items():
        torch.testing.assert_close(got[name], value, rtol=rtol, atol=atol, msg=name)
    for name in got.keys() - expected.keys():  # parameters the loss does not reach
        assert not got[name].any(), name


def case_of(encoding: str) -> dict:
    options = {"layout": "half"} if encoding in ("rope", "xpos") else {}
    return dict(encoding_options=options) if options else {}


# Beside every encoding with its defaults: RoPE's other layout, Shaw's value term.
VARIANTS = {
    "rope-interleaved": ("rope", {"layout": "interleaved"}),
    "shaw-values": ("shaw", {"values": True}),
}
CASES = [*ENCODINGS, *VARIANTS]


def build(case: str, **overrides) -> PosAttnForMaskedLM:
    if case in VARIANTS:
        encoding, options = VARIANTS[case]
        return model_of(encoding, encoding_options=options, **overrides)
    return model_of(case, **case_of(case), **overrides)


@pytest.mark.parametrize("case", CASES)
def test_grad_equals_autograd(case):
    model = build(case)
    ids, mask, labels = batch(size=1)
    got = grad(example_loss(model))(parameters_of(model), ids[0], mask[0], labels[0])
    assert_gradients_equal(got, autograd_gradients(model, ids, mask, labels))


@pytest.mark.parametrize("case", CASES)
def test_per_sample_gradients_equal_one_backward_per_example(case):
    ids, mask, labels = batch()
    inputs = dict(input_ids=ids, attention_mask=mask, labels=labels)
    assert_per_sample_gradients(build(case), inputs)


@pytest.mark.parametrize("case", CASES)
def test_jvp_equals_the_gradient_along_the_tangent(case):
    """Forward mode: d/de loss(params + e t) at 0 is <grad loss, t>."""
    model = build(case)
    ids, mask, labels = batch(size=1)
    params = parameters_of(model)
    generator = torch.Generator().manual_seed(2)
    tangent = {name: torch.randn(p.shape, generator=generator) for name, p in params.items()}
    loss = example_loss(model)
    value, derivative = jvp(lambda p: loss(p, ids[0], mask[0], labels[0]), (params,), (tangent,))
    gradients = autograd_gradients(model, ids, mask, labels)
    expected = sum((gradients[name] * tangent[name]).sum() for name in gradients)
    torch.testing.assert_close(derivative, expected, rtol=1e-9, atol=1e-11)
    torch.testing.assert_close(value, model(ids, attention_mask=mask, labels=labels).loss)


@pytest.mark.parametrize("encoding", sorted(FUSED))
def test_transforms_equal_autograd_where_eager_runs_posattn_functions(encoding, choose):
    choose(recompute_threshold_bytes=0)  # the CPU recomputing backward for every learned bias
    model = model_of(encoding)
    ids, mask, labels = batch()
    loss = model(ids[:1], attention_mask=mask[:1], labels=labels[:1]).loss
    assert FUSED[encoding] in backward_nodes(loss)  # eager takes posattn's Function
    assert_per_sample_gradients(model, dict(input_ids=ids, attention_mask=mask, labels=labels))


def test_half_split_rotation_takes_the_pair_rotation_in_eager_autograd():
    model = model_of("rope", encoding_options={"layout": "half"})
    ids, mask, labels = batch(size=1)
    loss = model(ids, attention_mask=mask, labels=labels).loss
    assert "PairRotationBackward" in backward_nodes(loss)


def test_segments_inside_attention_under_vmap(choose):
    """DIET's segment bias (`segments="attention"`) beside a T5 table, per example."""
    choose(recompute_threshold_bytes=0)
    model = model_of("t5", segments="attention")
    ids, mask, labels = batch()
    segments = torch.zeros_like(ids)
    segments[:, 5:] = 1
    inputs = dict(input_ids=ids, attention_mask=mask, token_type_ids=segments, labels=labels)
    assert_per_sample_gradients(model, inputs)


def causal_lm(encoding):
    config = tiny_config(encoding, causal=True, segments="none", **case_of(encoding))
    return randomised(PosAttnForCausalLM(config)), lambda ids: ids


def classifier(encoding):
    config = tiny_config(encoding, num_labels=3, **case_of(encoding))
    return randomised(PosAttnForSequenceClassification(config)), lambda ids: ids[:, 0] % 3


def seq2seq(encoding):
    config = tiny_seq2seq_config(encoding, vocab_size=40, **case_of(encoding))
    return randomised(PosAttnForSeq2SeqLM(config)), lambda ids: ids.flip(-1)


@pytest.mark.parametrize("encoding", ["t5", "rope", "tupe-r", "deberta"])
@pytest.mark.parametrize("make", [causal_lm, classifier, seq2seq])
def test_per_sample_gradients_of_the_other_models(make, encoding):
    model, labels_of = make(encoding)
    ids, mask, _ = batch()
    inputs = dict(input_ids=ids, attention_mask=mask, labels=labels_of(ids))
    assert_per_sample_gradients(model, inputs)


@pytest.mark.parametrize("kernel", ["triton", "flex"])
def test_kernels_the_transforms_cannot_run_through_are_refused(kernel):
    model = model_of("t5", kernel=kernel)
    ids, mask, labels = batch(size=1)
    with pytest.raises(PosAttnConfigError) as error:
        grad(example_loss(model))(parameters_of(model), ids[0], mask[0], labels[0])
    message = str(error.value)
    assert f"kernel={kernel!r}" in message
    assert "torch.func" in message and "'auto', 'sdpa', 'sdpa-lowmem' or 'eager'" in message


def test_an_additive_mask_is_still_refused_under_grad():
    """Under grad the values are on the host: the padding mask's check runs."""
    model = model_of("t5")
    ids, _, labels = batch(size=1)
    additive = torch.zeros(ids.shape[1])
    additive[-2:] = float("-inf")
    with pytest.raises(PosAttnConfigError, match="attention_mask"):
        grad(example_loss(model))(parameters_of(model), ids[0], additive, labels[0])


def test_tracing_flags_and_host_reads():
    assert not under_func_transform() and not traced()
    assert read_on_host(torch.tensor(True), torch.tensor(3)) == (True, 3)
    seen = []

    def probe(x, y):
        seen.append((under_func_transform(), traced(), read_on_host((x > 0).all())))
        return (x * y).sum()

    grad(probe)(torch.ones(2), torch.ones(2))
    vmap(probe)(torch.ones(3, 2), torch.ones(3, 2))  # x batched: no value on the host
    vmap(probe, in_dims=(None, 0))(torch.ones(2), torch.ones(3, 2))  # x not batched: read
    assert seen == [(True, True, (True,)), (True, True, None), (True, True, (True,))]
    with pytest.raises(ValueError, match="one-element"):  # never taken for vmap's refusal
        vmap(lambda x: read_on_host(x.sum(), x[:2]) and x)(torch.ones(3, 2))


def hessian_of_a_bias(model, ids, labels, eager_autograd: bool) -> torch.Tensor:
    """The Hessian of the loss in the first layer's q projection bias: by torch.func, or by
    eager autograd's double backward (row by row)."""
    params = parameters_of(model)
    name = next(n for n in params if n.endswith("0.attention.q_proj.bias"))

    def loss(bias):
        return functional_call(model, {**params, name: bias}, (ids,), {"labels": labels}).loss

    if not eager_autograd:
        return hessian(loss)(params[name])
    bias = params[name].clone().requires_grad_()
    (gradient,) = torch.autograd.grad(loss(bias), bias, create_graph=True)
    rows = [torch.autograd.grad(g, bias, retain_graph=True)[0] for g in gradient]
    return torch.stack(rows)


@pytest.mark.parametrize("case", ["shaw", "shaw-values", "rope", "deberta", "tupe-r"])
def test_second_derivatives_of_eager_autograd_equal_torch_func(case):
    """kernel='eager' is twice differentiable in eager autograd (Shaw's spread by offset and
    RoPE's pair rotation included), and torch.func's Hessian through the default kernel
    equals it."""
    ids, _, labels = batch(size=1, n=8)
    eager = build(case, kernel="eager", num_layers=1)
    default = build(case, num_layers=1)
    expected = hessian_of_a_bias(eager, ids, labels, eager_autograd=True)
    torch.testing.assert_close(hessian_of_a_bias(default, ids, labels, False), expected)


def test_a_second_derivative_through_the_recomputing_backward_is_refused(choose):
    choose(recompute_threshold_bytes=0)
    model = model_of("t5", num_layers=1)
    ids, mask, labels = batch(size=2)
    loss = model(ids, attention_mask=mask, labels=labels).loss
    with pytest.raises(PosAttnConfigError, match=r"create_graph=True.*kernel='eager'"):
        torch.autograd.grad(loss, list(model.parameters()), create_graph=True)


def test_no_tensor_of_a_transform_is_left_in_the_bucket_cache():
    """Forward mode wraps even the T5 buckets: cached, they outlived the transform and broke
    the next model at that length (an internal assert of torch's in its backward)."""
    model = model_of("t5", num_layers=1)
    ids, mask, labels = batch(size=1, n=11)
    params = parameters_of(model)
    tangent = {name: torch.ones_like(p) for name, p in params.items()}
    jvp(lambda p: example_loss(model)(p, ids[0], mask[0], labels[0]), (params,), (tangent,))
    buckets = cached_buckets(11, "cpu", True, 32, 128)
    assert not torch._C._functorch.is_functorch_wrapped_tensor(buckets)
    expected = hessian_of_a_bias(
        model_of("bert-r", kernel="eager", num_layers=1), ids, labels, True
    )
    after = hessian_of_a_bias(model_of("bert-r", num_layers=1), ids, labels, False)
    torch.testing.assert_close(after, expected)


def test_forward_mode_is_told_from_grad_and_vmap():
    """SDPA's fused kernels serve grad and vmap; forward mode (jvp, and hessian's jacfwd
    over jacrev) takes the math path, the only one with a forward-mode derivative."""
    seen = []

    def probe(x):
        seen.append(under_forward_mode())
        return (x**3).sum()

    grad(probe)(torch.ones(2))
    vmap(grad(probe))(torch.ones(3, 2))
    jvp(probe, (torch.ones(2),), (torch.ones(2),))
    hessian(probe)(torch.ones(2))
    assert seen == [False, False, True, True] and not under_forward_mode()


def test_active_transforms_and_gradients_beneath_the_wrappers():
    """The kinds of the active levels (what refuses checkpointing), and whether a tensor
    requires grad beneath vmap's wrapper (a batched tensor says False for itself)."""
    seen, weight = [], torch.ones(2, requires_grad=True)

    def probe(x):
        product = x * weight
        seen.append((sorted(active_transforms()), requires_grad_beneath(product)))
        seen.append(requires_grad_beneath(x.detach()))
        return (product**3).sum()

    grad(probe)(torch.ones(2))
    vmap(probe)(torch.ones(3, 2))
    jvp(probe, (torch.ones(2),), (torch.ones(2),))
    hessian(probe)(torch.ones(2))
    assert seen == [
        (["Grad"], True), False,
        (["Vmap"], True), False,
        (["Jvp"], True), False,
        (["Grad", "Jvp", "Vmap"], True), False,
    ]  # fmt: skip
    assert active_transforms() == set() and not requires_grad_beneath(torch.ones(2))


@pytest.mark.parametrize("case", CASES)
def test_vmap_under_autograd_equals_one_backward_per_example(case):
    """vmap over the examples inside eager autograd (`vmap(loss)(...).sum().backward()`):
    the gradients of one backward per example, summed. Under vmap a learned bias had reached
    the CPU flash kernel, which has no gradient for its mask."""
    model = build(case)
    ids, mask, labels = batch()

    def loss(ids, mask, labels):
        return model(ids[None], attention_mask=mask[None], labels=labels[None]).loss

    model.zero_grad()
    vmap(loss)(ids, mask, labels).sum().backward()
    got = accumulated_gradients(model)
    model.zero_grad()
    for b in range(len(ids)):
        loss(ids[b], mask[b], labels[b]).backward()
    assert_gradients_equal(got, accumulated_gradients(model))


@pytest.mark.parametrize("case", CASES)
def test_an_ensemble_runs_under_vmap_over_its_stacked_parameters(case):
    """Model ensembling (`stack_module_state`, vmap over the models' parameters, a base on
    the meta device): each model's logits and loss gradients, with every positional
    parameter batched (FIRE read its threshold on the host to split its rows, which vmap
    cannot; the meta base had untied the output embeddings, see test_model)."""
    generator = torch.Generator().manual_seed(7)
    models = [build(case) for _ in range(3)]
    with torch.no_grad():
        for scale, model in enumerate(models):
            for p in model.parameters():
                p.add_(0.01 * scale * torch.randn(p.shape, generator=generator, dtype=p.dtype))
    params, buffers = stack_module_state(models)
    base = copy.deepcopy(models[0]).to("meta")  # torch's recipe: the base holds no values
    ids, mask, labels = batch()

    def logits(params, buffers):
        inputs = dict(attention_mask=mask)
        return functional_call(base, (params, buffers), (ids,), inputs).logits

    def loss(params, buffers):
        inputs = dict(attention_mask=mask, labels=labels)
        return functional_call(base, (params, buffers), (ids,), inputs).loss

    with torch.no_grad():
        got = vmap(logits)(params, buffers)
    for index, model in enumerate(models):
        expected = model(ids, attention_mask=mask).logits.detach()
        torch.testing.assert_close(got[index], expected, rtol=1e-10, atol=1e-12)
    gradients = vmap(grad(loss))(params, buffers)
    for index, model in enumerate(models):
        expected = autograd_gradients(model, ids, mask, labels)
        assert_gradients_equal({n: g[index] for n, g in gradients.items()}, expected)


def test_checkpointed_training_is_refused_by_name_under_grad_and_vmap():
    """torch's checkpoint runs under neither (saved-tensor hooks; a recomputation outside
    vmap): refused before a layer runs, naming the setting, where transformers' input hook
    failed on `requires_grad_()` first."""
    model = build("t5")
    model.activation_checkpointing_enable()
    model.train()
    ids, mask, labels = batch()
    params, example, dims = parameters_of(model), example_loss(model), (None, 0, 0, 0)
    calls = {
        "grad": lambda: grad(example)(params, ids[0], mask[0], labels[0]),
        "vmap": lambda: vmap(example, in_dims=dims)(params, ids, mask, labels),
        "vmap of grad": lambda: vmap(grad(example), in_dims=dims)(params, ids, mask, labels),
    }
    for name, call in calls.items():
        with pytest.raises(PosAttnConfigError, match="gradient_checkpointing=True"):
            call()
            pytest.fail(f"{name} ran")


@pytest.mark.skipif(
    Version(torch.__version__).release < (2, 12),
    reason="torch's checkpoint has no forward-mode rule before 2.12 (2.8.0 to 2.11.0: 'You must "
    "implement the jvp function'; 2.12.0 runs it), so jvp of a checkpointed model fails there",
)
def test_checkpointing_enabled_leaves_jvp_and_evaluation_under_a_transform_unchanged():
    """jvp runs the checkpointed layers (forward mode saves nothing); in eval mode, where no
    layer is checkpointed, vmap runs past transformers' input hook, which is inert under a
    transform."""
    model = build("t5")
    ids, mask, labels = batch()
    params = parameters_of(model)
    tangents = {name: torch.randn_like(p) for name, p in params.items()}

    def loss(params):
        inputs = dict(attention_mask=mask, labels=labels)
        return functional_call(model, params, (ids,), inputs).loss

    def logits(params, ids, mask):
        inputs = dict(attention_mask=mask[None])
        return functional_call(model, params, (ids[None],), inputs).logits[0]

    model.train()
    plain = jvp(loss, (params,), (tangents,))
    model.activation_checkpointing_enable()
    checkpointed = jvp(loss, (params,), (tangents,))
    torch.testing.assert_close(checkpointed, plain, rtol=1e-12, atol=1e-12)
    model.eval()
    batched = vmap(logits, in_dims=(None, 0, 0))(params, ids, mask)
    expected = model(ids, attention_mask=mask).logits
    torch.testing.assert_close(batched, expected, rtol=1e-10, atol=1e-12)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("encoding", ["t5", "tupe-r", "rope", "alibi"])
def test_per_sample_gradients_on_a_gpu(encoding, choose):
    """On a GPU, with `auto`'s thresholds at 0 (outside a transform it would hand these to
    triton or flex), per-sample gradients in float32 through SDPA equal one backward per
    example."""
    choose(triton_threshold_bytes=0, flex_threshold_bytes=0)
    model = build(encoding).float().cuda()
    ids, mask, labels = (t.cuda() for t in batch())
    inputs = dict(input_ids=ids, attention_mask=mask, labels=labels)
    assert_per_sample_gradients(model, inputs, rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize("case", ["t5", "rope", "shaw"])
def test_per_sample_gradients_compile_to_one_graph(case):
    """torch.compile of vmap(grad): one graph (fullgraph=True), eager vmap's values. The
    forward-mode test reads functorch's interpreter stack, which dynamo cannot trace: while
    compiling a transform it takes the math path instead."""
    torch._dynamo.reset()
    model = build(case)
    ids, mask, labels = batch()
    per_sample = vmap(grad(example_loss(model)), in_dims=(None, 0, 0, 0))
    expected = per_sample(parameters_of(model), ids, mask, labels)
    compiled = torch.compile(per_sample, backend="eager", fullgraph=True)
    got = compiled(parameters_of(model), ids, mask, labels)
    torch._dynamo.reset()
    assert_gradients_equal(got, expected)
