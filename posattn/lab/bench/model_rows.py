"""The model level of `posattn bench`: DIET Table 1's BERT-small with each encoding and
kernel, its train step and inference alternated with `learned`'s, as +% over it."""

from __future__ import annotations

from typing import Any

import torch

from ...errors import PosAttnConfigError
from ...models import PosAttnForMaskedLM
from ...models.config import PosAttnConfig
from .settings import BENCH_OPTIONS, CAUSAL_ONLY, BenchSettings
from .timing import autocast, collections_of_new_objects_only, free_memory, paired, step_functions


def bert_small(
    encoding: str,
    n: int,
    kernel: str = "auto",
    attention_dropout: float = 0.0,
    options: dict[str, Any] | None = None,
) -> PosAttnForMaskedLM:
    """DIET Table 1's BERT-small: 4 layers, hidden 512, 8 heads; no dropout inside attention
    unless asked for (`--attention-dropout`: BERT's 0.1), every model of the level alike.
    `options`: the encoding's (default: the bench's own, BENCH_OPTIONS)."""
    config = PosAttnConfig(
        vocab_size=30522, d_model=512, num_layers=4, num_heads=8, ffn_dim=2048, max_len=n,
        encoding=encoding,
        encoding_options=BENCH_OPTIONS.get(encoding, {}) if options is None else options,
        causal=encoding in CAUSAL_ONLY, kernel=kernel, attention_dropout=attention_dropout,
    )  # fmt: skip
    torch.manual_seed(0)
    return PosAttnForMaskedLM(config)


@collections_of_new_objects_only()
def model_level(s: BenchSettings, device) -> list[dict]:
    """Each encoding's train step and inference with each kernel against `learned`'s (default
    kernel), alternated step by step (the baseline model stays built), as +% over `learned`.
    A kernel that refuses an encoding is left out of this level (the attention level says why)."""
    rows = []
    dtype = s.torch_dtype(device)
    for n in s.model_lengths:
        learned = bert_small("learned", n, attention_dropout=s.attention_dropout).to(device)
        baseline = autocast(step_functions(learned, s.model_batch, n), device, dtype)
        for name in s.encodings:
            for kernel in s.kernels:
                try:
                    options = s.options_of(name)
                    model = bert_small(name, n, kernel, s.attention_dropout, options).to(device)
                    steps = autocast(step_functions(model, s.model_batch, n), device, dtype)
                    row = dict(encoding=name, kernel=kernel, n=n)
                    for key, base_fn, fn in zip(("train", "infer"), baseline, steps, strict=True):
                        timed = paired(base_fn, fn, s.repeats)
                        row[f"{key}_ms"], row[f"{key}_pct"] = timed.ms, 100 * (timed.ratio - 1)
                        row[f"{key}_pct_range"] = [100 * (timed.low - 1), 100 * (timed.high - 1)]
                    rows.append(row)
                except PosAttnConfigError as error:
                    print(f"skipped BERT-small {name} [{kernel}] n={n}: {error}")
                model = steps = None
                free_memory()
    return rows
