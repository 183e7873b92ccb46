"""The harness's pytest side: transformers' markers, float32 as in transformers' own runs, and
posattn's classes in transformers' Auto name tables."""

from __future__ import annotations

import pytest
import torch
from transformers.models.auto import modeling_auto

# Markers transformers' tests carry (registered in transformers' own conftest).
MARKERS = ("accelerate_tests", "flash_attn_test", "flash_attn_3_test", "flash_attn_4_test")
MARKERS += ("torch_compile_test",)


def pytest_configure(config) -> None:
    for marker in MARKERS:
        config.addinivalue_line("markers", f"{marker}: a transformers test category")


@pytest.fixture(autouse=True)
def float32_default():
    """tests/conftest.py makes float64 the default for posattn's own tests; transformers' tests
    are written for float32 models."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float32)
    yield
    torch.set_default_dtype(previous)


# transformers' harness knows a head by its class name in the Auto tables of its own models
# (e.g. a masked LM gets token labels, a base model trains no loss). posattn registers its
# classes with the Auto classes at run time, which those tables do not list.
AUTO_TABLES = {
    "MODEL_MAPPING_NAMES": {"posattn": "PosAttnModel", "posattn-seq2seq": "PosAttnSeq2SeqModel"},
    "MODEL_FOR_MASKED_LM_MAPPING_NAMES": {"posattn": "PosAttnForMaskedLM"},
    "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES": {
        "posattn": "PosAttnForSequenceClassification"
    },
    "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES": {"posattn": "PosAttnForCausalLM"},
    "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES": {"posattn-seq2seq": "PosAttnForSeq2SeqLM"},
}


@pytest.fixture(autouse=True)
def posattn_in_auto_tables(monkeypatch):
    """List posattn's classes in transformers' Auto name tables while a harness test runs."""
    for table, entries in AUTO_TABLES.items():
        for model_type, class_name in entries.items():
            monkeypatch.setitem(getattr(modeling_auto, table), model_type, class_name)
