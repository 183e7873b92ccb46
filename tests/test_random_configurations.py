"""Configurations drawn at random from a fixed seed: encoding, its options, heads, head size,
layers, LayerNorm placement, segments, direction and lengths together - the combinations no
parametrized test names. Each drawn model (float64, every parameter random) must give eager's
outputs and gradients through every CPU training kernel, ignore appended padding, decode with a
cache as it runs whole, and treat packed documents as if each ran alone."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest
import torch
from conftest import CAUSAL_ONLY, PROJECTED, REQUIRED_OPTIONS, random_encoder
from transformers import DynamicCache

from posattn import Encoder, PosAttnConfig, PosAttnConfigError
from posattn.encodings import ENCODINGS

KERNELS = ("sdpa", "sdpa-lowmem", "auto")
# Three configurations per encoding and property; a decoder's cache and packed documents need
# attention along the row, which Linformer's projected keys do not have.
EVERY = [(encoding, seed) for encoding in sorted(ENCODINGS) for seed in range(3)]
ALONG_THE_ROW = [(encoding, seed) for encoding, seed in EVERY if encoding not in PROJECTED]


def drawn_options(encoding: str, rng: random.Random) -> dict:
    """Options away from the defaults; combinations an encoding refuses are drawn again."""
    options = dict(REQUIRED_OPTIONS.get(encoding, {}))
    if encoding in ("rope", "xpos"):
        options["layout"] = rng.choice(["half", "interleaved"])
        options["fraction"] = rng.choice([1.0, 0.5])
    if encoding in ("t5", "bert-r", "tupe-r"):
        options["num_buckets"], options["max_distance"] = rng.choice([(4, 5), (8, 9), (32, 128)])
    if encoding in ("tupe-a", "tupe-r"):
        options["untie_cls"] = rng.random() < 0.7
        options["cls_index"] = rng.choice([0, 0, 1])
    if encoding == "diet-abs":
        options["rank"] = rng.choice([None, 1, 3])
        options["sharing"] = rng.choice(["layer", "none", "head"])
    if encoding == "diet-rel":
        options["max_distance"] = rng.choice([None, 1, 3])
        options["sharing"] = rng.choice(["none", "layer", "head"])
    if encoding == "shaw":
        options["max_distance"] = rng.choice([1, 3, 128])
        options["values"] = rng.random() < 0.5
    if encoding == "deberta":
        options["position_buckets"] = rng.choice([4, 8, 256])
        options["terms"] = rng.choice([("c2p", "p2c"), ("c2p",), ("p2c",)])
        options["share_att_key"] = rng.random() < 0.7
    if encoding == "kerple":
        options["kernel"] = rng.choice(["log", "power"])
    return options


@dataclass
class Drawn:
    config: PosAttnConfig
    lengths: list[int]  # the real tokens of each sequence of the batch, the first one longest

    @property
    def seq_len(self) -> int:
        return self.lengths[0]

    def describe(self) -> str:
        c = self.config
        return (
            f"{c.encoding} {c.encoding_options} causal={c.causal} segments={c.segments} "
            f"norm={c.norm} heads={c.num_heads} d_model={c.d_model} layers={c.num_layers} "
            f"max_len={c.max_len} lengths={self.lengths}"
        )


def draw(encoding: str, seed: int, *, causal: bool | None = None, segments: bool = True) -> Drawn:
    """A configuration of `encoding` posattn accepts, drawn from `seed` (refused draws are
    drawn again). causal: None draws the direction where the encoding has both."""
    rng = random.Random(f"random-configuration:{encoding}:{seed}")
    while True:
        if encoding in CAUSAL_ONLY or encoding in PROJECTED:
            wants_causal = encoding in CAUSAL_ONLY
        else:
            wants_causal = rng.random() < 0.5 if causal is None else causal
        heads, head_dim = rng.choice([1, 2, 3]), rng.choice([2, 4, 6])
        max_len = rng.choice([6, 9, 16])
        choices = ["none"] if wants_causal or not segments else ["input", "attention", "none"]
        try:
            config = PosAttnConfig(
                vocab_size=40,
                d_model=heads * head_dim,
                num_layers=rng.choice([1, 2]),
                num_heads=heads,
                ffn_dim=16,
                max_len=max_len,
                dropout=0.0,
                attention_dropout=0.0,
                norm=rng.choice(["pre", "post"]),
                encoding=encoding,
                encoding_options=drawn_options(encoding, rng),
                segments=rng.choice(choices),
                causal=wants_causal,
            )
            Encoder(config)  # options an encoding refuses only when it is built
        except PosAttnConfigError:
            continue
        longest = rng.randint(3, max_len - 2)
        lengths = [longest] + [rng.randint(1, longest) for _ in range(rng.randint(0, 2))]
        return Drawn(config, lengths)


def batch(drawn: Drawn, seed: int):
    """Right-padded ids, mask and segment ids [B, n] for `drawn.lengths` (the second segment
    from half of each sequence on)."""
    generator = torch.Generator().manual_seed(seed)
    n = drawn.seq_len
    ids = torch.randint(1, 40, (len(drawn.lengths), n), generator=generator)
    mask = torch.arange(n)[None] < torch.tensor(drawn.lengths)[:, None]
    segments = (torch.arange(n)[None] >= torch.tensor(drawn.lengths)[:, None] // 2).long()
    if drawn.config.segments == "none":  # a model without segments takes zeros only
        segments = torch.zeros_like(segments)
    return ids.masked_fill(~mask, 0), mask, segments


def padded(tensors, extra: int):
    """The batch with `extra` more padded positions at the end (pad id, mask and segment 0)."""
    return [torch.cat([t, t.new_zeros(t.shape[0], extra)], dim=1) for t in tensors]


@pytest.mark.parametrize(("encoding", "seed"), EVERY)
def test_every_cpu_kernel_gives_eagers_outputs_and_gradients(encoding, seed, choose):
    drawn = draw(encoding, seed)
    model = random_encoder(drawn.config, seed)
    ids, mask, segments = batch(drawn, seed)
    # the recomputing backward of sdpa-lowmem and auto at any size, and folded factors
    choose(recompute_threshold_bytes=0, fold=seed % 2 == 0)
    results = {}
    for kernel in ("eager", *KERNELS):
        model.set_kernel(kernel)
        model.zero_grad()
        out = model(ids, mask, segments)
        out[mask].square().sum().backward()
        results[kernel] = out[mask], {n: p.grad for n, p in model.named_parameters()}
    reference, reference_grads = results["eager"]
    for kernel in KERNELS:
        out, grads = results[kernel]
        message = f"kernel {kernel}, {drawn.describe()}"
        torch.testing.assert_close(out, reference, atol=1e-9, rtol=1e-9, msg=message)
        for name, grad in grads.items():
            expected = reference_grads[name]
            if expected is None:
                assert grad is None or not grad.any(), f"{name}: {message}"
                continue
            torch.testing.assert_close(
                grad, expected, atol=1e-8, rtol=1e-8, msg=f"{name}: {message}"
            )


@pytest.mark.parametrize(("encoding", "seed"), EVERY)
def test_appended_padding_changes_no_real_output(encoding, seed):
    drawn = draw(encoding, seed + 10)
    model = random_encoder(drawn.config, seed)
    ids, mask, segments = batch(drawn, seed)
    with torch.no_grad():
        out = model(ids, mask, segments)
        longer = model(*padded((ids, mask, segments), extra=2))
    torch.testing.assert_close(
        longer[:, : drawn.seq_len][mask], out[mask], atol=1e-10, rtol=1e-10, msg=drawn.describe()
    )


@pytest.mark.parametrize(("encoding", "seed"), ALONG_THE_ROW)
def test_decoding_with_a_cache_gives_the_whole_forwards_outputs(encoding, seed):
    drawn = draw(encoding, seed + 20, causal=True)
    model = random_encoder(drawn.config, seed)
    ids = batch(drawn, seed)[0].clamp(min=1)  # every sequence at the longest length
    # a forward shorter than TUPE's cls_index is refused: the prompt holds [CLS]
    cls_index = drawn.config.encoding_options.get("cls_index", 0)
    prompt = random.Random(seed).randint(cls_index + 1, drawn.seq_len - 1)
    with torch.no_grad():
        whole = model(ids)
        cache = DynamicCache()
        steps = [model(ids[:, :prompt], cache=cache)]
        for t in range(prompt, drawn.seq_len):
            steps.append(model(ids[:, t : t + 1], cache=cache))
    torch.testing.assert_close(
        torch.cat(steps, dim=1), whole, atol=1e-10, rtol=1e-10, msg=drawn.describe()
    )


@pytest.mark.parametrize(("encoding", "seed"), ALONG_THE_ROW)
def test_packed_documents_give_each_documents_own_outputs(encoding, seed):
    drawn = draw(encoding, seed + 30, segments=False)
    model = random_encoder(drawn.config, seed)
    documents = [torch.randint(1, 40, (1, length)) for length in drawn.lengths]
    # a document alone shorter than TUPE's cls_index is refused: each holds its [CLS]
    cls_index = drawn.config.encoding_options.get("cls_index", 0)
    documents = [d for d in documents if d.shape[1] > cls_index]
    positions = torch.cat([torch.arange(d.shape[1]) for d in documents])[None]
    with torch.no_grad():
        packed = model(torch.cat(documents, dim=1), position_ids=positions)
        alone = torch.cat([model(d) for d in documents], dim=1)
    torch.testing.assert_close(packed, alone, atol=1e-10, rtol=1e-10, msg=drawn.describe())


def test_the_draws_leave_the_defaults():
    """The draws cover what they claim to: draws that kept the defaults would test nothing
    the parametrized tests do not."""
    drawn = [draw(encoding, seed) for encoding, seed in EVERY]
    assert {d.config.causal for d in drawn} == {False, True}
    assert {d.config.segments for d in drawn} == {"input", "attention", "none"}
    assert {d.config.num_heads for d in drawn} == {1, 2, 3}
    assert {d.config.norm for d in drawn} == {"pre", "post"}
    assert {len(d.lengths) for d in drawn} == {1, 2, 3}
    changed = {d.config.encoding for d in drawn if d.config.encoding_options}
    assert changed >= {"t5", "tupe-a", "tupe-r", "diet-abs", "diet-rel", "shaw", "deberta"}
