"""transformers' common model tests (`ModelTesterMixin`, `ConfigTester`, and a generation
mixin) on every posattn model class, for encodings that cover each place a method acts.

The tests come from the installed transformers' sdist (`sdist.py`, fetched by `make test`); this
module only says what to run them on, as a model's `test_modeling_*.py` does in transformers.
Known gaps are marked in `known_gaps.py`; transformers skips what cannot apply (GPU, flash
attention, DeepSpeed, ...) with its reason, and `ONCE_PER_FAMILY` below thins out slow tests.
"""

from __future__ import annotations

import contextlib
import functools
import re
import unittest

import pytest

from posattn import PosAttnConfig, PosAttnSeq2SeqConfig

from .known_gaps import KNOWN_GAPS, gap_for
from .loader import load
from .tester import FAMILIES, GENERATES, PosAttnModelTester

try:
    modeling, configuration = load()
except LookupError as missing:
    pytest.skip(str(missing), allow_module_level=True)

# The generation mixin test_modeling_common checks testers against (a stand-in: standins.py).
GenerationTesterMixin = modeling.GenerationTesterMixin

# Each place an encoding acts, once: the input (learned table), q/k rotation (rope), a logit
# bias bucketed and shared by layers (t5), TUPE's untied [CLS] bias (tupe-r), a low-rank
# absolute bias (diet-abs), content x relative position (shaw), DeBERTa's disentangled terms
# with their own projections (deberta), a fixed non-learned bias held in buffers (alibi); and
# for the bidirectional encoder alone, keys and values projected along the sequence (linformer)
# and DIET's segment bias inside attention (tester.SETTINGS).
ENCODINGS = ("learned", "rope", "t5", "tupe-r", "diet-abs", "shaw", "deberta", "alibi")
MATRIX = {family: ENCODINGS for family in FAMILIES}
MATRIX["encoder"] += ("linformer", "diet-abs+segments")


class PosAttnCommonTests(modeling.ModelTesterMixin):
    """The harness's switches for posattn, each as transformers' model tests set them."""

    family: str
    encoding: str
    test_resize_position_embeddings = False
    # transformers runs this for models added from 2023 on (a copyright year posattn lacks).
    test_can_init_all_missing_weights_before_2023 = True

    def setUp(self) -> None:
        self.model_tester = PosAttnModelTester(self, self.family, self.encoding)
        config_class = PosAttnSeq2SeqConfig if self.family == "seq2seq" else PosAttnConfig
        self.config_tester = configuration.ConfigTester(
            self, config_class=config_class, **self.model_tester.config_kwargs(num_labels=None)
        )

    def test_config(self) -> None:
        self.config_tester.run_common_tests()


# Tests that cannot apply to posattn by design, each with its reason (skipped, not xfailed).
INAPPLICABLE = {
    "test_training_gradient_checkpointing_use_reentrant_true": (
        "reentrant checkpointing is refused by design: the positional terms are computed once "
        "and shared by the layers, which reentrant checkpointing cannot recompute"
    ),
    "test_sdpa_can_dispatch_non_composite_models": (
        "posattn's default kernel is 'auto' (SDPA, or FlexAttention for a large learned bias "
        "on GPU), reported truthfully as 'posattn-auto' rather than 'sdpa'"
    ),
}


def skipped_by_design(name: str, reason: str):
    def skip(self) -> None:
        self.skipTest(reason)

    skip.__name__ = name
    return skip


# Slow tests whose subject does not depend on the encoding, run for one encoding per family.
ONCE_PER_FAMILY = {"test_bc_torch_dtype": "learned"}


def skipped_as_slow(name: str, encoding: str):
    def skip(self) -> None:
        self.skipTest(f"slow and the same for every encoding: run with encoding={encoding!r}")

    skip.__name__ = name
    return skip


def known_gap(test, reason: str):
    """`test` marked xfail(strict=True), its subtests folded into it (see known_gaps.py)."""

    @functools.wraps(test)
    def folded(self, *args, **kwargs):
        self.subTest = lambda *_, **__: contextlib.nullcontext()
        return test(self, *args, **kwargs)

    return pytest.mark.xfail(strict=True, reason=reason)(folded)


def make_test_class(family: str, encoding: str) -> type:
    generation_classes = tuple(cls for cls in FAMILIES[family] if cls in GENERATES)
    mixins = (GenerationTesterMixin,) if generation_classes else ()
    label = "".join(part.capitalize() for part in re.split(r"[^a-z0-9]+", encoding))
    name = f"PosAttn{family.capitalize()}{label}Test"
    attributes = {
        test: skipped_as_slow(test, once)
        for test, once in ONCE_PER_FAMILY.items()
        if encoding != once
    }
    attributes |= {test: skipped_by_design(test, reason) for test, reason in INAPPLICABLE.items()}
    attributes |= {
        "generation_classes": generation_classes,
        "family": family,
        "encoding": encoding,
        "all_model_classes": FAMILIES[family],
        "is_encoder_decoder": family == "seq2seq",
        "__module__": __name__,
        "__qualname__": name,
    }
    cls = type(name, (PosAttnCommonTests, *mixins, unittest.TestCase), attributes)
    for test in KNOWN_GAPS:
        reason = gap_for(test, family, encoding)
        if reason is not None:
            setattr(cls, test, known_gap(getattr(cls, test), reason))
    return cls


for _family, _encodings in MATRIX.items():
    for _encoding in _encodings:
        _test = make_test_class(_family, _encoding)
        globals()[_test.__name__] = _test
del _family, _encodings, _encoding, _test
