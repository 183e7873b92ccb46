"""Train-step and inference time of a model on a fixed batch (median after warm-up)."""

from __future__ import annotations

import statistics
import time

import torch


def _median_ms(fn, repeats: int, warmup: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def step_functions(model, batch_size: int, seq_len: int, foreach: bool | None = None):
    """(train_step, infer): one masked-LM AdamW step (forward, backward, update) and one
    encoder forward pass without gradients, on fixed random token ids. foreach: AdamW's
    multi-tensor update (None: torch's choice, which takes it on a GPU only)."""
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(5, model.config.vocab_size, (batch_size, seq_len), generator=generator)
    labels = torch.where(torch.rand(ids.shape, generator=generator) < 0.15, ids, -100)
    ids, labels = ids.to(model.device), labels.to(model.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6, foreach=foreach)

    def train_step() -> None:
        model.train()
        optimizer.zero_grad(set_to_none=True)
        model(ids, labels=labels).loss.backward()
        optimizer.step()

    @torch.no_grad()
    def infer() -> None:
        model.eval()
        model.posattn(ids)  # the encoder: positions cost nothing in the vocabulary head

    return train_step, infer


def step_times(model, batch_size: int, seq_len: int, repeats: int = 5, warmup: int = 2) -> dict:
    """{"train_ms", "infer_ms"} of `step_functions`, medians after warm-up."""
    train_step, infer = step_functions(model, batch_size, seq_len)
    return {
        "train_ms": _median_ms(train_step, repeats, warmup),
        "infer_ms": _median_ms(infer, repeats, warmup),
    }
