"""Translate text with a PosAttnForSeq2SeqLM: encode the sources once, decode with greedy or
beam search through a `NextTokenScorer`, detokenise."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor
from torch.nn import functional as F
from transformers import DynamicCache

from ...errors import invalid
from ...models.seq2seq import PosAttnForSeq2SeqLM
from ..runs.device import model_device
from .decoding import SearchSettings, beam_search, greedy_search


class RecomputingScorer:
    """Runs the decoder over the whole prefix at every step (no cache): the reference that
    the cached scorer must equal. Each source is repeated once per hypothesis row, and a row's
    parent always belongs to the same source, so the memory never needs reordering."""

    def __init__(self, model: PosAttnForSeq2SeqLM, memory: Tensor, memory_mask: Tensor):
        self.model = model
        self.memory_kv = model.decoder.memory_keys_values(memory)
        self.memory_mask = memory_mask

    def __call__(self, prefixes: Tensor, parents: Tensor) -> Tensor:
        prefixes = prefixes.to(self.memory_mask.device)
        logits = self.model.decode(prefixes, self.memory_kv, self.memory_mask)[:, -1]
        return F.log_softmax(logits.float(), dim=-1).cpu()


class CachedScorer:
    """Feeds the decoder only the newest token of each prefix: the self-attention keys and
    values of the earlier ones sit in a transformers `DynamicCache`, reordered by `parents`
    (beam search moves hypotheses between rows), and the source's cross-attention keys and
    values are computed once. Equal to `RecomputingScorer` (tests/test_translation.py)."""

    def __init__(self, model: PosAttnForSeq2SeqLM, memory: Tensor, memory_mask: Tensor):
        self.model = model
        self.memory_kv = model.decoder.memory_keys_values(memory)
        self.memory_mask = memory_mask
        self.cache: DynamicCache | None = None

    def __call__(self, prefixes: Tensor, parents: Tensor) -> Tensor:
        device = self.memory_mask.device
        if self.cache is None:
            self.cache, new = DynamicCache(), prefixes.to(device)
        else:
            self.cache.reorder_cache(parents.to(device))
            new = prefixes[:, -1:].to(device)
        logits = self.model.decode(new, self.memory_kv, self.memory_mask, cache=self.cache)
        return F.log_softmax(logits[:, -1].float(), dim=-1).cpu()


@dataclass
class Encoded:
    input_ids: Tensor
    attention_mask: Tensor
    truncated: list[int] = field(default_factory=list)  # indices of truncated sources


def encode_sources(tokenizer, sources: list[str], max_length: int, truncate: bool) -> Encoded:
    """Token ids (ending in </s>) padded to the longest; a source over `max_length` tokens is
    an error naming it, or is cut to `max_length` (keeping </s>) and recorded when `truncate`."""
    ids = tokenizer(sources, add_special_tokens=True)["input_ids"]
    truncated = []
    for index, row in enumerate(ids):
        if len(row) > max_length:
            if not truncate:
                raise invalid(
                    f"source {index + 1}",
                    f"{len(row)} tokens",
                    f"at most the model's max_len={max_length} tokens (</s> included); pass "
                    "truncate=True (--truncate) to cut longer sources, which is then reported",
                )
            ids[index] = [*row[: max_length - 1], tokenizer.eos_token_id]
            truncated.append(index)
    width = max(len(row) for row in ids)
    pad = tokenizer.pad_token_id
    input_ids = torch.tensor([row + [pad] * (width - len(row)) for row in ids])
    mask = torch.tensor([[1] * len(row) + [0] * (width - len(row)) for row in ids])
    return Encoded(input_ids, mask, truncated)


@torch.no_grad()
def translate_ids(
    model: PosAttnForSeq2SeqLM,
    input_ids: Tensor,
    attention_mask: Tensor,
    settings: SearchSettings,
    scorer_type=None,
) -> list[list[int]]:
    """Output token ids (without <s> and </s>) per source. beam_size 1 is greedy search. The
    model runs where its weights are (a GPU after training there); the searches run on the
    CPU, on the log-probabilities the scorer brings back."""
    model.eval()
    config = model.config
    k = settings.beam_size
    device = model_device(model)
    input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
    memory = model.encode(input_ids, attention_mask)
    # The decoder takes at most max_len inputs: <s> and max_len - 1 generated tokens, the
    # last of which may be </s>.
    limit = min(settings.max_new_tokens, config.max_len)
    rows = torch.arange(input_ids.shape[0], device=device).repeat_interleave(k)
    scorer = (scorer_type or CachedScorer)(model, memory[rows], attention_mask[rows])
    start, eos = config.decoder_start_token_id, config.eos_token_id
    if k == 1:
        return greedy_search(scorer, len(input_ids), start, eos, limit)
    bounded = SearchSettings(k, settings.length_penalty, limit)
    return beam_search(scorer, len(input_ids), start, eos, bounded)


def translate(
    model: PosAttnForSeq2SeqLM,
    tokenizer,
    sources: list[str],
    settings: SearchSettings,
    batch_size: int = 32,
    truncate: bool = False,
    scorer_type=None,
) -> tuple[list[str], list[int]]:
    """(detokenised translations, indices of the sources that were truncated)."""
    outputs, truncated = [], []
    for first in range(0, len(sources), batch_size):
        batch = encode_sources(
            tokenizer, sources[first : first + batch_size], model.config.max_len, truncate
        )
        truncated += [first + i for i in batch.truncated]
        ids = translate_ids(model, batch.input_ids, batch.attention_mask, settings, scorer_type)
        outputs += tokenizer.batch_decode(ids, skip_special_tokens=True)
    return outputs, truncated
