"""One probe cell: train a small model on one task with one encoding and seed, then measure
exact match and token accuracy at every test length."""

from __future__ import annotations

import random
import time

import torch
from torch.nn import functional as F
from transformers import get_cosine_schedule_with_warmup

from ...encodings import PositionalEncoding
from ...errors import PosAttnConfigError
from ...models import PosAttnForMaskedLM
from ...models.causal_lm import PosAttnForCausalLM
from ...models.config import PosAttnConfig
from ...models.segments import reads_segments
from ..runs.device import model_device, synchronize, to_device
from .settings import ProbeSettings
from .tasks import CAUSAL_LM, IGNORE, PAD, VOCAB_SIZE, ProbeTask

PAST_MAX_LEN = "cannot run past max_len"


def probe_config(task: ProbeTask, encoding: str, settings: ProbeSettings) -> PosAttnConfig:
    """A small pre-norm model without dropout; position tables hold train_len positions."""
    return PosAttnConfig(
        vocab_size=VOCAB_SIZE,
        d_model=settings.d_model,
        num_layers=settings.num_layers,
        num_heads=settings.num_heads,
        ffn_dim=settings.ffn_dim,
        max_len=settings.train_len,
        dropout=0.0,
        attention_dropout=0.0,
        norm="pre",
        encoding=settings.encoding_of(encoding),
        encoding_options=settings.options_of(encoding),
        segments=settings.segments,
        word_scale=settings.word_scale,
        causal=task.model == CAUSAL_LM,
        pad_token_id=PAD,
    )


def build_model(task: ProbeTask, encoding: str, settings: ProbeSettings):
    """A causal LM or a bidirectional encoder with a token-level head (the masked-LM head:
    vocabulary logits at every position)."""
    config = probe_config(task, encoding, settings)
    model_class = PosAttnForCausalLM if task.model == CAUSAL_LM else PosAttnForMaskedLM
    return model_class(config)


def encoding_of(model) -> PositionalEncoding:
    return next(m for m in model.modules() if isinstance(m, PositionalEncoding))


def logits_of(model, batch: dict) -> torch.Tensor:
    segments = batch["token_type_ids"] if reads_segments(model.config) else None
    return model(
        batch["input_ids"], attention_mask=batch["attention_mask"], token_type_ids=segments
    ).logits


def train(
    model, task: ProbeTask, settings: ProbeSettings, seed: int, position_lr_scale: float
) -> list[float]:
    """AdamW with warm-up and cosine decay, the encoding's position parameters at
    position_lr_scale times the rate; each batch has one length drawn uniformly from
    [task.min_length, train_len]. Returns the loss of every step."""
    rng = random.Random(f"probe:{task.name}:train:{seed}")
    # the position terms alone (Linformer's sequence projections keep the shared rate)
    positional = {id(p) for p in encoding_of(model).positional_parameters()}
    groups = [
        {
            "params": [p for p in model.parameters() if id(p) in positional],
            "lr": settings.learning_rate * position_lr_scale,
        },
        {"params": [p for p in model.parameters() if id(p) not in positional]},
    ]
    optimizer = torch.optim.AdamW(groups, lr=settings.learning_rate, weight_decay=0.01)
    schedule = get_cosine_schedule_with_warmup(optimizer, settings.steps // 10, settings.steps)
    model.train()
    device = model_device(model)
    losses = []
    for _ in range(settings.steps):
        length = rng.randint(task.min_length, settings.train_len)
        batch = to_device(task.batch(rng, settings.batch_size, length), device)
        logits = logits_of(model, batch)
        loss = F.cross_entropy(
            logits.flatten(0, 1), batch["targets"].flatten(), ignore_index=IGNORE
        )
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
    return losses


@torch.no_grad()
def evaluate(model, task: ProbeTask, length: int, examples: int, seed: int) -> dict:
    """Token accuracy over the scored positions and exact match (every scored position of an
    example right) on `examples` fresh examples of length `length` (teacher-forced for the
    causal LM: exact match then equals that of greedy decoding)."""
    rng = random.Random(f"probe:{task.name}:eval:{length}:{seed}")
    model.eval()
    device = model_device(model)
    correct = scored = exact = 0
    per_batch = max(1, min(examples, 8192 // length))
    for start in range(0, examples, per_batch):
        batch = to_device(task.batch(rng, min(per_batch, examples - start), length), device)
        targets = batch["targets"]
        keep = targets != IGNORE
        right = (logits_of(model, batch).argmax(-1) == targets) & keep
        correct += int(right.sum())
        scored += int(keep.sum())
        exact += int((right == keep).all(-1).sum())
    return {"token": correct / scored, "exact": exact / examples}


def run_cell(
    task: ProbeTask,
    encoding: str,
    seed: int,
    settings: ProbeSettings,
    device: torch.device | str = "cpu",
    position_lr_scale: float | None = None,
) -> dict:
    """The cell's result: status "ok" with per-length metrics, or "unsupported" with the
    reason (a causal-only encoding on an encoder task, a bidirectional-only one on a causal
    task). Lengths past an encoding's position table are marked PAST_MAX_LEN. The model
    trains on `device` (weights are drawn on the CPU first: the same on every device), its
    encoding's parameters at position_lr_scale times the rate (default: the first of
    settings.position_lr_scales)."""
    if position_lr_scale is None:
        position_lr_scale = settings.position_lr_scales[0]
    result = {
        "task": task.name,
        "encoding": encoding,
        "seed": seed,
        "position_lr_scale": position_lr_scale,
    }
    start, cpu_start = time.perf_counter(), time.process_time()
    torch.manual_seed(seed)
    try:
        model = build_model(task, encoding, settings).to(device)
    except PosAttnConfigError as error:
        return {**result, "status": "unsupported", "reason": str(error)}
    losses = train(model, task, settings, seed, position_lr_scale)
    limit = encoding_of(model).max_positions
    lengths = {}
    for length in settings.test_lens:
        if limit is not None and length > limit:
            lengths[str(length)] = {"status": PAST_MAX_LEN}
        else:
            lengths[str(length)] = evaluate(model, task, length, settings.eval_examples, seed)
    synchronize(torch.device(device))  # the clock below times finished work
    tail = losses[-max(1, len(losses) // 10) :]
    return {
        **result,
        "status": "ok",
        "final_train_loss": sum(tail) / len(tail),
        "lengths": lengths,
        "parameters": sum(p.numel() for p in model.parameters()),
        "seconds": time.perf_counter() - start,
        # CPU time of this process: on a shared machine, what the cell costs on a free core
        "cpu_seconds": time.process_time() - cpu_start,
    }
