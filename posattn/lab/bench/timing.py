"""How the bench times a call: medians after a warm-up, a call alternated with its floor
(`paired`), the garbage collector kept to what the bench made, and the model level's
train step and inference."""

from __future__ import annotations

import gc
import statistics
import time
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from .memory import call_peak_mib


def now() -> float:
    """A wall-clock reading after the GPU's queued work is done."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter()


def measure(fn, repeats: int) -> tuple[float, float]:
    """(median ms, extra peak MiB) of fn after one warm-up call; the memory from one more
    call, outside the timed ones (`call_peak_mib`: on the CPU through the profiler)."""
    fn()
    gc.collect()
    times = []
    for _ in range(repeats):
        start = now()
        fn()
        times.append(1000 * (now() - start))
    return statistics.median(times), call_peak_mib(fn)


@dataclass(frozen=True)
class Paired:
    """A call timed against a floor, alternated: its median ms, and its ratio to the floor -
    the median, the least and the greatest over the alternated pairs (the spread a verdict
    reads beside the median)."""

    ms: float
    ratio: float
    low: float
    high: float


def paired(floor, fn, repeats: int) -> Paired:
    """fn timed against floor with the two calls alternated, so that the machine's slow
    spells hit both sides of every ratio. Python's garbage collector is held off while they
    run (as timeit does): a training step's autograd objects would otherwise start a
    collection inside whichever call happens to cross its threshold."""
    floor(), fn()
    times, ratios = [], []
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for _ in range(repeats):
            start = now()
            floor()
            middle = now()
            fn()
            end = now()
            times.append(1000 * (end - middle))
            ratios.append((end - middle) / (middle - start))
    finally:
        if was_enabled:
            gc.enable()
    return Paired(statistics.median(times), statistics.median(ratios), min(ratios), max(ratios))


def timed_fields(timed: Paired) -> dict:
    """A row's timing: ms, the median ratio and its spread (least, greatest)."""
    return dict(ms=timed.ms, ratio=timed.ratio, ratio_range=[timed.low, timed.high])


def free_memory() -> None:
    """Drop what the last measured call left behind (on GPU, the allocator's cache too)."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


@contextmanager
def collections_of_new_objects_only():
    """The objects that exist now (torch's, transformers', the caller's: some 380,000 once
    posattn is imported) moved out of the garbage collector's reach for the block
    (`gc.freeze`), then back (`gc.unfreeze`). Each measured call collects first (`measure`,
    `paired`, `free_memory`: three collections a row), and a full collection traversed them
    all, 0.26 s on the 2-core AMD CPU: more than the tiny calls it preceded, a third of a
    second per row of a GPU bench whose whole run has minutes. Frozen, a collection reaches
    what the bench itself made, which is what it has to free. Where objects are frozen
    already (an outer block, or the caller's own `gc.freeze`), left as it is: `gc.unfreeze`
    would hand back theirs too."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


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


def autocast(functions, device: torch.device, dtype: torch.dtype) -> list:
    """The step functions under autocast to `dtype` (float32: unchanged)."""
    if dtype == torch.float32:
        return list(functions)

    def wrapped(fn):
        def call() -> None:
            with torch.autocast(device.type, dtype=dtype):
                fn()

        return call

    return [wrapped(fn) for fn in functions]
