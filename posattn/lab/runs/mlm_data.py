"""Masked-LM data: full-sentence packing and BERT's 80/10/10 masking, made deterministic per
(seed, epoch, example) so that single-process, distributed and resumed runs see the same masks."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor
from torch.utils.data import Dataset


def pack_paragraphs(
    tokenizer, paragraphs: Iterable[str], seq_len: int, batch: int = 1000
) -> Tensor:
    """FULL-SENTENCES packing (RoBERTa, as TUPE and DIET pretrain): paragraphs tokenised,
    joined with [SEP] across paragraph boundaries, cut into [CLS] + (seq_len - 1) tokens.
    Returns [num_blocks, seq_len]; the incomplete tail is dropped."""
    stream: list[int] = []
    chunk: list[str] = []

    def flush() -> None:
        if not chunk:
            return
        # verbose=False: paragraphs longer than the model are expected here, they get cut
        for ids in tokenizer(chunk, add_special_tokens=False, verbose=False)["input_ids"]:
            stream.extend(ids)
            stream.append(tokenizer.sep_token_id)
        chunk.clear()

    for paragraph in paragraphs:
        chunk.append(paragraph)
        if len(chunk) == batch:
            flush()
    flush()
    body = seq_len - 1
    blocks = torch.tensor(stream[: len(stream) // body * body], dtype=torch.long).view(-1, body)
    cls = torch.full((blocks.shape[0], 1), tokenizer.cls_token_id, dtype=torch.long)
    return torch.cat([cls, blocks], dim=1)


class MaskedBlocks(Dataset):
    """Packed blocks with BERT masking: each non-special token is chosen with probability p;
    a chosen token becomes [MASK] 80%, a random token 10%, itself 10% (labels: the original
    token where chosen, -100 elsewhere). The draw depends only on (seed, epoch, index)."""

    def __init__(
        self,
        blocks: Tensor,
        mask_token_id: int,
        special_ids: Iterable[int],
        vocab_size: int,
        probability: float = 0.15,
        seed: int = 0,
    ) -> None:
        self.blocks = blocks
        self.mask_token_id = mask_token_id
        self.special = torch.tensor(sorted(set(special_ids)))
        self.vocab_size = vocab_size
        self.probability = probability
        self.seed = seed
        self.epoch = 0

    def __len__(self) -> int:
        return self.blocks.shape[0]

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __getitem__(self, index: int) -> dict[str, Tensor]:
        ids = self.blocks[index]
        generator = torch.Generator().manual_seed(
            (self.seed * 1_000_003 + self.epoch) * 1_000_003 + index
        )
        uniform = torch.rand(ids.shape, generator=generator)
        action = torch.rand(ids.shape, generator=generator)
        random_tokens = torch.randint(self.vocab_size, ids.shape, generator=generator)
        chosen = (uniform < self.probability) & ~torch.isin(ids, self.special)
        inputs = ids.clone()
        inputs[chosen & (action < 0.8)] = self.mask_token_id
        replace = chosen & (action >= 0.8) & (action < 0.9)
        inputs[replace] = random_tokens[replace]
        labels = torch.where(chosen, ids, torch.full_like(ids, -100))
        return {"input_ids": inputs, "labels": labels}
