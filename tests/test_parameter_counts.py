"""DIET Table 6 at BERT-base size, as differences to BERT-A ([learned]); papers.md Sec. 2.3."""

from __future__ import annotations

import pytest
import torch

from posattn import Encoder, PosAttnConfig


def count(encoding: str, **options) -> int:
    config = PosAttnConfig(encoding=encoding, encoding_options=options)  # BERT-base defaults
    with torch.device("meta"):
        return sum(p.numel() for p in Encoder(config).parameters())


@pytest.fixture(scope="module")
def bert_a() -> int:
    return count("learned")


def test_bert_base_size(bert_a):
    # BERT-base without its pooler: 110.1M in DIET Table 6 includes the 0.59M pooler.
    assert bert_a + 768 * 768 + 768 == pytest.approx(109.48e6, abs=0.01e6)


@pytest.mark.parametrize(
    ("encoding", "options", "delta_millions"),
    [
        ("diet-abs", {"rank": 128, "sharing": "layer"}, 1.18),
        ("diet-abs", {"rank": 128, "sharing": "none"}, 18.48),
        ("diet-rel", {"sharing": "none"}, -0.25),
    ],
)
def test_diet_table6_deltas(bert_a, encoding, options, delta_millions):
    assert (count(encoding, **options) - bert_a) / 1e6 == pytest.approx(delta_millions, abs=0.005)


def test_diet_arithmetic_exactly(bert_a):
    table = 512 * 768
    assert count("diet-abs", rank=128) - bert_a == 12 * 2 * 512 * 128 - table
    assert count("diet-abs", rank=128, sharing="none") - bert_a == 12 * 12 * 2 * 512 * 128 - table
    assert count("diet-rel") - bert_a == 12 * 12 * 1023 - table


def test_tupe_adds_about_1_18m(bert_a):
    """TUPE Sec. 3.1: U^Q, U^K add about 2 x 768 x 768 = 1.18M (with their biases, the
    LayerNorm and the two theta rows), replacing nothing: the table moves inside attention."""
    extra = 2 * (768 * 768 + 768) + 2 * 768 + 2 * 768
    assert count("tupe-a") - bert_a == extra
