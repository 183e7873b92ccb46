"""TUPE Figure 4: the content-free positional logits of a bias method, per layer and head.

They are taken from the encoding itself (`PositionalEncoding.layer_terms(n)[l].bias`, the
tensor every layer adds to its logits), never rebuilt from the method's formula; layers that
share one bias tensor (TUPE, T5, DIET-ABS with sharing) form one group.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ...models.encoder import Encoder
from .structure import toeplitz_r2


def cls_index_of(encoder: Encoder) -> int:
    """Where [CLS] sits: the encoding's own option (TUPE) or BERT's position 0."""
    return getattr(encoder.encoding.options, "cls_index", 0)


@torch.no_grad()
def positional_logits(encoder: Encoder, seq_len: int) -> list[dict]:
    """[{"layers": [1-based layer numbers], "bias": [H, n, m]}] for each distinct bias; empty
    when the encoding adds no content-free logits (input, q/k transform, content x position)."""
    dtype = encoder.embeddings.word.weight.dtype
    device = encoder.embeddings.word.weight.device
    groups: list[dict] = []
    for layer, terms in enumerate(encoder.encoding.layer_terms(seq_len, device, dtype), start=1):
        if terms.bias is None:
            continue
        for group in groups:
            if group["tensor"] is terms.bias:
                group["layers"].append(layer)
                break
        else:
            bias = terms.bias.reshape(-1, *terms.bias.shape[-2:]).cpu()  # for the analyses
            groups.append({"layers": [layer], "tensor": terms.bias, "bias": bias})
    for group in groups:
        del group["tensor"]
    return groups


def cls_lines(bias: Tensor, cls_index: int) -> dict:
    """The [CLS] row and column of [H, n, n] per head (the column without the [CLS] row), with
    how far each is from constant (TUPE Eq. 9 makes both constant per head)."""
    n = bias.shape[-1]
    others = [i for i in range(bias.shape[-2]) if i != cls_index]
    row = bias[:, cls_index, :]
    column = bias[:, others, cls_index] if cls_index < n else bias[:, others, :0]
    spread = lambda v: (v.amax(-1) - v.amin(-1)).tolist() if v.shape[-1] else []  # noqa: E731
    return {
        "row_mean": row.mean(-1).tolist(),
        "row_spread": spread(row),
        "column_mean": column.mean(-1).tolist() if column.shape[-1] else [],
        "column_spread": spread(column),
    }


def relative_share(bias: Tensor, cls_index: int) -> dict | None:
    """Per head, the share of [H, n, n]'s within-row variance a function of j - i explains
    (Toeplitz R2): with every position, and without the [CLS] row and column (DIET App. C
    reads DIET-ABS's trained term as relative patterns plus one of its own at [CLS]). None
    for a bias over projected keys ([H, n, k], Linformer), which has no offsets."""
    n = bias.shape[-1]
    if bias.shape[-2] != n:
        return None
    return {
        "toeplitz_r2": toeplitz_r2(bias).tolist(),
        "toeplitz_r2_without_cls": toeplitz_r2(bias, without=cls_index).tolist(),
    }
