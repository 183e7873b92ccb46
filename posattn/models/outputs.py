"""What a stack gathers for transformers' `output_hidden_states` and `output_attentions`."""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import Tensor


@dataclass
class StackRecord:
    """Filled by `Encoder.forward` / `Decoder.forward` when passed as `record`.

    hidden_states: the embeddings output, then each layer's output; with a final LayerNorm
        (pre-norm) the last entry is the normed output, so it always equals the stack's output
        (transformers' convention: num_layers + 1 entries).
    attentions / cross_attentions: per layer the probabilities [B, H, n_q, n_k] the values
        are multiplied by (the eager path runs for such a call).
    """

    hidden: bool = False
    attention: bool = False
    hidden_states: list[Tensor] = field(default_factory=list)
    attentions: list[Tensor] = field(default_factory=list)
    cross_attentions: list[Tensor] = field(default_factory=list)

    def add_hidden(self, x: Tensor) -> None:
        if self.hidden:
            self.hidden_states.append(x)

    def replace_last_hidden(self, x: Tensor) -> None:
        if self.hidden:
            self.hidden_states[-1] = x

    def outputs(self, name: str) -> tuple[Tensor, ...] | None:
        """The gathered list as the tuple transformers returns, or None when not asked for."""
        wanted = self.hidden if name == "hidden_states" else self.attention
        return tuple(getattr(self, name)) if wanted else None
