"""A torch Dataset over a list of already-encoded examples (fine-tuning tasks, translation
pairs): the Trainer's data collators do the padding."""

from __future__ import annotations

import torch


class ListDataset(torch.utils.data.Dataset):
    def __init__(self, features: list[dict]) -> None:
        self.features = features

    def __len__(self) -> int:
        return len(self.features)

    def __getitem__(self, index: int) -> dict:
        return self.features[index]
