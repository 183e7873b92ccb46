"""No step waits on the host: a training step and an inference forward of every encoding, in
every kernel that trains on the CPU, read no device value on the host and copy no host data to
the device (`host_reads`). On a GPU either makes the host wait for the queued work. FIRE's one
read a layer is its design (`Fire.rows_below_threshold`) and is counted exactly."""

from __future__ import annotations

import collections

import pytest
import torch
from conftest import settings_of, tiny_encoder
from host_reads import HostReads
from test_kernels import padded_batch

from posattn.encodings import ENCODINGS
from posattn.kernels import build_attention_mask
from posattn.kernels.table_bias import key_rules

SETTINGS = [(name, *setting) for name in ENCODINGS for setting in settings_of(name)]
LAYERS = 2  # tiny_encoder's


def expected_reads(encoding: str, forwards: int) -> collections.Counter:
    """The reads a step may make: one a forward for the check that names out-of-range
    segment ids (`Encoder._check_inputs`), and FIRE's threshold once a layer (a shape depends
    on it) where its terms are built."""
    reads = collections.Counter(
        {("_local_scalar_dense", "models/encoder.py:_check_inputs"): forwards}
    )
    if encoding == "fire":
        reads[("_local_scalar_dense", "encodings/fire.py:rows_below_threshold")] = LAYERS
    return reads


def reads_of(step) -> collections.Counter:
    with HostReads() as reads:
        step()
    return reads.found


@pytest.mark.parametrize(("encoding", "causal", "segments"), SETTINGS)
@pytest.mark.parametrize("fold", [False, True])
@pytest.mark.parametrize("kernel", ["eager", "sdpa", "sdpa-lowmem"])
def test_a_training_step_and_inference_read_nothing_back(
    encoding, causal, segments, fold, kernel, choose
):
    choose(fold=fold)
    ids, mask, segment_ids = padded_batch()
    options = {"values": True} if encoding == "shaw" else {}
    model = tiny_encoder(
        encoding, causal=causal, segments=segments, kernel=kernel, encoding_options=options
    ).float()
    model.train()

    def train() -> None:
        with torch.enable_grad():
            model(ids, mask, segment_ids)[mask].square().sum().backward()

    def infer() -> None:
        with torch.no_grad():
            model(ids, mask, segment_ids)
            model(ids, segment_ids=segment_ids)  # no padding: another mask path

    train()  # first calls may build what later ones reuse
    assert reads_of(train) == expected_reads(encoding, forwards=1)
    model.eval()
    assert reads_of(infer) == expected_reads(encoding, forwards=2)


def test_a_parameter_free_encodings_terms_outlive_optimizer_steps():
    """ALiBi's terms depend on nothing an optimizer changes: built once in training, not at
    every step (they were rebuilt, and their slopes copied from host memory, each step)."""
    model = tiny_encoder("alibi").float().train()
    ids, mask, segment_ids = padded_batch()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    built = []
    layer_terms = model.encoding.layer_terms

    def counted(*args):
        built.append(args)
        return layer_terms(*args)

    model.encoding.layer_terms = counted
    with torch.enable_grad():
        for _ in range(3):
            model(ids, mask, segment_ids)[mask].square().sum().backward()
            optimizer.step()
    assert len(built) == 1


# (padding, causal, query_start): decoding rows come with a causal mask.
MASKS = [(False, False, 0), (True, False, 0), (False, True, 0), (True, True, 0), (False, True, 5),
         (True, True, 5)]  # fmt: skip


@pytest.mark.parametrize(("padding", "causal", "query_start"), MASKS)
def test_the_triton_kernels_mask_rules_read_nothing_back(padding, causal, query_start):
    """What kernel="triton" derives from a mask (keys, spans) is made on the device: a causal
    mask without padding filled its spans from a Python list (a copy from host memory)."""
    _, real, _ = padded_batch()
    mask = build_attention_mask(
        real if padding else None, 12, causal, torch.device("cpu"), query_start=query_start
    )
    with HostReads() as reads:
        rules = key_rules(mask, 4, 12)
    assert reads.found == collections.Counter()
    if causal and not padding:
        spans = rules[4]
        expected = torch.tensor([[0, 0, 12, 1]] * 4, dtype=torch.int32)
        assert torch.equal(spans, expected)


def test_host_reads_records_what_it_should():
    """The recorder itself: a scalar read, a list made a tensor and a nonzero are recorded;
    a Python scalar in arithmetic and ops on the device's tensors are not."""
    x = torch.arange(6.0)
    with HostReads() as reads:
        (x * 2.0 + 1).sum()
        torch.where(x > 2, x, torch.tensor(0.0))
    assert not reads.found
    with HostReads() as reads:
        float(x.sum())
        torch.tensor([1.0, 2.0])
        x.nonzero()
    assert sorted(op for op, _ in reads.found) == ["_local_scalar_dense", "lift_fresh", "nonzero"]
