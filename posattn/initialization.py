"""Weight initialisation shared by the models and the encodings."""

from __future__ import annotations

from torch import Tensor, nn


def normal_(tensor: Tensor, std: float) -> Tensor:
    """Fill `tensor` from N(0, std) through `torch.nn.init.normal_`, looked up at each call so
    that transformers' guard during loading (parameters read from a checkpoint are kept)
    applies. A tensor on the meta device holds no values and is left as it is: torch draws
    there through a Python decomposition (about 1 ms a call on a 2-core CPU), which every
    config check (`PosAttnConfig` builds its encoding on the meta device) and every
    `from_pretrained` (models are built on the meta device, then loaded) paid per parameter."""
    if tensor.is_meta:
        return tensor
    return nn.init.normal_(tensor, std=std)
