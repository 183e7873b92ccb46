"""What `posattn bench` measures: lengths, sizes, encodings, kernels, dtype and the SDPA
kernels pinned beside the floor; checked before anything is timed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch.nn.attention import SDPBackend

from ...encodings import ENCODINGS
from ...encodings.registry import encoding_options
from ...errors import require_choice

# SDPA's kernels by the names the bench's rows give them.
SDPA_BACKENDS = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
}
# Options that the benchmark needs to build each encoding (rotary layouts are never implicit).
BENCH_OPTIONS = {"rope": {"layout": "half"}, "xpos": {"layout": "half"}}
CAUSAL_ONLY = ("xpos", "fire")


@dataclass
class BenchSettings:
    lengths: list[int] = field(default_factory=lambda: [128, 256, 512, 1024])
    batch: int = 8
    heads: int = 8
    head_dim: int = 64
    repeats: int = 5
    model_lengths: list[int] = field(default_factory=lambda: [128, 512])
    long_lengths: list[int] = field(default_factory=lambda: [512, 1024, 2048, 4096, 8192])
    long_batch: int = 1
    model_batch: int = 8
    encodings: list[str] = field(default_factory=lambda: list(ENCODINGS))
    # Attention kernels measured for every encoding ("auto" is what models use by default).
    kernels: list[str] = field(default_factory=lambda: ["auto"])
    # None: bfloat16 on GPU (autocast for models), float32 on CPU.
    dtype: str | None = None
    # SDPA's own kernels without a bias, each pinned, as ratios to the floor (SDPA's choice):
    # which one the floor is, and where the others stand. None: every GPU one on a GPU
    # (flash, cuDNN, memory-efficient), none on CPU.
    floor_backends: list[str] | None = None
    # The model level's dropout inside attention (every model, `learned`'s included).
    attention_dropout: float = 0.0
    # Options per encoding (`--option rope.layout=interleaved`), over BENCH_OPTIONS.
    encoding_options: dict[str, dict[str, Any]] = field(default_factory=dict)

    def options_of(self, encoding: str) -> dict[str, Any]:
        """The options encoding `encoding` is built with at every level."""
        return {**BENCH_OPTIONS.get(encoding, {}), **self.encoding_options.get(encoding, {})}

    def sdpa_backends(self, device: torch.device) -> list[str]:
        names = self.floor_backends
        if names is None:
            names = list(SDPA_BACKENDS) if device.type == "cuda" else []
        for name in names:
            require_choice("floor_backends", name, tuple(SDPA_BACKENDS))
        return names

    def check(self, device: torch.device) -> None:
        """Refuse, naming the setting, what the run could not measure: before its output
        folder is made and before anything is timed."""
        from ...kernels.registry import kernel_names

        for name in self.encodings:
            require_choice("encodings", name, tuple(ENCODINGS))
        for name in self.encoding_options:
            require_choice("--option's encoding", name, tuple(self.encodings))
            encoding_options(name, self.options_of(name))  # refuses an unknown or bad option
        for name in self.kernels:
            require_choice("kernels", name, tuple(kernel_names()))
        self.sdpa_backends(device)
        self.torch_dtype(device)

    def torch_dtype(self, device: torch.device) -> torch.dtype:
        name = self.dtype or ("bfloat16" if device.type == "cuda" else "float32")
        require_choice("dtype", name, ("float32", "bfloat16", "float16"))
        return getattr(torch, name)

    @classmethod
    def quick(cls) -> BenchSettings:
        return cls(
            lengths=[128, 256], repeats=3, model_lengths=[128], model_batch=4,
            long_lengths=[512, 1024],
            encodings=["learned", "shaw", "t5", "tupe-a", "tupe-r", "diet-abs", "diet-rel",
                       "rope", "alibi"],
        )  # fmt: skip
